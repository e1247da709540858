// dropout's CUDA kernel (compiler/ops/dropout_family.h): the CPU's masks
// bit for bit; the step read from device memory, so a replayed CUDA graph
// draws each step's own mask.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::DropoutFamily::Args;

// y (+)= x * DropoutFactor(seed, key, example, j, p) for x[batch,
// per_example], example = (scalars->step - 1) * global_batch + position +
// b. T: f32, or bf16 widened on load and rounded once on store (the staged
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

template <typename T>
cudaError_t Launch(const void* x, void* y, const Args& a, const UnitLaunch& env) {
  const int64_t n = a.rows * a.per_example;
  DropoutKernel<T><<<ElementwiseBlocks(n), kBlockSize, 0, env.stream>>>(
      static_cast<const T*>(x), static_cast<T*>(y), a.rows, a.per_example,
      a.step.training ? a.p : 0.0f, a.seed, a.key, env.scalars, a.global_batch,
      a.Position(a.step.rank), env.accumulate);
  return cudaGetLastError();
}

}  // namespace

const char* PrepareDropout(KernelOp, const Args&, int64_t*) { return nullptr; }

// Both ops are the same mask; x and y both bf16 when env.bf16
// (UseBf16Dropout).
cudaError_t LaunchDropout(KernelOp, const Args& a, const float* const* x, float* const* y,
                          const UnitLaunch& env) {
  if (env.bf16) return Launch<__nv_bfloat16>(x[0], y[0], a, env);
  return Launch<float>(x[0], y[0], a, env);
}

}  // namespace cuda
}  // namespace trainc
