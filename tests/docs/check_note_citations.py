#!/usr/bin/env python3
"""Every citation of a Note names the file that defines it, and every Note cited is defined.

A Note is defined in a .h/.cc/.cu/.cuh file by a comment line that opens with its title,

    // Note [Worker CPUs]
    // Which CPUs does a worker thread run on? ...

(`///` too; the title may be followed by a parenthesis that names no file, and the essay goes
on in the next comment line). A Note with no such line is defined where a comment says
`Note [Title]: ...` at the start of a comment or of a sentence and goes on in the next line
(cuda_kernels/backend.cc's `// Note [Pooled streams]: a stream is never ...`).

Every `Note [Title]` in those files, in README.md and in docs/*.md is a citation. One that
names a file right after the title,

    Note [Worker CPUs] in pipeline/worker.cc      (Note [Worker CPUs], worker.cc)
    Note [Worker CPUs] (worker.cc)                Note [X] in [runtime.h](../pipeline/runtime.h)

must name the defining file: its path, or a tail of it (`worker.cc`) that no other file has
or that lies in the citing file's own folder. A citation without a file name is fine when the
Note is defined somewhere. A title may wrap onto the next line.

    tests/docs/check_note_citations.py [--root DIR]  # the tree under DIR (default .)
    tests/docs/check_note_citations.py --bazel-data  # //tests/docs:note_citations_test's data

Prints one line per broken citation (file:line, the Note, the file named, the defining file)
and a count; exits 1 when any is broken.
"""
import argparse
import collections
import os
import re
import sys

CODE = (".h", ".cc", ".cu", ".cuh")
# The fixture of //tests/docs:note_citations_test is broken on purpose.
SKIP_DIRS = {".git", "external", "tests/docs/note_fixture"}
GENERIC = {"...", "…"}  # "Note [...]" speaks of Notes and cites none

COMMENT = re.compile(r"^\s*//[/!]?\s?")
TITLE_LINE = re.compile(r"^\s*//[/!]?\s*Note \[([^\]]+)\](.*)$")
COLON_DEF = re.compile(r"(?:^\s*//[/!]?\s*|[.:]\s+)Note \[([^\]]+)\]:\s*\S")
FILE = r"[A-Za-z0-9_.+/-]*[A-Za-z0-9_-]\.(?:h|cc|cu|cuh|md|py|sh|bzl|bazel)(?![\w/])"
NAMED = re.compile(r"\s*(?:in\s+|\(\s*|,\s*)(?:"
                   r"\[`?(?P<text>[^\]`]+)`?\]\((?P<target>[^)\s#]+)[^)]*\)"
                   r"|`?(?P<file>" + FILE + r")`?)")
CITATION = re.compile(r"Note \[([^\]]+)\]")
MENTION = re.compile(r"Note\s+(?://[/!]?\s*)?\[")  # a title may start on the next line


def norm(title):
    return " ".join(title.split())


def in_scope(path):
    return path.endswith(CODE) or path == "README.md" or (
        path.startswith("docs/") and path.endswith(".md") and path.count("/") == 1)


def walk(root):
    """All files under root (paths relative to it), without bazel-* and SKIP_DIRS."""
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel + "/"
        dirs[:] = sorted(x for x in dirs
                         if not x.startswith("bazel-") and (rel + x) not in SKIP_DIRS)
        out += [rel + f for f in sorted(files)]
    return out


def read_lines(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")


def definitions(root, paths):
    """title -> {defining file: line of its definition}."""
    titled = collections.defaultdict(dict)
    colon = collections.defaultdict(dict)
    for path in paths:
        if not path.endswith(CODE):
            continue
        lines = read_lines(root, path)
        for i, line in enumerate(lines):
            after = lines[i + 1] if i + 1 < len(lines) else ""
            if not COMMENT.match(after):
                continue  # a one-line mention, not an essay
            m = TITLE_LINE.match(line)
            if m:
                rest = (m.group(2) + " " + COMMENT.sub("", after)).strip()
                own = re.fullmatch(r"\((?!\s*" + FILE + r")[^)]*\)", m.group(2).strip())
                if (m.group(2).strip() == "" and not NAMED.match(" " + rest)) or own:
                    titled[norm(m.group(1))].setdefault(path, i + 1)
                    continue
            if re.match(r"^\s*//[/!]?\s*\S", after):
                for m in COLON_DEF.finditer(line):
                    colon[norm(m.group(1))].setdefault(path, i + 1)
    defined = {}
    for title in set(titled) | set(colon):
        defined[title] = titled.get(title) or colon[title]
    return defined


def citations(root, path):
    """(line number, title, named file or None) for each Note the file mentions."""
    lines = read_lines(root, path)
    code = path.endswith(CODE)
    plain = [COMMENT.sub("", l) if code else l for l in lines]
    for i, line in enumerate(lines):
        if "Note" not in line:
            continue
        # The line and the two after it, comment markers dropped: a title or the file named
        # after it may wrap.
        text = line + " " + " ".join(p.strip() for p in plain[i + 1:i + 3])
        for m in CITATION.finditer(text):
            if m.start() >= len(line):
                break
            title = norm(m.group(1))
            if title in GENERIC:
                continue
            named = None
            n = NAMED.match(text, m.end())
            if n and n.group("target"):
                target = n.group("target")
                if "://" not in target:
                    named = os.path.normpath(os.path.join(os.path.dirname(path), target))
                else:
                    named = n.group("text")
            elif n:
                named = n.group("file")
            yield i + 1, title, named


def names(named, defining, citing, known):
    """Whether `named` (a path or a tail of one) names `defining` for a citation in `citing`."""
    named = named[2:] if named.startswith("./") else named
    if named == defining:
        return True, None
    if not defining.endswith("/" + named):
        return False, None
    same = [k for k in known if k == named or k.endswith("/" + named)]
    if len(same) == 1 or os.path.dirname(defining) == os.path.dirname(citing):
        return True, None
    return False, same


def check(root):
    paths = [p for p in walk(root) if in_scope(p)]
    defined = definitions(root, paths)
    problems, count = [], 0
    for title, where in sorted(defined.items()):
        if len(where) > 1:
            problems.append("Note [%s] is defined in %d files: %s (keep one; the others cite it "
                            "with its file)" % (title, len(where), ", ".join(
                                "%s:%d" % (f, where[f]) for f in sorted(where))))
    for path in paths:
        for line, title, named in citations(root, path):
            count += 1
            where = defined.get(title)
            if not where:
                problems.append("%s:%d: Note [%s] is defined nowhere (no comment opens with it "
                                "in a .h/.cc/.cu/.cuh file)" % (path, line, title))
                continue
            if named is None or len(where) > 1:
                continue
            defining = next(iter(where))
            ok, same = names(named, defining, path, paths)
            if ok:
                continue
            if same:
                problems.append("%s:%d: Note [%s] names %s, which is %s; it is defined in %s"
                                % (path, line, title, named, " or ".join(sorted(same)), defining))
            else:
                problems.append("%s:%d: Note [%s] names %s; it is defined in %s"
                                % (path, line, title, named, defining))
    for p in problems:
        print(p)
    print("%d citations of %d Notes, %d broken" % (count, len(defined), len(problems)))
    return not problems


def bazel_data(root):
    """The data of //tests/docs:note_citations_test: README.md, docs/'s markdown, and the
    `note_sources` filegroup (every .h/.cc/.cu/.cuh of the package) of each package that has a
    file defining or citing a Note, or sharing a defining file's name (so that the test sees a
    bare `runtime.cc` is ambiguous). A new file in such a package is seen without an edit here;
    a new package gets its filegroup and a line (the test fails until then: see main())."""
    return sorted(["//:README.md", "//docs:markdown"] +
                  ["//%s:note_sources" % p for p in note_packages(root)])


def note_packages(root):
    """The packages whose sources the check must see (bazel_data)."""
    paths = [p for p in walk(root) if in_scope(p)]
    defining = {f for where in definitions(root, paths).values() for f in where}
    shared = {os.path.basename(p) for p in defining}
    packages = set()
    for path in paths:
        if not path.endswith(CODE):
            continue
        if (os.path.basename(path) not in shared and
                not MENTION.search("\n".join(read_lines(root, path)))):
            continue
        package = os.path.dirname(path)
        while package and not any(os.path.exists(os.path.join(root, package, b))
                                  for b in ("BUILD", "BUILD.bazel")):
            package = os.path.dirname(package)
        packages.add(package)
    return packages


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=".")
    parser.add_argument("--bazel-data", action="store_true")
    args = parser.parse_args()
    if args.bazel_data:
        for label in bazel_data(args.root):
            print('        "%s",' % label)
        return 0
    return 0 if check(args.root) else 1


if __name__ == "__main__":
    sys.exit(main())
