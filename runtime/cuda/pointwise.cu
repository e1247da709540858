// Pointwise ops (compiler/ops/pointwise.h): one grid-stride kernel per
// arity, instantiated for every formula of TRAINC_POINTWISE_OPS.
#include <cuda_bf16.h>

#include "compiler/ops/pointwise.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

template <typename F>
__global__ void UnaryKernel(const float* a, float* y, int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    const float v = F::F(a[i]);
    y[i] = accumulate ? y[i] + v : v;
  }
}

template <typename F>
__global__ void BinaryKernel(const float* a, const float* b, float* y, int64_t n,
                             bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    const float v = F::F(a[i], b[i]);
    y[i] = accumulate ? y[i] + v : v;
  }
}

// bf16 in and out, f32 inside: the staged path's arithmetic and rounding.
template <typename F, int kArity>
__global__ void Bf16Kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* y,
                           int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    float v;
    if constexpr (kArity == 1) {
      v = F::F(__bfloat162float(a[i]));
    } else {
      v = F::F(__bfloat162float(a[i]), __bfloat162float(b[i]));
    }
    if (accumulate) v = __bfloat162float(y[i]) + v;
    y[i] = __float2bfloat16_rn(v);
  }
}

template <typename F, int kArity>
cudaError_t LaunchBf16(const void* a, const void* b, void* y, int64_t n, bool accumulate,
                       cudaStream_t s) {
  Bf16Kernel<F, kArity><<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b),
      static_cast<__nv_bfloat16*>(y), n, accumulate);
  return cudaGetLastError();
}

template <typename F, int kArity>
cudaError_t Launch(const float* a, const float* b, float* y, int64_t n, bool accumulate,
                   cudaStream_t s) {
  if constexpr (kArity == 1) {
    UnaryKernel<F><<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(a, y, n, accumulate);
  } else {
    BinaryKernel<F><<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(a, b, y, n, accumulate);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPointwise(KernelOp op, const float* a, const float* b, float* y,
                            int64_t n, bool accumulate, cudaStream_t s) {
  switch (op) {
#define TRAINC_CUDA_POINTWISE_CASE(name, Name, arity) \
  case KernelOp::k##Name:                             \
    return Launch<pointwise::Name, arity>(a, b, y, n, accumulate, s);
    TRAINC_POINTWISE_OPS(TRAINC_CUDA_POINTWISE_CASE)
#undef TRAINC_CUDA_POINTWISE_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchPointwiseBf16(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                                bool accumulate, cudaStream_t s) {
  switch (op) {
#define TRAINC_CUDA_POINTWISE_BF16_CASE(name, Name, arity) \
  case KernelOp::k##Name:                                  \
    return LaunchBf16<pointwise::Name, arity>(a, b, y, n, accumulate, s);
    TRAINC_POINTWISE_OPS(TRAINC_CUDA_POINTWISE_BF16_CASE)
#undef TRAINC_CUDA_POINTWISE_BF16_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
