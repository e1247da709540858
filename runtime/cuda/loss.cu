// Cross-entropy (stable log-sum-exp, one warp per row; mse is mse.cu).
// Per-row losses go to scratch and one block adds them in a fixed order,
// so loss_sum is reproducible (no atomics).
#include "runtime/cuda/common.cuh"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace cuda {
namespace {

__device__ __forceinline__ int64_t WarpRow() {
  return blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) +
         threadIdx.x / kWarpSize;
}

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

}  // namespace

cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* labels,
                               int64_t rows, int64_t classes, float* loss_sum,
                               float* probs, float* scratch, int* error,
                               cudaStream_t s) {
  CrossEntropyKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
      logits, labels, rows, classes, scratch, probs, error);
  SumToScalarKernel<><<<1, kBlockSize, 0, s>>>(scratch, rows, loss_sum);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyGrad(const float* probs, const int32_t* labels,
                                   int64_t rows, int64_t classes, float scale,
                                   float* dlogits, bool accumulate, int* error,
                                   cudaStream_t s) {
  CrossEntropyGradKernel<<<ElementwiseBlocks(rows * classes), kBlockSize, 0,
                           s>>>(probs, labels, rows, classes, scale, dlogits,
                                accumulate, error);
  return cudaGetLastError();
}

cudaError_t LaunchFusedClassifier(const void* logits, const int32_t* labels, int64_t rows,
                                  int64_t classes, float scale, float* loss_sum, void* dlogits,
                                  bool bf16, float* scratch, int* error, cudaStream_t s) {
  if (bf16) {
    FusedClassifierKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
        static_cast<const __nv_bfloat16*>(logits), labels, rows, classes, scale, scratch,
        static_cast<__nv_bfloat16*>(dlogits), error);
  } else {
    FusedClassifierKernel<<<RowWarpBlocks(rows), kBlockSize, 0, s>>>(
        static_cast<const float*>(logits), labels, rows, classes, scale, scratch,
        static_cast<float*>(dlogits), error);
  }
  SumToScalarKernel<><<<1, kBlockSize, 0, s>>>(scratch, rows, loss_sum);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace trainc
