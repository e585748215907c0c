"""A repository rule for system packages that may be absent.

system_repo(name, paths, build_file, env_var) symlinks the first existing directory among
$env_var and `paths` into the repository as `sys/`, and uses `build_file` as its BUILD. When
none exists it writes a stub BUILD in which every target that `build_file` defines is an empty
library marked incompatible, so `bazel build //...` skips what needs the package instead of
failing (a plain new_local_repository on a missing path breaks every build).
"""

# "@//third_party/build:incompatible" in this repository, "@pipewright//..." when pipewright is
# an external repository of another workspace (a bare "@//" would name that workspace's).
_INCOMPATIBLE = "@%s//third_party/build:incompatible" % Label("//third_party/build:incompatible").workspace_name

def _target_names(content):
    names = []
    for line in content.splitlines():
        line = line.strip()
        if line.startswith("name = \""):
            names.append(line[len("name = \""):].split("\"")[0])
    return names

def _system_repo_impl(ctx):
    candidates = []
    if ctx.attr.env_var and ctx.os.environ.get(ctx.attr.env_var):
        candidates.append(ctx.os.environ.get(ctx.attr.env_var))
    candidates.extend(ctx.attr.paths)
    content = ctx.read(ctx.attr.build_file)
    for path in candidates:
        if ctx.path(path).exists:
            ctx.symlink(path, "sys")
            ctx.file("BUILD.bazel", content)
            ctx.file("defs.bzl", "PRESENT = True\nROOT = \"%s\"\n" % path)
            return
    stub = ['package(default_visibility = ["//visibility:public"])', ""]
    for name in _target_names(content):
        stub.append('cc_library(name = "%s", target_compatible_with = ["%s"])' % (name, _INCOMPATIBLE))
    ctx.file("BUILD.bazel", "\n".join(stub) + "\n")
    ctx.file("defs.bzl", "PRESENT = False\nROOT = \"\"\n")

system_repo = repository_rule(
    implementation = _system_repo_impl,
    attrs = {
        "paths": attr.string_list(doc = "Directories to try, in order."),
        "build_file": attr.label(allow_single_file = True),
        "env_var": attr.string(doc = "An environment variable that overrides `paths`."),
    },
    environ = ["CUDA_PATH"],
    local = True,
)
