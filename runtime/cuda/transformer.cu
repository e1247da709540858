// Transformer ops: dropout (causal attention is attention.cu, softmax
// softmax.cu, the embeddings embedding.cu); nothing adds floats with
// atomics.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"
#include "runtime/device/philox.h"

namespace trainc {
namespace cuda {
namespace {

// T: f32, or bf16 widened on load and rounded once on store (the staged
// path's bits).
template <typename T>
__global__ void DropoutKernel(const T* x, T* y, int64_t batch,
                              int64_t per_example, float p, uint64_t seed,
                              uint32_t key,
                              const OptimizerStepScalars* scalars,
                              int64_t global_batch, int64_t position,
                              bool accumulate) {
  const uint64_t base =
      static_cast<uint64_t>(scalars->step - 1) * global_batch + position;
  TRAINC_GRID_STRIDE(i, batch * per_example) {
    const int64_t b = i / per_example, j = i % per_example;
    // __fmul_rn: the product is rounded before the accumulating add, as on
    // the CPU; nvcc would otherwise fuse the two into one FMA (one rounding)
    // and the masks' bit-for-bit agreement with the CPU would be lost.
    const float v = __fmul_rn(ToF32(x[i]), DropoutFactor(seed, key, base + b, j, p));
    y[i] = FromF32<T>(accumulate ? ToF32(y[i]) + v : v);
  }
}

}  // namespace

#define TRAINC_LAUNCH_ELEMENTWISE(kernel, n, stream, ...)                 \
  kernel<<<ElementwiseBlocks(n), kBlockSize, 0, stream>>>(__VA_ARGS__); \
  return cudaGetLastError()

cudaError_t LaunchDropout(const void* x, void* y, bool bf16, int64_t batch,
                          int64_t per_example, float p, uint64_t seed,
                          uint32_t key, const OptimizerStepScalars* scalars,
                          int64_t global_batch, int64_t position,
                          bool accumulate, cudaStream_t s) {
  if (bf16) {
    TRAINC_LAUNCH_ELEMENTWISE(DropoutKernel<__nv_bfloat16>, batch * per_example, s,
                              static_cast<const __nv_bfloat16*>(x),
                              static_cast<__nv_bfloat16*>(y), batch, per_example, p, seed, key,
                              scalars, global_batch, position, accumulate);
  }
  TRAINC_LAUNCH_ELEMENTWISE(DropoutKernel<float>, batch * per_example, s,
                            static_cast<const float*>(x), static_cast<float*>(y), batch,
                            per_example, p, seed, key, scalars, global_batch, position,
                            accumulate);
}

}  // namespace cuda
}  // namespace trainc
