// mse's CUDA kernels (compiler/ops/mse_family.h): one warp per row for the
// loss, whose per-row means go to scratch and are added by one block in a
// fixed order (no atomics); the gradient elementwise.
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::MseFamily::Args;

__global__ void MseRowKernel(const float* pred, const float* target,
                             int64_t rows, int64_t cols, float* row_loss) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  float s = 0.0f;
  for (int64_t j = lane; j < cols; j += kWarpSize) {
    const float diff = pred[row * cols + j] - target[row * cols + j];
    s += diff * diff;
  }
  s = WarpSum(s);
  if (lane == 0) row_loss[row] = s / static_cast<float>(cols);
}

__global__ void MseGradKernel(const float* pred, const float* target,
                              int64_t n, float factor, float* dpred,
                              bool accumulate) {
  TRAINC_GRID_STRIDE(i, n) {
    const float g = factor * (pred[i] - target[i]);
    dpred[i] = accumulate ? dpred[i] + g : g;
  }
}

}  // namespace

const char* PrepareMse(KernelOp op, const Args& a, int64_t* scratch_floats) {
  // The loss: one partial sum per row.
  if (op == KernelOp::kMse && *scratch_floats < a.rows) *scratch_floats = a.rows;
  return nullptr;
}

cudaError_t LaunchMse(KernelOp op, const Args& a, const float* const* x, float* const* y,
                      const UnitLaunch& env) {
  if (op == KernelOp::kMse) {
    // loss_sum[0] = sum_r mean_j (pred - target)^2.
    MseRowKernel<<<RowWarpBlocks(a.rows), kBlockSize, 0, env.stream>>>(x[0], x[1], a.rows,
                                                                       a.width, env.scratch);
    SumToScalarKernel<><<<1, kBlockSize, 0, env.stream>>>(env.scratch, a.rows, y[0]);
    return cudaGetLastError();
  }
  // dpred (+)= scale * 2 (pred - target) / cols.
  const int64_t n = a.rows * a.width;
  const float factor = static_cast<float>(a.loss_scale) * 2.0f / static_cast<float>(a.width);
  MseGradKernel<<<ElementwiseBlocks(n), kBlockSize, 0, env.stream>>>(x[0], x[1], n, factor,
                                                                     y[0], env.accumulate);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
