// group_norm's CUDA kernels (compiler/ops/group_norm_family.h): one block
// per (sample, group) for the forward and the input gradient, one block
// per channel for the parameter gradients. Each thread sums a fixed
// stride of elements in double, then the block adds the threads' sums in a
// fixed tree: no atomics, the same bits every run.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::GroupNormFamily::Args;

// Element e of sample n's group g (Args::At on the device).
__device__ __forceinline__ int64_t At(const Args& a, int64_t n, int64_t g, int64_t e) {
  const int64_t cg = a.channels / a.groups, per_t = cg * a.inner;
  const int64_t t = e / per_t, rem = e % per_t;
  return ((n * a.outer + t) * a.channels + g * cg + rem / a.inner) * a.inner + rem % a.inner;
}

__device__ __forceinline__ int64_t ChannelOf(const Args& a, int64_t g, int64_t e) {
  const int64_t cg = a.channels / a.groups;
  return g * cg + e % (cg * a.inner) / a.inner;
}

// The block's sum of each thread's `v` (two values at once), the same on
// every thread, in a fixed order: warps by butterfly, then warp 0 over the
// warps' sums.
__device__ __forceinline__ void BlockSum2(double& v0, double& v1) {
  __shared__ double part[2][kWarpsPerBlock];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v0 = WarpSum(v0);
  v1 = WarpSum(v1);
  if (lane == 0) {
    part[0][warp] = v0;
    part[1][warp] = v1;
  }
  __syncthreads();
  double s0 = 0, s1 = 0;
  for (int w = 0; w < kWarpsPerBlock; ++w) {
    s0 += part[0][w];
    s1 += part[1][w];
  }
  __syncthreads();  // part is reused by the next call
  v0 = s0;
  v1 = s1;
}

__global__ void GroupNormKernel(Args a, const float* x, const float* w, const float* b,
                                float* y, float* mean, float* rstd) {
  const int64_t n = blockIdx.x / a.groups, g = blockIdx.x % a.groups;
  const int64_t m = a.channels / a.groups * a.outer * a.inner;
  double sum = 0, unused = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) sum += x[At(a, n, g, e)];
  BlockSum2(sum, unused);
  const double mu = sum / m;
  double sq = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const double d = x[At(a, n, g, e)] - mu;
    sq += d * d;
  }
  BlockSum2(sq, unused);
  const double rs = 1 / sqrt(sq / m + static_cast<double>(a.eps));
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t i = At(a, n, g, e), c = ChannelOf(a, g, e);
    y[i] = static_cast<float>((x[i] - mu) * rs * w[c] + b[c]);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = static_cast<float>(mu);
    rstd[blockIdx.x] = static_cast<float>(rs);
  }
}

__global__ void GroupNormGradInputKernel(Args a, const float* dy, const float* x, const float* w,
                                         const float* mean, const float* rstd, bool accumulate,
                                         float* dx) {
  const int64_t n = blockIdx.x / a.groups, g = blockIdx.x % a.groups;
  const int64_t m = a.channels / a.groups * a.outer * a.inner;
  const double mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
  double m1 = 0, m2 = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t i = At(a, n, g, e);
    const double gy = static_cast<double>(dy[i]) * w[ChannelOf(a, g, e)];
    m1 += gy;
    m2 += gy * (x[i] - mu) * rs;
  }
  BlockSum2(m1, m2);
  m1 /= m;
  m2 /= m;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t i = At(a, n, g, e);
    const double gy = static_cast<double>(dy[i]) * w[ChannelOf(a, g, e)];
    const double v = rs * (gy - m1 - (x[i] - mu) * rs * m2);
    dx[i] = static_cast<float>(accumulate ? dx[i] + v : v);
  }
}

__global__ void GroupNormGradParamsKernel(Args a, const float* dy, const float* x,
                                          const float* mean, const float* rstd, bool accumulate,
                                          float* dw, float* db) {
  const int64_t c = blockIdx.x, g = c / (a.channels / a.groups);
  const int64_t per_sample = a.outer * a.inner, m = a.n * per_sample;
  double sw = 0, sb = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const int64_t n = e / per_sample, t = e % per_sample / a.inner, s = e % a.inner;
    const int64_t i = ((n * a.outer + t) * a.channels + c) * a.inner + s;
    const double mu = mean[n * a.groups + g], rs = rstd[n * a.groups + g];
    sw += dy[i] * (x[i] - mu) * rs;
    sb += dy[i];
  }
  BlockSum2(sw, sb);
  if (threadIdx.x == 0) {
    dw[c] = static_cast<float>(accumulate ? dw[c] + sw : sw);
    db[c] = static_cast<float>(accumulate ? db[c] + sb : sb);
  }
}

}  // namespace

const char* PrepareGroupNorm(KernelOp, const Args&, int64_t*) { return nullptr; }

cudaError_t LaunchGroupNorm(KernelOp op, const Args& a, const float* const* x, float* const* y,
                            const UnitLaunch& env) {
  const bool accumulate = env.accumulate;
  cudaStream_t stream = env.stream;
  if (a.n * a.groups == 0 || a.channels == 0) return cudaSuccess;
  const unsigned groups = static_cast<unsigned>(a.n * a.groups);
  switch (op) {
    case KernelOp::kGroupNorm:
      GroupNormKernel<<<groups, kBlockSize, 0, stream>>>(a, x[0], x[1], x[2], y[0], y[1], y[2]);
      break;
    case KernelOp::kGroupNormGradInput:
      GroupNormGradInputKernel<<<groups, kBlockSize, 0, stream>>>(a, x[0], x[1], x[2], x[3],
                                                                  x[4], accumulate, y[0]);
      break;
    case KernelOp::kGroupNormGradParams:
      GroupNormGradParamsKernel<<<static_cast<unsigned>(a.channels), kBlockSize, 0, stream>>>(
          a, x[0], x[1], x[2], x[3], accumulate, y[0], y[1]);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
