"""cuda_library: nvcc-compiled .cu files wrapped in a cc_library.

No rules_cuda offline, so each .cu is compiled by one nvcc action and the
position-independent objects are handed to a cc_library, which links them
like any other object (no relocatable device code, so no device-link step).

Every target the macro makes is compatible only with --config=cuda
(//third_party:cuda_enabled): a default CPU `bazel build //...` skips them and
never runs nvcc. Depend on a cuda_library through
`select({"//third_party:cuda_enabled": [...], "//conditions:default": []})`
from targets that must also build without CUDA.
"""

NVCC = "/usr/local/cuda/bin/nvcc"

NVCC_FLAGS = [
    "-c",
    "-std=c++17",
    "-O3",
    "-Xcompiler",
    "-fPIC",
    "-ccbin",
    "/usr/bin/g++",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
    "-I/usr/local/cuda/include",
]

def cuda_only():
    """target_compatible_with value: compatible only under --config=cuda."""
    return select({
        "//third_party:cuda_enabled": [],
        "//conditions:default": ["@platforms//:incompatible"],
    })

def _nvcc_objects_impl(ctx):
    ccs = [d[CcInfo].compilation_context for d in ctx.attr.deps if CcInfo in d]
    headers = depset(
        ctx.files.hdrs,
        transitive = [c.headers for c in ccs],
    )
    includes = depset(transitive = [c.includes for c in ccs] +
                                   [c.quote_includes for c in ccs] +
                                   [c.system_includes for c in ccs])
    defines = depset(transitive = [c.defines for c in ccs])
    objs = []
    for src in ctx.files.srcs:
        stem = src.basename[:-len(src.extension) - 1]
        obj = ctx.actions.declare_file(
            "_objs/%s/%s.pic.o" % (ctx.label.name, stem),
        )
        args = ctx.actions.args()
        args.add_all(NVCC_FLAGS)
        args.add_all(ctx.attr.copts)
        args.add("-I.")
        args.add("-I" + ctx.bin_dir.path)
        args.add("-I" + ctx.genfiles_dir.path)
        args.add_all(includes, format_each = "-I%s")
        args.add_all(defines, format_each = "-D%s")
        args.add(src.path)
        args.add("-o", obj)
        # nvcc names its temporaries /tmp/tmpxft_<pid>_...; inside a PID
        # namespace (linux-sandbox) every nvcc is pid 2, so parallel actions
        # sharing /tmp overwrite each other's files. A fresh TMPDIR per
        # action keeps them apart.
        ctx.actions.run_shell(
            command = ('d="$(mktemp -d)" && trap \'rm -rf "$d"\' EXIT && ' +
                       'TMPDIR="$d" %s "$@"' % NVCC),
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        objs.append(obj)
    return [DefaultInfo(files = depset(objs))]

_nvcc_objects = rule(
    implementation = _nvcc_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], visibility = None, **kwargs):
    """A cc_library whose srcs are .cu files compiled by nvcc (sm_90)."""
    _nvcc_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps,
        copts = copts,
        target_compatible_with = cuda_only(),
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        target_compatible_with = cuda_only(),
        visibility = visibility,
        **kwargs
    )
