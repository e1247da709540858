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

// Operands of mixed storage (copy_grad of an f32 dy into a bf16 dx): bit i
// of `bf16` says operand i (a, b, y) is bf16. The branches are uniform.
template <typename F, int kArity>
__global__ void PointwiseMixedKernel(const void* a, const void* b, void* y, int64_t n,
                                     bool accumulate, unsigned bf16) {
  auto load = [](const void* p, bool half, int64_t i) {
    return half ? ToF32(static_cast<const __nv_bfloat16*>(p)[i]) : static_cast<const float*>(p)[i];
  };
  TRAINC_GRID_STRIDE(i, n) {
    float v;
    if constexpr (kArity == 1) {
      v = F::F(load(a, bf16 & 1u, i));
    } else {
      v = F::F(load(a, bf16 & 1u, i), load(b, bf16 & 2u, i));
    }
    if (accumulate) v = load(y, bf16 & 4u, i) + v;
    if (bf16 & 4u) {
      static_cast<__nv_bfloat16*>(y)[i] = FromF32<__nv_bfloat16>(v);
    } else {
      static_cast<float*>(y)[i] = v;
    }
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

cudaError_t LaunchPointwiseMixed(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                                 bool accumulate, unsigned bf16, cudaStream_t s) {
  switch (op) {
#define TRAINC_CUDA_POINTWISE_MIXED_CASE(name, Name, arity)                                \
  case KernelOp::k##Name:                                                                  \
    PointwiseMixedKernel<pointwise::Name, arity>                                           \
        <<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(a, b, y, n, accumulate, bf16);        \
    return cudaGetLastError();
    TRAINC_POINTWISE_OPS(TRAINC_CUDA_POINTWISE_MIXED_CASE)
#undef TRAINC_CUDA_POINTWISE_MIXED_CASE
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
