// Pointwise ops (compiler/ops/pointwise.h): one grid-stride kernel,
// instantiated for every formula of TRAINC_POINTWISE_OPS and both storage
// types (f32, and bf16 read and written in place).
#include "compiler/ops/pointwise.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

template <typename F, int kArity, typename T>
__global__ void PointwiseKernel(const T* a, const T* b, T* y, int64_t n, bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    float v;
    if constexpr (kArity == 1) {
      v = F::F(ToF32(a[i]));
    } else {
      v = F::F(ToF32(a[i]), ToF32(b[i]));
    }
    if (accumulate) v = ToF32(y[i]) + v;
    y[i] = FromF32<T>(v);
  }
}

// One switch over the pointwise ops for both storage types.
template <typename T>
cudaError_t LaunchAs(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                     bool accumulate, cudaStream_t s) {
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  T* ty = static_cast<T*>(y);
  switch (op) {
#define TRAINC_CUDA_POINTWISE_CASE(name, Name, arity)                                      \
  case KernelOp::k##Name:                                                                  \
    PointwiseKernel<pointwise::Name, arity, T>                                             \
        <<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(ta, tb, ty, n, accumulate);           \
    return cudaGetLastError();
    TRAINC_POINTWISE_OPS(TRAINC_CUDA_POINTWISE_CASE)
#undef TRAINC_CUDA_POINTWISE_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchPointwise(KernelOp op, const float* a, const float* b, float* y,
                            int64_t n, bool accumulate, cudaStream_t s) {
  return LaunchAs<float>(op, a, b, y, n, accumulate, s);
}

cudaError_t LaunchPointwiseBf16(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                                bool accumulate, cudaStream_t s) {
  return LaunchAs<__nv_bfloat16>(op, a, b, y, n, accumulate, s);
}

}  // namespace cuda
}  // namespace trainc
