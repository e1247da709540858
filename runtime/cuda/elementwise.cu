// The deterministic-mode ordered sum of gradient slots and the f32 <-> bf16
// casts.
#include <cuda_bf16.h>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

// Each element is read from every slot before it is written, so dst may be
// slot 0; the k order is fixed, which is what makes the sum reproducible.
__global__ void OrderedSumKernel(const float* src, int64_t slots,
                                 int64_t count, float* dst) {
  TRAINC_GRID_STRIDE(i, count) {
    float s = src[i];
    for (int64_t k = 1; k < slots; ++k) s += src[k * count + i];
    dst[i] = s;
  }
}

__global__ void ToBf16Kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(x[i]); }
}

__global__ void FromBf16Kernel(const __nv_bfloat16* x, float* y, int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = __bfloat162float(x[i]); }
}

}  // namespace

cudaError_t LaunchToBf16(const float* f32, void* bf16, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  ToBf16Kernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      f32, static_cast<__nv_bfloat16*>(bf16), n);
  return cudaGetLastError();
}

cudaError_t LaunchFromBf16(const void* bf16, float* f32, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  FromBf16Kernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(
      static_cast<const __nv_bfloat16*>(bf16), f32, n);
  return cudaGetLastError();
}

cudaError_t LaunchOrderedSum(const float* src, int64_t n, int64_t count,
                             float* dst, cudaStream_t s) {
  OrderedSumKernel<<<ElementwiseBlocks(count), kBlockSize, 0, s>>>(src, n,
                                                                   count, dst);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
