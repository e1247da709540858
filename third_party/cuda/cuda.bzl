"""cuda_library: compiles .cu files with nvcc into a cc_library.

nvcc is called by its absolute path (found by cuda_configure) and outside
Bazel's sandbox: inside it, nvcc reached through a symlinked repository cannot
find its own headers. Without a toolkit, cuda_library builds `fallback_srcs`
instead, so every target that depends on it still builds.
"""

load("@local_cuda//:config.bzl", "CUDA_ENABLED", "NVCC", "NVCC_INCLUDES")

# sm_90 (H100/H200) machine code plus PTX for newer GPUs to JIT from.
NVCC_ARCH_FLAGS = "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"

def cuda_library(name, srcs, hdrs = [], deps = [], fallback_srcs = [], copts = [], **kwargs):
    if not CUDA_ENABLED:
        native.cc_library(
            name = name,
            srcs = fallback_srcs,
            hdrs = hdrs,
            deps = deps,
            **kwargs
        )
        return
    objs = []
    includes = " ".join(["-I" + inc for inc in NVCC_INCLUDES])
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj.replace(".o", "_nvcc"),
            srcs = [src] + hdrs + native.glob(["**/*.h", "**/*.cuh"]),
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17 -O3 -Xcompiler -fPIC",
                NVCC_ARCH_FLAGS,
                includes,
                "-I. -I$(GENDIR)",
                " ".join(copts),
                "-c $(location " + src + ") -o $@",
            ]),
            tags = ["no-sandbox"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        defines = ["TRAINC_HAVE_CUDA=1"],
        alwayslink = True,
        **kwargs
    )
