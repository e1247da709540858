// softmax's CUDA kernels (compiler/ops/softmax_family.h): one warp per
// row, the sums in double; nothing adds floats with atomics.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::SoftmaxFamily::Args;

// Softmax of one row. The exponentials are summed in double, as the CPU
// reference sums them.
__device__ __forceinline__ void SoftmaxRow(const float* x, float* y, int64_t n, int lane) {
  float mx = -INFINITY;
  for (int64_t j = lane; j < n; j += kWarpSize) mx = fmaxf(mx, x[j]);
  mx = WarpMax(mx);
  double sum = 0.0;
  for (int64_t j = lane; j < n; j += kWarpSize) sum += expf(x[j] - mx);
  const float inv = static_cast<float>(1.0 / WarpSum(sum));
  for (int64_t j = lane; j < n; j += kWarpSize) y[j] = expf(x[j] - mx) * inv;
}

// dx (+)= y * (dy - sum_j dy_j y_j). The row sum is accumulated in double
// (as layernorm's): dx is a difference with it, so its rounding is not
// damped. The product is rounded before the accumulating add (__fmul_rn:
// no FMA contraction), as on the CPU.
__device__ __forceinline__ void SoftmaxGradRow(const float* dy, const float* y, float* dx,
                                               int64_t n, bool accumulate, int lane) {
  double dot = 0.0;
  for (int64_t j = lane; j < n; j += kWarpSize) {
    dot += static_cast<double>(dy[j]) * y[j];
  }
  const float s = static_cast<float>(WarpSum(dot));
  for (int64_t j = lane; j < n; j += kWarpSize) {
    const float g = __fmul_rn(y[j], dy[j] - s);
    dx[j] = accumulate ? dx[j] + g : g;
  }
}

__global__ void SoftmaxKernel(const float* x, float* y, int64_t rows,
                              int64_t n) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  SoftmaxRow(x + row * n, y + row * n, n, threadIdx.x % kWarpSize);
}

__global__ void SoftmaxGradKernel(const float* dy, const float* y, float* dx,
                                  int64_t rows, int64_t n, bool accumulate) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  SoftmaxGradRow(dy + row * n, y + row * n, dx + row * n, n, accumulate,
                 threadIdx.x % kWarpSize);
}

cudaError_t LaunchForward(const float* x, float* y, int64_t rows, int64_t n, cudaStream_t s) {
  SoftmaxKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(x, y, rows, n);
  return cudaGetLastError();
}

cudaError_t LaunchGrad(const float* dy, const float* y, float* dx, int64_t rows, int64_t n,
                       bool accumulate, cudaStream_t s) {
  SoftmaxGradKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(dy, y, dx, rows, n, accumulate);
  return cudaGetLastError();
}

}  // namespace

const char* PrepareSoftmax(KernelOp, const Args&, int64_t*) { return nullptr; }

cudaError_t LaunchSoftmax(KernelOp op, const Args& a, const float* const* x, float* const* y,
                          const UnitLaunch& env) {
  const bool accumulate = env.accumulate;
  cudaStream_t stream = env.stream;
  switch (op) {
    case KernelOp::kSoftmax:
      return LaunchForward(x[0], y[0], a.rows, a.width, stream);
    case KernelOp::kSoftmaxGrad:
      return LaunchGrad(x[0], x[1], y[0], a.rows, a.width, accumulate, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
