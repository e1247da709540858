// Launchers for the CUDA backend's kernels, one .cu file per layer (llm.c
// style): linear.cu, pointwise.cu, elementwise.cu; and one per unit family
// (layer_norm.cu, rms_norm.cu, softmax.cu, group_norm.cu, embedding.cu,
// mse.cu, cross_entropy.cu, attention.cu with attention_mma.cu, dropout.cu,
// reshape.cu, cast.cu, sum_squares.cu, optimizer.cu, swiglu.cu). Included
// by nvcc and by the host compiler, so it uses only the CUDA runtime API
// types.
//
// Conventions. Tensors are row-major f32 (labels i32) device pointers.
// `accumulate` selects out = v (false) or out += v (true), as the plan's
// `accumulate` attribute. Every launcher enqueues on `stream` and returns
// the launch error (cudaGetLastError), never blocks. Reductions never use
// atomics and split work by shape only, so every result is bit-for-bit
// reproducible run to run and across GPUs of one architecture.
#ifndef TRAINC_RUNTIME_CUDA_KERNELS_H_
#define TRAINC_RUNTIME_CUDA_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "runtime/device/kernel_ops.h"

namespace trainc {
namespace cuda {

// Bits of the device-side error word (see CudaDevice::Synchronize).
inline constexpr int kErrorLabelOutOfRange = 1;
inline constexpr int kErrorTokenOutOfRange = 2;  // an embedding id

struct OptimizerStepScalars;  // optimizer.cu, below

// ---- a stateless unit family's <snake>.cu (compiler/ops/kernel_families.h;
// a family prepared per plan runs library programs instead:
// cublas_linear.h, cudnn_ops.h) ---------------------------------------------
// What its kernels get besides their operands and sizes (an Args with a
// unit::Step gets the step too, its number to be read from `scalars`).
struct UnitLaunch {
  bool accumulate = false;  // outputs += the result
  bool training = true;     // false: an evaluation step
  // precision = bf16: the operands its kernels read or write as bf16
  // themselves (cuda_kernels.cc's UseBf16 rules: cross_entropy_fused's
  // logits and dlogits, add_layernorm's b, attention's qkv, y, dy, dqkv,
  // every operand of swiglu and swiglu_grad).
  bool bf16 = false;
  float* scratch = nullptr;  // the kernel scratch, at least what Prepare asked for
  int64_t scratch_floats = 0;
  int* error = nullptr;  // the device's error word (kError* bits above)
  // The step's scalars in device memory (the step number, the learning
  // rate), uploaded before the kernel, or by a captured step's replay:
  // what a family whose Args has a unit::Step reads for them.
  const OptimizerStepScalars* scalars = nullptr;
  cudaStream_t stream = nullptr;
};
// Prepare<Family>: null, or why its kernels cannot run `op` at the sizes
// `a` (once, when the plan is prepared); raises *scratch_floats to the
// scratch they need. Launch<Family>: enqueues kernel `op` of the family on
// `x` (its inputs) and `y` (its outputs), sized by `a`.
#define TRAINC_CUDA_UNIT_LAUNCHER(Fam, snake)                                               \
  const char* Prepare##Fam(KernelOp op, const ops::Fam##Family::Args& a,                     \
                           int64_t* scratch_floats);                                         \
  cudaError_t Launch##Fam(KernelOp op, const ops::Fam##Family::Args& a, const float* const* x, \
                          float* const* y, const UnitLaunch& env);
TRAINC_STATELESS_FAMILIES(TRAINC_CUDA_UNIT_LAUNCHER)
#undef TRAINC_CUDA_UNIT_LAUNCHER

// ---- attention_mma.cu: attention on tensor cores ---------------------------
// Whether attention.cu's LaunchAttention runs the tensor-core kernels for
// these sizes: bf16 operands (env.bf16), head size 64 or 128, and
// TRAINC_CUDA_ATTENTION=mma in the environment (the default stays the f32
// kernels until these have run on a GPU; docs/gpus.md). Every GPU the
// plugin runs on is sm_80 or newer (its machine code), as mma.sync needs.
bool AttentionUsesMma(const attention::Geometry& g, bool bf16);
// Whether the bf16 operands suit them (16-byte aligned).
bool MmaAttentionOperandsFit(const void* const* operands, int n);
// Lets them use their dynamic shared memory (PrepareAttention).
cudaError_t AllowMmaAttentionSharedMemory();
// qkv -> y, lse (bf16 qkv and y, f32 lse), as LaunchForward.
cudaError_t LaunchMmaAttentionForward(const attention::Geometry& g, const void* qkv, void* y,
                                      float* lse, cudaStream_t s);
// dqkv (+)= the gradient, given delta = rowsum(dy y) already computed.
cudaError_t LaunchMmaAttentionGrad(const attention::Geometry& g, const void* dy,
                                   const void* qkv, const float* lse, const float* delta,
                                   void* dqkv, bool accumulate, cudaStream_t s);

// Scratch floats the column reductions need (bias, norm parameters).
int64_t ColumnSumScratchFloats(int64_t rows, int64_t cols);

// ---- linear.cu -----------------------------------------------------------
// y[r, c] += bias[c]: the epilogue when cublasLt has no bias algorithm.
cudaError_t LaunchBiasAdd(float* y, const float* bias, int64_t rows,
                          int64_t cols, cudaStream_t stream);
// y[r, c] = bias[c] rounded to bf16 (y bf16; bias f32, or bf16 when
// `bias_bf16`): the addend of a bf16 GEMM with beta 1, when cublasLt has no
// bias algorithm for a bf16 output.
cudaError_t LaunchBiasRowsBf16(void* y, const void* bias, bool bias_bf16, int64_t rows,
                               int64_t cols, cudaStream_t stream);
// out[c] (+)= sum_r x[r, c]; `scratch` holds ColumnSumScratchFloats floats.
cudaError_t LaunchColumnSum(const float* x, int64_t rows, int64_t cols,
                            float* out, bool accumulate, float* scratch,
                            cudaStream_t stream);
// The same over bf16 x (widened exactly): the bias gradient of a bf16 dy.
cudaError_t LaunchColumnSumBf16(const void* x, int64_t rows, int64_t cols, float* out,
                                bool accumulate, float* scratch, cudaStream_t stream);

// ---- pointwise.cu --------------------------------------------------------
// y[i] (+)= F(a[i]) or F(a[i], b[i]) for a pointwise op
// (compiler/ops/pointwise.h; b unused by a unary op);
// cudaErrorInvalidValue for an op that is not pointwise.
cudaError_t LaunchPointwise(KernelOp op, const float* a, const float* b, float* y,
                            int64_t n, bool accumulate, cudaStream_t s);
// The same on bf16 tensors (uint16 values): each operand widened on load,
// F in f32 (plus the widened old y when accumulating), the result rounded
// to nearest even; the bits of the f32 launcher on staged operands.
cudaError_t LaunchPointwiseBf16(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                                bool accumulate, cudaStream_t s);
// The same with some operands f32 and some bf16: bit 0, 1, 2 of `bf16`
// for a, b, y (copy_grad of an f32 gradient into a bf16 one).
cudaError_t LaunchPointwiseMixed(KernelOp op, const void* a, const void* b, void* y, int64_t n,
                                 bool accumulate, unsigned bf16, cudaStream_t s);

// ---- elementwise.cu ------------------------------------------------------
// dst[i] = src[i] + src[count + i] + ... (slots 0..n-1 in order); dst may
// be slot 0 of src.
cudaError_t LaunchOrderedSum(const float* src, int64_t n, int64_t count,
                             float* dst, cudaStream_t s);

// bf16[i] = f32[i] rounded to nearest even (as runtime/device/bf16.h);
// bf16 holds n 16-bit values. For bf16 tensors (precision = bf16) and
// bf16 gradients on the wire (grad_comm = bf16).
cudaError_t LaunchToBf16(const float* f32, void* bf16, int64_t n, cudaStream_t s);
// f32[i] = bf16[i], exactly.
cudaError_t LaunchFromBf16(const void* bf16, float* f32, int64_t n, cudaStream_t s);

// ---- the step's scalars (UnitLaunch::scalars) ------------------------------
// What changes per step, read from device memory (not kernel arguments) so
// that a captured CUDA graph can be replayed with a new learning rate: the
// optimizer's and dropout's.
// Each is formed on the host in double and rounded once, as torch (Python
// floats) and the CPU reference do.
struct OptimizerStepScalars {
  float lr = 0.0f;                     // SGD
  float adamw_decay = 1.0f;            // 1 - lr * weight_decay
  float adamw_neg_step_size = 0.0f;    // -(lr / (1 - beta1^step))
  float bias_correction2_sqrt = 1.0f;  // sqrt(1 - beta2^step)
  int first_step = 1;                  // SGD momentum buffer = grad
  int64_t step = 1;                    // dropout: which global examples
};

}  // namespace cuda
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_KERNELS_H_
