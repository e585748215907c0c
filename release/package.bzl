"""release_tarball: pipewright as an installed tree, packed as one tarball.

Bazel 4.2 has neither cc_static_library nor cc_shared_library, so this rule reads what a
cc_binary would link, the CcInfo of the public targets, and packs it itself:

    CcInfo of //:pipewright ──┬─ headers of this repository   → include/ (paths unchanged)
                              ├─ objects of its libraries       → lib/libpipewright.a and .so
                              ├─ system libraries' link flags   ─┐
                              └─ system include dirs, defines   ─┴→ lib/pkgconfig/*.pc,
    CcInfo of //:distributed, minus the above                       lib/cmake/pipewright/*
                              └──────────────────────────────── → lib/libpipewright_mpi.a/.so

    pipewright-VERSION-linux-x86_64[-cuda].tar.gz
      pipewright-VERSION/include/...      pipewright-VERSION/lib/...   share/doc/pipewright/

The objects are those the build of the same configuration compiled for every other target
(--force_pic: one .pic.o per source file), so a tarball after `tools/bazel build //...`
costs an ar, two links and a gzip (release/make_package.sh), no compile.

Paths of system packages are written as the packages' own (/usr/lib/x86_64-linux-gnu/...,
/usr/local/cuda/...), never as Bazel's external/<repo>/sys links. A system include dir, define
or library this rule does not know how to write fails the analysis naming it; the system
packages that no installed header includes are `private_deps` (their include dirs and defines
stay out of the package).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@cuda//:defs.bzl", CUDA_ROOT = "ROOT")
load("@mpi//:defs.bzl", MPI_ROOT = "ROOT")

# Where the sys/ link of each system repository points (third_party/system_repo.bzl).
_SYSTEM_ROOTS = {
    "cuda": CUDA_ROOT,
    "mpi": MPI_ROOT,
}

def _system_path(path):
    """external/mpi/sys/include -> /usr/lib/x86_64-linux-gnu/openmpi/include."""
    parts = path.split("/")
    root = _SYSTEM_ROOTS.get(parts[1]) if len(parts) >= 3 and parts[0] == "external" else None
    if root and parts[2] == "sys":
        return "/".join([root] + parts[3:])
    fail("release_tarball: no installed path for %s (a system package new to the package? " % path +
         "add its root to _SYSTEM_ROOTS in release/package.bzl, or to private_deps if no " +
         "installed header includes it)")

def _compile_interface(cc, private_contexts):
    """The include dirs (system paths) and defines a consumer of `cc` gets from system packages."""
    private_paths = {}
    private_defines = {}
    for context in private_contexts:
        for path in context.includes.to_list() + context.system_includes.to_list():
            private_paths[path] = True
        for define in context.defines.to_list():
            private_defines[define] = True
    context = cc.compilation_context
    includes = []
    for path in context.includes.to_list() + context.system_includes.to_list():
        # bazel-out/...: the twin of each include dir for generated headers.
        if path in private_paths or path.startswith("bazel-out/"):
            continue
        system = _system_path(path)
        if system not in includes:
            includes.append(system)
    defines = [d for d in context.defines.to_list() if d not in private_defines]
    return struct(includes = includes, defines = defines)

def _link_inputs(cc):
    """The link of `cc` as a cc_binary would do it, in link order.

    Returns struct(always, objects, flags): always and objects are the object files of this
    repository's libraries (always: of alwayslink ones, e.g. the kernel registrations), flags
    the system libraries (user link flags, and libraries given as files at their system path),
    each flag once, at its last place (a library after those that need it).
    """
    always, objects, flags = [], [], []
    for linker_input in cc.linking_context.linker_inputs.to_list():
        ours = linker_input.owner.workspace_name == ""
        for library in linker_input.libraries:
            if ours:
                files = library.pic_objects or library.objects
                if library.alwayslink:
                    always.extend(files)
                else:
                    objects.extend(files)
            else:
                file = (library.resolved_symlink_dynamic_library or library.dynamic_library or
                        library.static_library or library.pic_static_library)
                flags.append(_system_path(file.path))
        flags.extend(linker_input.user_link_flags)
    last = {}
    for i, flag in enumerate(flags):
        last[flag] = i
    flags = [flag for i, flag in enumerate(flags) if last[flag] == i]
    return struct(always = always, objects = objects, flags = flags)

def _headers(cc, exclude):
    """This repository's headers that `cc` exposes, as {install path: file}."""
    headers = {}
    for header in cc.compilation_context.headers.to_list():
        if header.owner.workspace_name != "" or header.short_path.startswith("third_party/"):
            continue
        if header.short_path not in exclude:
            headers[header.short_path] = header
    return headers

def _member(file):
    """A unique archive member name: pipeline/_objs/pipe/pipe.pic.o -> pipeline_pipe_pipe.o."""
    name = file.short_path.replace("/_objs/", "/").replace("/", "_")
    return name[:-len(".pic.o")] + ".o" if name.endswith(".pic.o") else name

def _lines(items):
    return "".join([item + "\n" for item in items])

def _object_list(files):
    return _lines(["%s %s" % (f.path, _member(f)) for f in files])

def _listing(ctx, name, content):
    """A file of the action's lists (release/make_package.sh's arguments)."""
    f = ctx.actions.declare_file("%s_files/%s" % (ctx.label.name, name))
    ctx.actions.write(f, content)
    return f

def _pc_flags(api):
    """pkg-config Cflags beyond the include dir: each with its leading space."""
    return "".join([" -I" + i for i in api.includes] + [" -D" + d for d in api.defines])

def _substitutions(version, cuda, core_soname, core_flags, core_api, mpi_soname, mpi_flags,
                   mpi_api):
    """The values of the .in files' @NAME@s (release/pipewright*.pc.in, *.cmake.in)."""
    return {
        "@VERSION@": version,
        "@MAJOR@": version.split(".")[0],
        "@MINOR@": version.split(".")[1],
        "@BACKENDS@": "CPU and CUDA" if cuda else "CPU",
        "@CUDA@": "TRUE" if cuda else "FALSE",
        "@CORE_SONAME@": core_soname,
        "@MPI_SONAME@": mpi_soname,
        # pkg-config: flags after a fixed start, each with its leading space.
        "@CORE_CFLAGS@": _pc_flags(core_api),
        "@CORE_LIBS_PRIVATE@": " ".join(core_flags),
        "@MPI_CFLAGS@": _pc_flags(mpi_api),
        "@MPI_LIBS@": "".join([" " + f for f in mpi_flags]),
        # CMake: lists.
        "@CORE_INCLUDES@": ";".join(core_api.includes),
        "@CORE_DEFINES@": ";".join(core_api.defines),
        "@CORE_LINK@": ";".join(core_flags),
        "@MPI_INCLUDES@": ";".join(mpi_api.includes),
        "@MPI_DEFINES@": ";".join(mpi_api.defines),
        "@MPI_LINK@": ";".join(mpi_flags),
    }

def _release_tarball_impl(ctx):
    version = ctx.attr.version
    top = "pipewright-" + version
    tarball = ctx.actions.declare_file("pipewright-%s-linux-x86_64%s.tar.gz" % (
        version,
        "-" + ctx.attr.variant if ctx.attr.variant else "",
    ))
    private = [dep[CcInfo].compilation_context for dep in ctx.attr.private_deps]

    core_cc = ctx.attr.library[CcInfo]
    core_link = _link_inputs(core_cc)
    core_api = _compile_interface(core_cc, private)
    headers = _headers(core_cc, ctx.attr.exclude_headers)
    core_soname = "libpipewright.so." + version

    mpi = ctx.attr.mpi_library != None
    mpi_objects, mpi_flags, mpi_link_flags = [], [], []
    mpi_api = struct(includes = [], defines = [])
    mpi_soname = "libpipewright_mpi.so." + version
    if mpi:
        mpi_cc = ctx.attr.mpi_library[CcInfo]
        mpi_link = _link_inputs(mpi_cc)
        core_files = {f: True for f in core_link.always + core_link.objects}
        if [f for f in mpi_link.always if f not in core_files]:
            # libpipewright_mpi.a has no merged object for them (release/make_package.sh).
            fail("release_tarball: an alwayslink library only in %s" % ctx.attr.mpi_library.label)
        mpi_objects = [f for f in mpi_link.objects if f not in core_files]
        # Linking libpipewright_mpi.so takes every system library its objects call (CUDA's for
        # NCCL too, though libpipewright.so names them already); its users get those apart
        # from libpipewright's through pipewright::pipewright / `Requires: pipewright`.
        mpi_link_flags = mpi_link.flags
        mpi_flags = [f for f in mpi_link.flags if f not in core_link.flags]
        all_mpi_api = _compile_interface(mpi_cc, private)
        mpi_api = struct(
            includes = [i for i in all_mpi_api.includes if i not in core_api.includes],
            defines = [d for d in all_mpi_api.defines if d not in core_api.defines],
        )
        for path, header in _headers(mpi_cc, ctx.attr.exclude_headers).items():
            headers[path] = header

    # The pkg-config and CMake files, filled in here: every value is known at analysis.
    substitutions = _substitutions(version, ctx.attr.variant == "cuda", core_soname,
                                   core_link.flags, core_api, mpi_soname, mpi_flags, mpi_api)
    placed = []  # (file, path in the tree)
    for template, path in [
        (ctx.file._pc, "lib/pkgconfig/pipewright.pc"),
        (ctx.file._config, "lib/cmake/pipewright/pipewrightConfig.cmake"),
        (ctx.file._config_version, "lib/cmake/pipewright/pipewrightConfigVersion.cmake"),
    ] + ([(ctx.file._mpi_pc, "lib/pkgconfig/pipewright-mpi.pc")] if mpi else []):
        out = ctx.actions.declare_file("%s_files/%s" % (ctx.label.name, path))
        ctx.actions.expand_template(template = template, output = out,
                                    substitutions = substitutions)
        placed.append((out, path))
    for doc in ctx.files.docs:
        placed.append((doc, "share/doc/pipewright/" + doc.basename))

    lists = {
        "--core-always": _listing(ctx, "core_always.txt", _object_list(core_link.always)),
        "--core-objects": _listing(ctx, "core_objects.txt", _object_list(core_link.objects)),
        "--core-flags": _listing(ctx, "core_flags.txt", _lines(core_link.flags)),
        "--mpi-objects": _listing(ctx, "mpi_objects.txt", _object_list(mpi_objects)),
        "--mpi-flags": _listing(ctx, "mpi_flags.txt", _lines(mpi_link_flags)),
        "--headers": _listing(ctx, "headers.txt", _lines([
            "%s include/%s" % (h.path, p)
            for p, h in sorted(headers.items())
        ])),
        "--files": _listing(ctx, "files.txt", _lines(["%s %s" % (f.path, p) for f, p in placed])),
    }

    cc_toolchain = find_cpp_toolchain(ctx)
    args = ctx.actions.args()
    args.add("--out", tarball)
    args.add("--top", top)
    args.add("--cc", cc_toolchain.compiler_executable)
    args.add("--ar", cc_toolchain.ar_executable)
    args.add("--core-soname", core_soname)
    args.add("--mpi-soname", mpi_soname if mpi else "")
    for flag, f in lists.items():
        args.add(flag, f)
    ctx.actions.run(
        executable = ctx.executable._make_package,
        arguments = [args],
        inputs = depset(
            core_link.always + core_link.objects + mpi_objects + headers.values() +
            [f for f, _ in placed] + lists.values(),
            transitive = [cc_toolchain.all_files],
        ),
        outputs = [tarball],
        mnemonic = "PipewrightPackage",
        progress_message = "Packing %s" % tarball.short_path,
        use_default_shell_env = True,  # PATH, for the assembler and linker gcc runs
    )
    return [DefaultInfo(files = depset([tarball]), runfiles = ctx.runfiles(files = [tarball]))]

release_tarball = rule(
    implementation = _release_tarball_impl,
    doc = "pipewright-VERSION-linux-x86_64[-VARIANT].tar.gz: the installed tree (file comment).",
    attrs = {
        "library": attr.label(
            providers = [CcInfo],
            mandatory = True,
            doc = "The library: libpipewright.",
        ),
        "mpi_library": attr.label(
            providers = [CcInfo],
            doc = "libpipewright_mpi: what it links beyond `library`.",
        ),
        "private_deps": attr.label_list(
            providers = [CcInfo],
            doc = "System packages no installed header includes: their include dirs and " +
                  "defines stay out.",
        ),
        "exclude_headers": attr.string_list(doc = "Headers of `library` not installed (paths)."),
        "docs": attr.label_list(allow_files = True, doc = "Files for share/doc/pipewright/."),
        "version": attr.string(mandatory = True),
        "variant": attr.string(doc = "Appended to the tarball's name (\"cuda\")."),
        "_pc": attr.label(allow_single_file = True, default = ":pipewright.pc.in"),
        "_mpi_pc": attr.label(allow_single_file = True, default = ":pipewright-mpi.pc.in"),
        "_config": attr.label(allow_single_file = True, default = ":pipewrightConfig.cmake.in"),
        "_config_version": attr.label(
            allow_single_file = True,
            default = ":pipewrightConfigVersion.cmake.in",
        ),
        "_make_package": attr.label(default = ":make_package", executable = True, cfg = "exec"),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)
