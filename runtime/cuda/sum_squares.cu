// sum_squares' CUDA kernel (compiler/ops/sum_squares_family.h): one block,
// a fixed order, in double.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::SumSquaresFamily::Args;

// out (+)= sum of x[0..n) squared.
__global__ void SumSquaresKernel(const float* x, int64_t n, float* out,
                                 bool accumulate) {
  __shared__ double shared[kBlockSize];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlockSize) {
    s += static_cast<double>(x[i]) * x[i];
  }
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int width = kBlockSize / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float total = static_cast<float>(shared[0]);
    out[0] = accumulate ? out[0] + total : total;
  }
}

}  // namespace

const char* PrepareSumSquares(KernelOp, const Args&, int64_t*) { return nullptr; }

cudaError_t LaunchSumSquares(KernelOp, const Args& a, const float* const* x, float* const* y,
                             const UnitLaunch& env) {
  SumSquaresKernel<<<1, kBlockSize, 0, env.stream>>>(x[0] + a.Begin(a.step.rank), a.Count(),
                                                     y[0], env.accumulate);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
