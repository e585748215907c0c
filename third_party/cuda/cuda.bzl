"""cuda_library: compiles .cu files with nvcc and wraps the objects in a cc_library.

Bazel 4.2.3 has no CUDA rules and rules_cuda cannot be downloaded here, so this file is the
whole CUDA build. How it works:

    cuda_library(name = "k", srcs = ["a.cu", "b.cu"], hdrs = ["k.h"], deps = ["//tensor"])
        │
        ├── _cuda_objects(name = "k_cu")   one nvcc action per .cu file:
        │       nvcc -x cu -c -std=c++20 -O3 -ccbin <the C++ toolchain's compiler>
        │            -Xcompiler -fPIC -gencode=arch=compute_90,code=sm_90
        │            -gencode=arch=compute_90,code=compute_90
        │            -I/-isystem/-D from the CcInfo of `deps`  a.cu -o _objs/k/a.pic.o
        │
        └── cc_library(name = "k", srcs = [the objects], hdrs, deps + cudart)
                an ordinary C++ library from then on: cc_binary/cc_test link it as usual.

The rule (not a genrule) reads CcInfo of `deps`, so a .cu file includes project headers
("tensor/kernels.h") exactly like a .cc file does, and those headers are declared inputs.
nvcc is the toolkit's own binary at its real path (`ROOT/bin/nvcc`, from @cuda//:defs.bzl),
like /usr/bin/gcc for the C++ toolchain: it finds its own include/, nvvm/ and ptxas there.
sm_90 SASS (H100/H200) plus compute_90 PTX, which the driver can JIT for later GPUs.

Under --config=cudasim (--define=cudasim=on) there is no nvcc: the same .cu files are
compiled by the C++ toolchain as C++ (`-x c++`), with cudasim/device.h included first. That
header supplies what nvcc would (threadIdx, __syncthreads, __shfl_down_sync, atomics,
`__shared__`) and the PW_LAUNCH macro that cuda_kernels/launch.cuh otherwise defines as
`<<<>>>`; the objects link against //cudasim (the simulated runtime and executor) instead of
libcudart. See docs/cuda.md.

Every target made here is CUDA-only: incompatible (skipped by `bazel build //...`) unless
--config=cuda or --config=cudasim is set AND the toolkit was found (its headers are needed
either way; otherwise @cuda is a stub whose targets are incompatible too).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@cuda//:defs.bzl", CUDA_PRESENT = "PRESENT", CUDA_ROOT = "ROOT")

# This repository as a label prefix: "@" here, "@pipewright" when pipewright is an external
# repository of another workspace (a bare "@//" would name that workspace).
_REPO = "@" + Label("//third_party/build:cuda_on").workspace_name

# The constraint a CUDA-only target carries: compatible only with --config=cuda, and never
# when the toolkit is absent (then @cuda is a stub).
CUDA_ONLY = select({
    _REPO + "//third_party/build:cuda_on": [],
    _REPO + "//third_party/build:cudasim_on": [],
    "//conditions:default": [_REPO + "//third_party/build:incompatible"],
}) if CUDA_PRESENT else [_REPO + "//third_party/build:incompatible"]

# Only under --config=cudasim (the simulator itself; it compiles against the toolkit's headers).
CUDASIM_ONLY = select({
    _REPO + "//third_party/build:cudasim_on": [],
    "//conditions:default": [_REPO + "//third_party/build:incompatible"],
}) if CUDA_PRESENT else [_REPO + "//third_party/build:incompatible"]

# Only with the real toolkit (--config=cuda): nvcc objects, and targets that need a library
# cudasim does not simulate (cuDNN in the GPU benchmark).
CUDA_REAL_ONLY = select({
    _REPO + "//third_party/build:cuda_on": [],
    "//conditions:default": [_REPO + "//third_party/build:incompatible"],
}) if CUDA_PRESENT else [_REPO + "//third_party/build:incompatible"]

_NVCC_FLAGS = [
    "-x",
    "cu",
    "-c",
    "-std=c++20",
    "-O3",
    "-Xcompiler",
    "-fPIC",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
    # constexpr host functions (std::numeric_limits<T>::max()) usable in device code.
    "--expt-relaxed-constexpr",
]

def _is_toolkit_path(path):
    return path.startswith("external/cuda/") or "/external/cuda/" in path

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation_contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps if CcInfo in dep]

    # Include paths and defines, exactly as a cc_library depending on `deps` would see them.
    # The toolkit's own headers (@cuda) are left to nvcc, which finds them next to itself.
    args = []
    for cc in compilation_contexts:
        for d in cc.defines.to_list():
            args.append("-D" + d)
        for path in cc.includes.to_list() + cc.quote_includes.to_list():
            if not _is_toolkit_path(path):
                args.append("-I" + path)
        for path in cc.system_includes.to_list():
            if not _is_toolkit_path(path):
                args += ["-isystem", path]

    # Headers of this target and of its deps are the action's inputs (sandboxed, tracked).
    dep_headers = [
        h
        for cc in compilation_contexts
        for h in cc.headers.to_list()
        if h.owner.workspace_name != "cuda"
    ]
    headers = depset(ctx.files.hdrs + dep_headers)

    # -lineinfo in every mode: compute-sanitizer and ncu name source lines in optimised code
    # too (it adds line tables, not code).
    mode_flags = ["-DNDEBUG", "-lineinfo"] if ctx.var.get("COMPILATION_MODE") == "opt" else ["-g", "-lineinfo"]
    objects = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(src.extension) - 1]
        obj = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, stem))
        ctx.actions.run(
            executable = CUDA_ROOT + "/bin/nvcc",
            arguments = _NVCC_FLAGS + mode_flags + ["-ccbin", cc_toolchain.compiler_executable] +
                        args + ctx.attr.copts + [src.path, "-o", obj.path],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            mnemonic = "NvccCompile",
            use_default_shell_env = True,  # PATH, for gcc and the assembler nvcc runs
            progress_message = "nvcc %s" % src.short_path,
        )
        objects.append(obj)
    return [DefaultInfo(files = depset(objects))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = [".h", ".cuh"]),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(doc = "Extra nvcc flags."),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    fragments = ["cpp"],
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], alwayslink = False, **kwargs):
    """A C++ library whose .cu sources are compiled by nvcc (see the file comment).

    Args:
      name: the cc_library's name.
      srcs: .cu files (one nvcc action each).
      hdrs: headers of this library (.h for C++ callers, .cuh for device-side helpers).
      deps: C++ libraries whose headers the .cu files include and that the objects link to.
      copts: extra nvcc flags.
      alwayslink: keep every object at link time (static registration).
      **kwargs: passed to the cc_library (visibility, testonly, tags, ...).
    """
    _cuda_objects(
        name = name + "_cu",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        copts = copts,
        target_compatible_with = CUDA_REAL_ONLY,
        testonly = kwargs.get("testonly", False),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        # nvcc's objects, or under cudasim the .cu files themselves, compiled as C++.
        srcs = select({
            _REPO + "//third_party/build:cudasim_on": srcs,
            "//conditions:default": [":" + name + "_cu"],
        }),
        hdrs = hdrs,
        copts = select({
            _REPO + "//third_party/build:cudasim_on": ["-x", "c++", "-include", "cudasim/device.h"],
            "//conditions:default": [],
        }),
        deps = deps + select({
            _REPO + "//third_party/build:cudasim_on": [_REPO + "//cudasim"],
            "//conditions:default": ["@cuda//:cudart"],
        }),
        alwayslink = alwayslink,
        target_compatible_with = CUDA_ONLY,
        **kwargs
    )
