// LayerNorm and RMSNorm over the last dimension: forward and input gradient with one
// warp per row (lanes stride the row, so each load is 32 consecutive
// floats), parameter gradients with the deterministic column reduction.
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

__device__ __forceinline__ int64_t WarpRow() {
  return blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) +
         threadIdx.x / kWarpSize;
}

// Two passes over the row (mean, then centred variance) rather than
// E[x^2] - E[x]^2: no cancellation when |mean| >> std. The row statistics
// are accumulated in double, as the CPU reference does: a float mean of a
// row with a large offset is off by far more than one rounding, and that
// error lands in every (x - mean).
__global__ void LayerNormKernel(const float* x, const float* gamma,
                                const float* beta, float* y, float* mean,
                                float* rstd, int64_t rows, int64_t d,
                                float eps) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* xr = x + row * d;
  double s = 0.0;
  for (int64_t j = lane; j < d; j += kWarpSize) s += xr[j];
  const double mu = WarpSum(s) / static_cast<double>(d);
  double ss = 0.0;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const double c = xr[j] - mu;
    ss += c * c;
  }
  const double var = WarpSum(ss) / static_cast<double>(d);
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / sqrt(var + eps));
  float* yr = y + row * d;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    yr[j] = (xr[j] - m) * r * gamma[j] + beta[j];
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. The
// two row means are accumulated in double (as on the CPU): dx is a
// difference of them, so their rounding is not damped.
__global__ void LayerNormGradInputKernel(const float* dy, const float* x,
                                         const float* gamma, const float* mean,
                                         const float* rstd, float* dx,
                                         int64_t rows, int64_t d,
                                         bool accumulate) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* xr = x + row * d;
  const float* dyr = dy + row * d;
  const float m = mean[row];
  const float r = rstd[row];
  double sum_g = 0.0, sum_gx = 0.0;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const float g = dyr[j] * gamma[j];
    sum_g += g;
    sum_gx += static_cast<double>(g) * ((xr[j] - m) * r);
  }
  const float mean_g = static_cast<float>(WarpSum(sum_g) / d);
  const float mean_gx = static_cast<float>(WarpSum(sum_gx) / d);
  float* dxr = dx + row * d;
  for (int64_t j = lane; j < d; j += kWarpSize) {
    const float xhat = (xr[j] - m) * r;
    const float v = r * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    dxr[j] = accumulate ? dxr[j] + v : v;
  }
}

struct LayerNormParamGrad {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t d;
  __device__ void operator()(int64_t r, int64_t c, float (&acc)[2]) const {
    const float g = dy[r * d + c];
    acc[0] += g * ((x[r * d + c] - mean[r]) * rstd[r]);  // dgamma (CPU order)
    acc[1] += g;                                       // dbeta
  }
};

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

}  // namespace

cudaError_t LaunchRmsNorm(const float* x, const float* weight, float* y, float* rstd,
                          int64_t rows, int64_t d, float eps, cudaStream_t s) {
  RmsNormKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(x, weight, y, rstd, rows, d, eps);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormGradInput(const float* dy, const float* x, const float* weight,
                                   const float* rstd, float* dx, int64_t rows, int64_t d,
                                   bool accumulate, cudaStream_t s) {
  RmsNormGradInputKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(dy, x, weight, rstd, dx,
                                                                    rows, d, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormGradParams(const float* dy, const float* x, const float* rstd,
                                    float* dweight, int64_t rows, int64_t d, bool accumulate,
                                    float* scratch, cudaStream_t s) {
  float* const outs[1] = {dweight};
  return LaunchColumnReduce<1>(RmsNormParamGrad{dy, x, rstd, d}, rows, d, outs, accumulate,
                               scratch, s);
}

cudaError_t LaunchLayerNorm(const float* x, const float* gamma,
                            const float* beta, float* y, float* mean,
                            float* rstd, int64_t rows, int64_t d, float eps,
                            cudaStream_t s) {
  LayerNormKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
      x, gamma, beta, y, mean, rstd, rows, d, eps);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormGradInput(const float* dy, const float* x,
                                     const float* gamma, const float* mean,
                                     const float* rstd, float* dx,
                                     int64_t rows, int64_t d, bool accumulate,
                                     cudaStream_t s) {
  LayerNormGradInputKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
      dy, x, gamma, mean, rstd, dx, rows, d, accumulate);
  return cudaGetLastError();
}

cudaError_t LaunchLayerNormGradParams(const float* dy, const float* x,
                                      const float* mean, const float* rstd,
                                      float* dgamma, float* dbeta,
                                      int64_t rows, int64_t d, bool accumulate,
                                      float* scratch, cudaStream_t s) {
  float* const outs[2] = {dgamma, dbeta};
  return LaunchColumnReduce<2>(LayerNormParamGrad{dy, x, mean, rstd, d}, rows,
                               d, outs, accumulate, scratch, s);
}

}  // namespace cuda
}  // namespace trainc
