// cross_entropy's CUDA kernels (compiler/ops/cross_entropy_family.h):
// stable log-sum-exp, one warp per row. Per-row losses go to scratch and
// one block adds them in a fixed order, so loss_sum is reproducible (no
// atomics).
#include "compiler/ops/kernel_families.h"
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

using Args = ops::CrossEntropyFamily::Args;

// loss = logsumexp(z) - z[label] rather than -log(softmax[label]): exact
// for confident wrong predictions, where the probability underflows to 0.
__global__ void CrossEntropyKernel(const float* logits, const int32_t* labels,
                                   int64_t rows, int64_t classes,
                                   float* row_loss, float* probs, int* error) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* z = logits + row * classes;
  float mx = -INFINITY;
  for (int64_t j = lane; j < classes; j += kWarpSize) mx = fmaxf(mx, z[j]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t j = lane; j < classes; j += kWarpSize) sum += expf(z[j] - mx);
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  // The loss before the probabilities: `probs` may be `logits` (the fused
  // classifier writes its gradient over them), and null writes none.
  if (lane == 0) {
    const int32_t label = labels[row];
    if (label < 0 || label >= classes) {
      atomicOr(error, kErrorLabelOutOfRange);
      row_loss[row] = 0.0f;
    } else {
      // (z[label] - mx) first, as the CPU does: logf(sum) + mx would round
      // at the magnitude of mx and swamp a small loss (confident, right).
      row_loss[row] = logf(sum) - (z[label] - mx);
    }
  }
  __syncwarp();
  if (probs == nullptr) return;
  float* p = probs + row * classes;
  for (int64_t j = lane; j < classes; j += kWarpSize) {
    p[j] = expf(z[j] - mx) * inv;
  }
}

__global__ void CrossEntropyGradKernel(const float* probs,
                                       const int32_t* labels, int64_t rows,
                                       int64_t classes, float scale,
                                       float* dlogits, bool accumulate,
                                       int* error) {
  TRAINC_GRID_STRIDE(i, rows * classes) {
    const int64_t row = i / classes;
    const int32_t label = labels[row];
    if (label < 0 || label >= classes) atomicOr(error, kErrorLabelOutOfRange);
    const float onehot = (i - row * classes) == label ? 1.0f : 0.0f;
    const float g = scale * (probs[i] - onehot);
    dlogits[i] = accumulate ? dlogits[i] + g : g;
  }
}

// cross_entropy_fused in training: the loss of each row and its gradient
// scale * (softmax(z) - onehot(label)) written as T (f32, or bf16 rounded
// to nearest even), possibly over the logits themselves, in one pass more
// over the row instead of a probability tensor. p is rounded to f32 before
// the subtraction (no FMA), as when CrossEntropyKernel stored it.
template <typename T>
__global__ void FusedClassifierKernel(const T* logits, const int32_t* labels, int64_t rows,
                                      int64_t classes, float scale, float* row_loss,
                                      T* dlogits, int* error) {
  const int64_t row = WarpRow();
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const T* z = logits + row * classes;
  float mx = -INFINITY;
  for (int64_t j = lane; j < classes; j += kWarpSize) mx = fmaxf(mx, ToF32(z[j]));
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int64_t j = lane; j < classes; j += kWarpSize) sum += expf(ToF32(z[j]) - mx);
  sum = WarpSum(sum);
  const float inv = 1.0f / sum;
  const int32_t label = labels[row];
  const bool valid = label >= 0 && label < classes;
  if (lane == 0) {
    if (!valid) atomicOr(error, kErrorLabelOutOfRange);
    row_loss[row] = valid ? logf(sum) - (ToF32(z[label]) - mx) : 0.0f;
  }
  if (dlogits == nullptr) return;  // evaluation: the loss alone
  __syncwarp();  // z[label] is read before any lane writes over it
  T* d = dlogits + row * classes;
  for (int64_t j = lane; j < classes; j += kWarpSize) {
    const float p = __fmul_rn(expf(ToF32(z[j]) - mx), inv);
    const float onehot = j == label ? 1.0f : 0.0f;
    d[j] = FromF32<T>(scale * (p - onehot));
  }
}

// loss_sum[0] = sum_r (logsumexp(logits[r]) - logits[r, label[r]]);
// probs = softmax(logits). `scratch` holds `rows` floats.
cudaError_t Forward(const Args& a, const float* logits, float* loss_sum, float* probs,
                    const UnitLaunch& env) {
  CrossEntropyKernel<<<RowWarpBlocks(a.rows), kBlockSize, 0, env.stream>>>(
      logits, a.labels, a.rows, a.classes, env.scratch, probs, env.error);
  SumToScalarKernel<><<<1, kBlockSize, 0, env.stream>>>(env.scratch, a.rows, loss_sum);
  return cudaGetLastError();
}

// dlogits (+)= scale * (probs - onehot(label)).
cudaError_t Grad(const Args& a, const float* probs, float* dlogits, const UnitLaunch& env) {
  CrossEntropyGradKernel<<<ElementwiseBlocks(a.rows * a.classes), kBlockSize, 0, env.stream>>>(
      probs, a.labels, a.rows, a.classes, static_cast<float>(a.loss_scale), dlogits,
      env.accumulate, env.error);
  return cudaGetLastError();
}

// Forward's loss_sum, and (non-null dlogits: training) dlogits = scale *
// (softmax(logits) - onehot(label)) without a probability tensor (dlogits
// may be logits). Both f32, or both bf16 when `bf16` (widened on load, the
// gradient rounded to nearest even).
cudaError_t FusedClassifier(const Args& a, const void* logits, float* loss_sum, void* dlogits,
                            bool bf16, const UnitLaunch& env) {
  const float scale = static_cast<float>(a.loss_scale);
  if (bf16) {
    FusedClassifierKernel<<<RowWarpBlocks(a.rows), kBlockSize, 0, env.stream>>>(
        static_cast<const __nv_bfloat16*>(logits), a.labels, a.rows, a.classes, scale,
        env.scratch, static_cast<__nv_bfloat16*>(dlogits), env.error);
  } else {
    FusedClassifierKernel<<<RowWarpBlocks(a.rows), kBlockSize, 0, env.stream>>>(
        static_cast<const float*>(logits), a.labels, a.rows, a.classes, scale, env.scratch,
        static_cast<float*>(dlogits), env.error);
  }
  SumToScalarKernel<><<<1, kBlockSize, 0, env.stream>>>(env.scratch, a.rows, loss_sum);
  return cudaGetLastError();
}

}  // namespace

const char* PrepareCrossEntropy(KernelOp op, const Args& a, int64_t* scratch_floats) {
  // One partial sum per row (not the gradient's).
  if (op != KernelOp::kCrossEntropyGrad && *scratch_floats < a.rows) *scratch_floats = a.rows;
  return nullptr;
}

cudaError_t LaunchCrossEntropy(KernelOp op, const Args& a, const float* const* x,
                               float* const* y, const UnitLaunch& env) {
  switch (op) {
    case KernelOp::kCrossEntropy:
      return Forward(a, x[0], y[0], y[1], env);
    case KernelOp::kCrossEntropyGrad:
      return Grad(a, x[0], y[0], env);
    case KernelOp::kCrossEntropyFused: {
      // The plan's fusion: one kernel, the gradient written over the
      // logits row by row, no probability tensor; bf16 logits read and
      // written as bf16 (env.bf16: UseBf16Classifier). Evaluation: the
      // loss alone, and the logits left as they were (dlogits may occupy
      // their bytes, or their staging's).
      const void* logits = x[0];
      void* dlogits = y[1];
      const cudaError_t err = FusedClassifier(a, logits, y[0],
                                              env.training ? dlogits : nullptr, env.bf16, env);
      if (err != cudaSuccess || env.training || dlogits == logits) return err;
      return cudaMemcpyAsync(dlogits, logits,
                             static_cast<size_t>(a.rows * a.classes) * (env.bf16 ? 2 : 4),
                             cudaMemcpyDeviceToDevice, env.stream);
    }
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace trainc
