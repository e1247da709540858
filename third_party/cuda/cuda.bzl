"""cuda_library: a cc_library whose .cu sources are compiled by nvcc.

`srcs` may mix `.cu` files (compiled by nvcc into objects) and `.cc` files
(compiled by the C++ toolchain against the CUDA headers). Keep nvcc's share
small: kernels and their launchers in `.cu`, everything touching Abseil or
the Plan in `.cc`.

nvcc is called by its absolute path (found by cuda_configure) and outside
Bazel's sandbox: inside it, nvcc reached through a symlinked repository cannot
find its own headers. A `.cu` file may include headers of its own package,
and the exported headers of other packages listed in `nvcc_hdrs` (they are
the genrule's declared inputs, so edits rebuild it).

Without a toolkit (or with --repo_env=TRAINC_NO_CUDA=1) cuda_library builds
`fallback_srcs` instead, so every target that depends on it still builds.
"""

load("@local_cuda//:config.bzl", "CUDA_ENABLED", "NVCC", "NVCC_INCLUDES")

# Machine code for sm_80 (A100; also runs on every 8.x: A10, L4, RTX 30/40)
# and sm_90 (H100/H200), plus compute_90 PTX for newer GPUs to JIT from.
NVCC_ARCH_FLAGS = " ".join([
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
])

def cuda_library(
        name,
        srcs,
        hdrs = [],
        deps = [],
        fallback_srcs = [],
        fallback_deps = [],
        copts = [],
        nvcc_copts = [],
        nvcc_hdrs = [],
        **kwargs):
    if not CUDA_ENABLED:
        native.cc_library(
            name = name,
            srcs = fallback_srcs,
            hdrs = hdrs,
            deps = deps + fallback_deps,
            copts = copts,
            **kwargs
        )
        return
    objs = []
    cc_srcs = []
    includes = " ".join(["-I" + inc for inc in NVCC_INCLUDES])
    for src in srcs:
        if not src.endswith(".cu"):
            cc_srcs.append(src)
            continue
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj.replace(".o", "_nvcc"),
            srcs = depset([src] + hdrs + nvcc_hdrs + native.glob(["**/*.h", "**/*.cuh"])).to_list(),
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17 -O3 -lineinfo -Xcompiler -fPIC",
                NVCC_ARCH_FLAGS,
                includes,
                "-I. -I$(GENDIR)",
                " ".join(nvcc_copts),
                "-c $(location " + src + ") -o $@",
            ]),
            tags = ["no-sandbox"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs + cc_srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        copts = copts,
        defines = ["TRAINC_HAVE_CUDA=1"],
        alwayslink = True,
        **kwargs
    )
