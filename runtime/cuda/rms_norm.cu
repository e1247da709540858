// rmsnorm's CUDA kernels (compiler/ops/rms_norm_family.h): forward and
// input gradient with one warp per row (lanes stride the row, so each load
// is 32 consecutive floats), the parameter gradient with the deterministic
// column reduction.
#include <algorithm>

#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::RmsNormFamily::Args;

// RMSNorm (Llama's): rstd = 1 / sqrt(mean(x^2) + eps), the sum in double as
// on the CPU; y = x * rstd * weight.
__global__ void RmsNormKernel(const float* x, const float* weight, float* y, float* rstd,
                              int64_t rows, int64_t d, float eps) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* xr = x + row * d;
  double sq = 0.0;
  for (int64_t j = lane; j < d; j += kWarpSize) sq += static_cast<double>(xr[j]) * xr[j];
  const float r = static_cast<float>(1.0 / sqrt(WarpSum(sq) / static_cast<double>(d) + eps));
  float* yr = y + row * d;
  for (int64_t j = lane; j < d; j += kWarpSize) yr[j] = xr[j] * r * weight[j];
  if (lane == 0) rstd[row] = r;
}

// dx = rstd * (g - xhat * mean(g * xhat)), g = dy * weight, xhat = x * rstd.
__global__ void RmsNormGradInputKernel(const float* dy, const float* x, const float* weight,
                                       const float* rstd, float* dx, int64_t rows, int64_t d,
                                       bool accumulate) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* xr = x + row * d;
  const float* dyr = dy + row * d;
  const float r = rstd[row];
  double sum_gx = 0.0;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    sum_gx += static_cast<double>(dyr[j] * weight[j]) * (xr[j] * r);
  }
  const float mean_gx = static_cast<float>(WarpSum(sum_gx) / d);
  float* dxr = dx + row * d;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const float v = r * (dyr[j] * weight[j] - (xr[j] * r) * mean_gx);
    dxr[j] = accumulate ? dxr[j] + v : v;
  }
}

struct RmsNormParamGrad {
  const float* dy;
  const float* x;
  const float* rstd;
  int64_t d;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[1]) const {
    acc[0] += dy[r * d + c] * (x[r * d + c] * rstd[r]);  // the CPU's order
  }
};

cudaError_t LaunchForward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                          int64_t d, float eps, cudaStream_t s) {
  RmsNormKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(x, weight, y, rstd, rows, d, eps);
  return cudaGetLastError();
}

cudaError_t LaunchGradInput(const float* dy, const float* x, const float* weight, const float* rstd,
                            float* dx, int64_t rows, int64_t d, bool accumulate, cudaStream_t s) {
  RmsNormGradInputKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(dy, x, weight, rstd, dx, rows,
                                                                    d, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchGradParams(const float* dy, const float* x, const float* rstd, float* dweight,
                             int64_t rows, int64_t d, bool accumulate, float* scratch,
                             cudaStream_t s) {
  float* const outs[1] = {dweight};
  return LaunchColumnReduce<1>(RmsNormParamGrad{dy, x, rstd, d}, rows, d, outs, accumulate, scratch,
                               s);
}

}  // namespace

const char* PrepareRmsNorm(KernelOp op, const Args& a, int64_t* scratch_floats) {
  if (op == KernelOp::kRmsNormGradParams) {
    *scratch_floats = std::max(*scratch_floats, ColumnSumScratchFloats(a.rows, a.width));
  }
  return nullptr;
}

cudaError_t LaunchRmsNorm(KernelOp op, const Args& a, const float* const* x, float* const* y,
                          const UnitLaunch& env) {
  const bool accumulate = env.accumulate;
  cudaStream_t stream = env.stream;
  switch (op) {
    case KernelOp::kRmsNorm:
      return LaunchForward(x[0], x[1], y[0], y[1], a.rows, a.width, static_cast<float>(a.eps),
                           stream);
    case KernelOp::kRmsNormGradInput:
      return LaunchGradInput(x[0], x[1], x[2], x[3], y[0], a.rows, a.width, accumulate, stream);
    case KernelOp::kRmsNormGradParams:
      return LaunchGradParams(x[0], x[1], x[2], y[0], a.rows, a.width, accumulate, env.scratch,
                              stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
