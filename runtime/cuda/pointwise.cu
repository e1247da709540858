// Pointwise ops (compiler/ops/pointwise.h): one grid-stride kernel per
// arity, instantiated for every formula of TRAINC_POINTWISE_OPS.
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

}  // namespace cuda
}  // namespace trainc
