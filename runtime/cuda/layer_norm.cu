// layernorm's CUDA kernels (compiler/ops/layer_norm_family.h): forward and
// input gradient with one warp per row (lanes stride the row, so each load
// is 32 consecutive floats), parameter gradients with the deterministic
// column reduction; add_layernorm, the residual add and the LayerNorm of
// its sum in one pass.
#include <algorithm>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::LayerNormFamily::Args;

// f(t, j) for this lane's elements j = lane + 32 t of a row of d, in
// order. kPerLane > 0: unrolled over t < kPerLane (d <= 32 kPerLane), so a
// register array indexed by t stays in registers; 0: any d.
template <int kPerLane, typename F>
__device__ __forceinline__ void ForLaneElements(int lane, int64_t d, F f) {
  if constexpr (kPerLane > 0) {
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int64_t j = lane + static_cast<int64_t>(t) * kWarpSize;
      if (j < d) f(t, j);
    }
  } else {
    int t = 0;
    for (int64_t j = lane; j < d; j += kWarpSize, ++t) f(t, j);
  }
}

// LayerNorm of one row by its warp; x(t, j) is element j (= lane + 32 t).
// Two passes over the row (mean, then centred variance) rather than
// E[x^2] - E[x]^2: no cancellation when |mean| >> std. The row statistics
// are accumulated in double, as the CPU reference does: a float mean of a
// row with a large offset is off by far more than one rounding, and that
// error lands in every (x - mean). layernorm and add_layernorm both run
// this code, so they give the same bits.
template <int kPerLane, typename Row>
__device__ __forceinline__ void LayerNormRow(const Row& x, int lane, int64_t d,
                                             const float* gamma, const float* beta, float eps,
                                             float* yr, float* mean, float* rstd) {
  double s = 0.0;
  ForLaneElements<kPerLane>(lane, d, [&](int t, int64_t j) { s += x(t, j); });
  const double mu = WarpSum(s) / static_cast<double>(d);
  double ss = 0.0;
  ForLaneElements<kPerLane>(lane, d, [&](int t, int64_t j) {
    const double c = x(t, j) - mu;
    ss += c * c;
  });
  const double var = WarpSum(ss) / static_cast<double>(d);
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / sqrt(var + eps));
  ForLaneElements<kPerLane>(lane, d, [&](int t, int64_t j) {
    yr[j] = (x(t, j) - m) * r * gamma[j] + beta[j];
  });
  if (lane == 0) {
    *mean = m;
    *rstd = r;
  }
}

__global__ void LayerNormKernel(const float* x, const float* gamma,
                                const float* beta, float* y, float* mean,
                                float* rstd, int64_t rows, int64_t d,
                                float eps) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const float* xr = x + row * d;
  LayerNormRow<0>([xr](int, int64_t j) { return xr[j]; }, threadIdx.x % kWarpSize, d, gamma,
                  beta, eps, y + row * d, mean + row, rstd + row);
}

// add_layernorm: sum = a + b (pointwise.h's add; rounded to bf16 when
// `round_sum`, as a bf16 sum is stored and read back), written once and
// normalized from registers: the layernorm's three passes never read it
// from memory. kPerLane 0 (rows wider than the registers hold): each lane
// reads back the elements it wrote. b is f32 or bf16 (TB), widened exactly.
template <int kPerLane, typename TB>
__global__ void AddLayerNormKernel(const float* a, const TB* b, const float* gamma,
                                   const float* beta, float* sum, float* y, float* mean,
                                   float* rstd, int64_t rows, int64_t d, float eps,
                                   bool round_sum) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* ar = a + row * d;
  const TB* br = b + row * d;
  float* sr = sum + row * d;
  float v[kPerLane > 0 ? kPerLane : 1];
  ForLaneElements<kPerLane>(lane, d, [&](int t, int64_t j) {
    float s = pointwise::Add::F(ar[j], ToF32(br[j]));
    if (round_sum) s = ToF32(FromF32<__nv_bfloat16>(s));
    sr[j] = s;
    if constexpr (kPerLane > 0) v[t] = s;
  });
  float* yr = y + row * d;
  if constexpr (kPerLane > 0) {
    LayerNormRow<kPerLane>([&v](int t, int64_t) { return v[t]; }, lane, d, gamma, beta, eps,
                           yr, mean + row, rstd + row);
  } else {
    LayerNormRow<0>([sr](int, int64_t j) { return sr[j]; }, lane, d, gamma, beta, eps, yr,
                    mean + row, rstd + row);
  }
}

template <int kPerLane>
cudaError_t LaunchAddLayerNormOf(const float* a, const void* b, bool b_bf16, const float* gamma,
                                 const float* beta, float* sum, float* y, float* mean,
                                 float* rstd, int64_t rows, int64_t d, float eps,
                                 bool round_sum, cudaStream_t s) {
  if (b_bf16) {
    AddLayerNormKernel<kPerLane><<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
        a, static_cast<const __nv_bfloat16*>(b), gamma, beta, sum, y, mean, rstd, rows, d, eps,
        round_sum);
  } else {
    AddLayerNormKernel<kPerLane><<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
        a, static_cast<const float*>(b), gamma, beta, sum, y, mean, rstd, rows, d, eps,
        round_sum);
  }
  return cudaGetLastError();
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

cudaError_t LaunchForward(const float* x, const float* gamma, const float* beta, float* y,
                          float* mean, float* rstd, int64_t rows, int64_t d, float eps,
                          cudaStream_t s) {
  LayerNormKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(x, gamma, beta, y, mean, rstd, rows, d,
                                                             eps);
  return cudaGetLastError();
}

// add_layernorm: sum = a + b, rounded to bf16 when `round_sum` (a bf16
// sum's f32 staging: what the layernorm of the unfused plan would read),
// then LaunchForward's arithmetic on it into y, mean and rstd, the row
// held in registers: one warp per row, one pass over a and b. b is f32,
// or bf16 when `b_bf16` (a bf16 branch added to an f32 residual stream).
cudaError_t LaunchAdd(const float* a, const void* b, bool b_bf16, const float* gamma,
                      const float* beta, float* sum, float* y, float* mean, float* rstd,
                      int64_t rows, int64_t d, float eps, bool round_sum, cudaStream_t s) {
  // The fewest registers per lane that hold the row (GPT-2 small's 768:
  // 24; up to 2048 wide), else the sum read back.
  const int64_t per_lane = (d + kWarpSize - 1) / kWarpSize;
#define TRAINC_ADD_LAYERNORM_IF_FITS(n)                                                         \
  if (per_lane <= n) {                                                                          \
    return LaunchAddLayerNormOf<n>(a, b, b_bf16, gamma, beta, sum, y, mean, rstd, rows, d, eps, \
                                   round_sum, s);                                               \
  }
  TRAINC_ADD_LAYERNORM_IF_FITS(8)
  TRAINC_ADD_LAYERNORM_IF_FITS(16)
  TRAINC_ADD_LAYERNORM_IF_FITS(24)
  TRAINC_ADD_LAYERNORM_IF_FITS(32)
  TRAINC_ADD_LAYERNORM_IF_FITS(48)
  TRAINC_ADD_LAYERNORM_IF_FITS(64)
#undef TRAINC_ADD_LAYERNORM_IF_FITS
  return LaunchAddLayerNormOf<0>(a, b, b_bf16, gamma, beta, sum, y, mean, rstd, rows, d, eps,
                                 round_sum, s);
}

cudaError_t LaunchGradInput(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, float* dx, int64_t rows, int64_t d, bool accumulate,
                            cudaStream_t s) {
  LayerNormGradInputKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(dy, x, gamma, mean, rstd, dx,
                                                                      rows, d, accumulate);
  return cudaGetLastError();
}

// `scratch` holds 2 * ColumnSumScratchFloats(rows, d) floats.
cudaError_t LaunchGradParams(const float* dy, const float* x, const float* mean, const float* rstd,
                             float* dgamma, float* dbeta, int64_t rows, int64_t d, bool accumulate,
                             float* scratch, cudaStream_t s) {
  float* const outs[2] = {dgamma, dbeta};
  return LaunchColumnReduce<2>(LayerNormParamGrad{dy, x, mean, rstd, d}, rows, d, outs, accumulate,
                               scratch, s);
}

}  // namespace

const char* PrepareLayerNorm(KernelOp op, const Args& a, int64_t* scratch_floats) {
  if (op == KernelOp::kLayerNormGradParams) {
    *scratch_floats = std::max(*scratch_floats, 2 * ColumnSumScratchFloats(a.rows, a.width));
  }
  return nullptr;
}

cudaError_t LaunchLayerNorm(KernelOp op, const Args& a, const float* const* x, float* const* y,
                            const UnitLaunch& env) {
  const bool accumulate = env.accumulate;
  cudaStream_t stream = env.stream;
  const float eps = static_cast<float>(a.eps);
  switch (op) {
    case KernelOp::kLayerNorm:
      return LaunchForward(x[0], x[1], x[2], y[0], y[1], y[2], a.rows, a.width, eps, stream);
    case KernelOp::kAddLayerNorm:
      // One kernel: the residual sum written and normalized from
      // registers; a bf16 sum rounded before it is normalized; b read as
      // the bf16 tensor itself under env.bf16 (UseBf16AddLayerNorm).
      return LaunchAdd(x[0], x[1], env.bf16, x[2], x[3], y[0], y[1], y[2], y[3], a.rows, a.width,
                       eps, a.RoundSum(), stream);
    case KernelOp::kLayerNormGradInput:
      return LaunchGradInput(x[0], x[1], x[2], x[3], x[4], y[0], a.rows, a.width, accumulate,
                             stream);
    case KernelOp::kLayerNormGradParams:
      return LaunchGradParams(x[0], x[1], x[2], x[3], y[0], y[1], a.rows, a.width, accumulate,
                              env.scratch, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
