// add, copy_grad and the deterministic-mode ordered sum of gradient slots.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

__global__ void AddKernel(const float* a, const float* b, float* y,
                          int64_t n) {
  TRAINC_GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void CopyGradKernel(const float* dy, float* dx, int64_t n,
                               bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) { dx[i] = accumulate ? dx[i] + dy[i] : dy[i]; }
}

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

}  // namespace

cudaError_t LaunchAdd(const float* a, const float* b, float* y, int64_t n,
                      cudaStream_t s) {
  AddKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(a, b, y, n);
  return cudaGetLastError();
}

cudaError_t LaunchCopyGrad(const float* dy, float* dx, int64_t n,
                           bool accumulate, cudaStream_t s) {
  CopyGradKernel<<<ElementwiseBlocks(n), kBlockSize, 0, s>>>(dy, dx, n,
                                                             accumulate);
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
