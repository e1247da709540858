"""Finds the CUDA Toolkit (nvcc, cudart, cuBLAS, cuDNN, NCCL) at fetch time.

Creates @local_cuda with:
  //:config.bzl   CUDA_ENABLED (bool), NVCC (absolute path), CUDA_ARCHS
  //:cuda         cc_library over cudart, cuBLAS, cuDNN and NCCL (empty when
                  absent)

The toolkit is looked up from $CUDA_PATH, then `nvcc` on the PATH, then
/usr/local/cuda. Without a toolkit the build still succeeds: CUDA targets are
replaced by their CPU-only stand-ins (see cuda.bzl).

`--repo_env=TRAINC_NO_CUDA=1` forces the no-toolkit configuration, to check
on a machine with CUDA that the CPU-only build still works. (Changing it
re-runs this rule; build once without it to switch back.)
"""

def _find_cuda(ctx):
    candidates = []
    env_path = ctx.os.environ.get("CUDA_PATH", "")
    if env_path:
        candidates.append(env_path)
    nvcc_on_path = ctx.which("nvcc")
    if nvcc_on_path:
        candidates.append(str(nvcc_on_path.dirname.dirname))
    candidates.append("/usr/local/cuda")
    for root in candidates:
        if not ctx.path(root + "/bin/nvcc").exists:
            continue
        if not ctx.path(root + "/include/cuda_runtime.h").exists:
            continue
        if not ctx.path(root + "/include/cublas_v2.h").exists:
            continue
        # cuDNN ships inside the toolkit here (convolution and pooling); a
        # toolkit without it builds the CPU-only stand-ins.
        if not ctx.path(root + "/include/cudnn.h").exists:
            continue
        return root
    return None

def _find_nccl(ctx, root):
    for inc in [root + "/include", "/usr/include"]:
        if ctx.path(inc + "/nccl.h").exists:
            for lib in [root + "/lib64", root + "/lib", "/usr/lib/x86_64-linux-gnu"]:
                if ctx.path(lib + "/libnccl.so").exists or ctx.path(lib + "/libnccl.so.2").exists:
                    return (inc, lib)
    return None

def _cuda_configure_impl(ctx):
    forced_off = ctx.os.environ.get("TRAINC_NO_CUDA", "") not in ["", "0"]
    root = None if forced_off else _find_cuda(ctx)
    nccl = _find_nccl(ctx, root) if root else None
    enabled = root != None and nccl != None
    if enabled:
        resolved = ctx.execute(["readlink", "-f", root]).stdout.strip()
        ctx.symlink(resolved + "/include", "include")
        libdir = resolved + "/lib64"
        if not ctx.path(libdir).exists:
            libdir = resolved + "/lib"
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/*.hpp"]),
    # g++ reaches these for cuda_runtime.h and friends; nvcc gets its own -I.
    includes = ["include"],
    linkopts = [
        "-L{libdir}",
        "-L{nccl_lib}",
        "-Wl,-rpath,{libdir}",
        "-Wl,-rpath,{nccl_lib}",
        "-lcublas",
        "-lcublasLt",
        "-lcudnn",
        "-lnccl",
        "-lcudart",
        "-ldl",
        "-lrt",
        "-lpthread",
    ],
)
""".format(libdir = libdir, nccl_lib = nccl[1])
        config = """CUDA_ENABLED = True
CUDA_ROOT = "{root}"
NVCC = "{root}/bin/nvcc"
NVCC_INCLUDES = ["{root}/include", "{root}/include/cccl", "{nccl_inc}"]
""".format(root = resolved, nccl_inc = nccl[0])
    else:
        build = """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cuda")
"""
        config = """CUDA_ENABLED = False
CUDA_ROOT = ""
NVCC = ""
NVCC_INCLUDES = []
"""
    ctx.file("BUILD", build)
    ctx.file("config.bzl", config)
    ctx.file("WORKSPACE", "workspace(name = \"local_cuda\")\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "PATH", "TRAINC_NO_CUDA"],
    local = True,
)
