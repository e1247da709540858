// The kernel families: every kernel op, declared once, with the family it
// belongs to. Everything that lists kernels derives from this header:
//
//   - KernelOp and KernelFamily (below), and the kernel op <-> instruction
//     op names;
//   - the resolver (runtime/device/resolve.h): one Resolve<Family> per
//     family, a missing one fails to link;
//   - each backend's table (runtime/cpu/cpu_kernels.cc,
//     runtime/cuda/cuda_kernels.cc): one binding per family, expanded to
//     the family's ops; a missing binding fails the conformance test by
//     name, and Prepare refuses a plan that needs it;
//   - the float64 reference's table (compiler/autodiff/reference_eval.cc);
//   - oneDNN's lists (runtime/cpu/dnnl_ops.cc) from the pointwise and
//     window families.
//
// Every family but Pointwise (compiler/ops/pointwise.h) is a *unit*
// family, which keeps everything but its op table entries
// (compiler/ops/op_table.cc: model op, instruction ops, gradient rules) in
// compiler/ops/<snake>_family.h, a struct ops::<Family>Family with its
// typed sizes (Args), their resolution from the operands' shapes
// (Resolve), and its loops templated on the element type, Run<double> the
// float64 reference; and in its backends' kernels, which come in two
// kinds:
//   - a *stateless* family (TRAINC_STATELESS_FAMILIES): Run<float> is the
//     CPU kernel (or a CPU kernel of its own), and runtime/cuda/<snake>.cu
//     its CUDA kernels behind one launcher, cuda::Launch<Family> (given a
//     cuda::UnitLaunch: accumulate, training, native bf16, scratch, error
//     word, stream), with cuda::Prepare<Family>, its limits and the
//     scratch it needs (declared in runtime/cuda/kernels.h; the .cu files
//     are a glob);
//   - a family *prepared per plan* (TRAINC_PREPARED_FAMILIES: linear,
//     window): its backends run library programs built once for the plan
//     (oneDNN, cuBLASLt, cuDNN), handed to its kernel in a context: the
//     CPU's cpu::OwnCpuKernel(op, args, const cpu::Prepared&), CUDA's
//     CudaDeviceImpl::PreparePrograms and RunPrograms, overloads on its
//     Args handing it to the family's class (CublasLinear, CudnnOps)
//     (compiler/ops/unit_family.h).
// The resolver, both backends' tables, KernelArgs' field for its Args and
// the reference's table pick a unit family up from the lists below; adding
// a stateless one is lines here plus its two files. What a family may
// declare beyond Args, Resolve and Run (a refusal, an i32 operand, a
// training flag, a bf16_outputs mask, f32 operands, a CPU kernel of its
// own, programs prepared per plan, the step, the plan's facts, several
// kernels for one instruction op) is compiler/ops/unit_family.h.
#ifndef TRAINC_COMPILER_OPS_KERNEL_FAMILIES_H_
#define TRAINC_COMPILER_OPS_KERNEL_FAMILIES_H_

#include <cstdint>
#include <string_view>

#include "compiler/ops/pointwise.h"

// F(Family): every family. Pointwise is TRAINC_POINTWISE_OPS
// (compiler/ops/pointwise.h).
#define TRAINC_KERNEL_FAMILIES(F) \
  F(Pointwise)                    \
  F(Linear)                       \
  F(LayerNorm)                    \
  F(RmsNorm)                      \
  F(Softmax)                      \
  F(Dropout)                      \
  F(Embedding)                    \
  F(Attention)                    \
  F(CrossEntropy)                 \
  F(Mse)                          \
  F(Window)                       \
  F(Reshape)                      \
  F(Cast)                         \
  F(SumSquares)                   \
  F(Optimizer)                    \
  F(GroupNorm)                    \
  F(SwiGlu)

// U(Family, snake): the unit families, every family but Pointwise, each
// also in TRAINC_KERNEL_FAMILIES: ops::<Family>Family in
// compiler/ops/<snake>_family.h, KernelArgs::<snake> its Args.
#define TRAINC_UNIT_FAMILIES(U) \
  TRAINC_STATELESS_FAMILIES(U)  \
  TRAINC_PREPARED_FAMILIES(U)

// The unit families whose kernels are functions of their Args and
// operands alone: Run<float> (or the CPU kernel of its own) on the CPU,
// cuda::Launch<Family> on CUDA.
#define TRAINC_STATELESS_FAMILIES(U) \
  U(LayerNorm, layer_norm)           \
  U(RmsNorm, rms_norm)               \
  U(Softmax, softmax)                \
  U(Attention, attention)            \
  U(GroupNorm, group_norm)           \
  U(CrossEntropy, cross_entropy)     \
  U(Mse, mse)                        \
  U(Embedding, embedding)            \
  U(Dropout, dropout)                \
  U(Reshape, reshape)                \
  U(Cast, cast)                      \
  U(SumSquares, sum_squares)         \
  U(Optimizer, optimizer)            \
  U(SwiGlu, swiglu)

// The unit families prepared per plan (compiler/ops/unit_family.h): each
// backend runs library programs it built once for the plan (oneDNN's and
// cuBLASLt's matmuls; oneDNN's and cuDNN's convolutions and pooling).
#define TRAINC_PREPARED_FAMILIES(U) \
  U(Linear, linear)                 \
  U(Window, window)

// X(Family, Name, instruction op): the kernels that are not pointwise. The
// operands of each are in its OpDef::doc (compiler/ops/op_table.cc).
#define TRAINC_KERNEL_OPS(X)                                   \
  X(Linear, Linear, linear)                                    \
  X(Linear, LinearGradInput, linear_grad_input)                \
  X(Linear, LinearGradParams, linear_grad_params)              \
  X(Linear, LinearGelu, linear_gelu)                           \
  X(Linear, LinearRelu, linear_relu)                           \
  X(Linear, LinearTanh, linear_tanh)                           \
  X(Linear, LinearGeluErf, linear_gelu_erf)                    \
  X(Linear, LinearGradInputGelu, linear_grad_input_gelu)       \
  X(Window, Conv2d, conv2d)                                    \
  X(Window, Conv2dRelu, conv2d_relu)                           \
  X(Window, Conv2dGradInput, conv2d_grad_input)                \
  X(Window, Conv2dGradParams, conv2d_grad_params)              \
  X(Window, MaxPool2d, max_pool2d)                             \
  X(Window, MaxPool2dGrad, max_pool2d_grad)                    \
  X(Window, AvgPool2d, avg_pool2d)                             \
  X(Window, AvgPool2dGrad, avg_pool2d_grad)                    \
  X(LayerNorm, LayerNorm, layernorm)                           \
  X(LayerNorm, LayerNormGradInput, layernorm_grad_input)       \
  X(LayerNorm, LayerNormGradParams, layernorm_grad_params)     \
  X(LayerNorm, AddLayerNorm, add_layernorm)                    \
  X(RmsNorm, RmsNorm, rmsnorm)                                 \
  X(RmsNorm, RmsNormGradInput, rmsnorm_grad_input)             \
  X(RmsNorm, RmsNormGradParams, rmsnorm_grad_params)           \
  X(Softmax, Softmax, softmax)                                 \
  X(Softmax, SoftmaxGrad, softmax_grad)                        \
  X(Attention, Attention, attention)                           \
  X(Attention, AttentionGrad, attention_grad)                  \
  X(GroupNorm, GroupNorm, group_norm)                          \
  X(GroupNorm, GroupNormGradInput, group_norm_grad_input)      \
  X(GroupNorm, GroupNormGradParams, group_norm_grad_params)    \
  X(CrossEntropy, CrossEntropy, cross_entropy)                 \
  X(CrossEntropy, CrossEntropyGrad, cross_entropy_grad)        \
  X(CrossEntropy, CrossEntropyFused, cross_entropy_fused)      \
  X(Mse, Mse, mse)                                             \
  X(Mse, MseGrad, mse_grad)                                    \
  X(Embedding, Embedding, embedding)                           \
  X(Embedding, EmbeddingGrad, embedding_grad)                  \
  X(Embedding, PositionEmbedding, position_embedding)          \
  X(Embedding, PositionEmbeddingGrad, position_embedding_grad) \
  X(Dropout, Dropout, dropout)                                 \
  X(Dropout, DropoutGrad, dropout_grad)                        \
  X(Reshape, Reshape, reshape)                                 \
  X(Cast, CastToBf16, cast)                                    \
  X(Cast, CastToF32, cast)                                     \
  X(SumSquares, SumSquares, sum_squares)                       \
  X(Optimizer, AdamW, optimizer)                               \
  X(Optimizer, Sgd, optimizer)                                 \
  X(SwiGlu, SwiGlu, swiglu)                                    \
  X(SwiGlu, SwiGluGrad, swiglu_grad)

namespace trainc {

#define TRAINC_POINTWISE_ENUM(op, Name, arity) k##Name,
#define TRAINC_KERNEL_ENUM(Family, Name, op) k##Name,
enum class KernelOp : uint8_t {
  kNotCompute,  // load_batch and the collectives: the executor's, not a kernel
  TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_ENUM)
  TRAINC_KERNEL_OPS(TRAINC_KERNEL_ENUM)
};
#undef TRAINC_POINTWISE_ENUM
#undef TRAINC_KERNEL_ENUM

#define TRAINC_FAMILY_ENUM(Family) k##Family,
enum class KernelFamily : uint8_t {
  kNone,  // kNotCompute
  TRAINC_KERNEL_FAMILIES(TRAINC_FAMILY_ENUM)
};
#undef TRAINC_FAMILY_ENUM

namespace kernel_ops_internal {
#define TRAINC_POINTWISE_NAME(op, Name, arity) #op,
#define TRAINC_KERNEL_NAME(Family, Name, op) #op,
inline constexpr const char* kInstructionOps[] = {
    "", TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_NAME) TRAINC_KERNEL_OPS(TRAINC_KERNEL_NAME)};
#define TRAINC_POINTWISE_KERNEL(op, Name, arity) #Name,
#define TRAINC_KERNEL_KERNEL(Family, Name, op) #Name,
inline constexpr const char* kKernelNames[] = {
    "NotCompute", TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_KERNEL)
                      TRAINC_KERNEL_OPS(TRAINC_KERNEL_KERNEL)};
#define TRAINC_POINTWISE_ARITY(op, Name, arity) arity,
inline constexpr int kPointwiseArity[] = {
    0, TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_ARITY)};
#define TRAINC_POINTWISE_FAMILY(op, Name, arity) KernelFamily::kPointwise,
#define TRAINC_KERNEL_FAMILY(Family, Name, op) KernelFamily::k##Family,
inline constexpr KernelFamily kFamilies[] = {
    KernelFamily::kNone, TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_FAMILY)
                             TRAINC_KERNEL_OPS(TRAINC_KERNEL_FAMILY)};
#define TRAINC_FAMILY_NAME(Family) #Family,
inline constexpr const char* kFamilyNames[] = {
    "None", TRAINC_KERNEL_FAMILIES(TRAINC_FAMILY_NAME)};
#undef TRAINC_POINTWISE_NAME
#undef TRAINC_KERNEL_NAME
#undef TRAINC_POINTWISE_ARITY
#undef TRAINC_POINTWISE_KERNEL
#undef TRAINC_KERNEL_KERNEL
#undef TRAINC_POINTWISE_FAMILY
#undef TRAINC_KERNEL_FAMILY
#undef TRAINC_FAMILY_NAME
}  // namespace kernel_ops_internal

// Every KernelOp, kNotCompute included.
inline constexpr int kNumKernelOps =
    sizeof(kernel_ops_internal::kInstructionOps) / sizeof(const char*);
// Every KernelFamily, kNone included.
inline constexpr int kNumKernelFamilies =
    sizeof(kernel_ops_internal::kFamilyNames) / sizeof(const char*);

// The instruction op a kernel runs ("linear"; "cast" for both casts);
// "" for kNotCompute.
inline const char* InstructionOpOf(KernelOp op) {
  return kernel_ops_internal::kInstructionOps[static_cast<int>(op)];
}

// The (first) kernel of instruction op `name`; kNotCompute when none:
// where a plan's op string becomes an enum (parsing, resolving), so that
// everything after compares enums.
inline KernelOp KernelOpOfInstruction(std::string_view name) {
  for (int i = 1; i < kNumKernelOps; ++i) {
    if (name == kernel_ops_internal::kInstructionOps[i]) return static_cast<KernelOp>(i);
  }
  return KernelOp::kNotCompute;
}


// What an instruction that runs no kernel (KernelOp::kNotCompute) does:
// the executor's own ops, the step's input and the collectives. kKernel
// for every other op.
enum class StepOp : uint8_t { kKernel, kLoadBatch, kAllReduce, kReduceScatter, kAllGather };

// The StepOp of instruction op `name`: where a plan's op string becomes an
// enum, so that what follows compares enums.
inline StepOp StepOpOfInstruction(std::string_view name) {
  if (name == "load_batch") return StepOp::kLoadBatch;
  if (name == "all_reduce") return StepOp::kAllReduce;
  if (name == "reduce_scatter") return StepOp::kReduceScatter;
  if (name == "all_gather") return StepOp::kAllGather;
  return StepOp::kKernel;
}

// Whether `op` is a collective (on the comm stream).
inline constexpr bool IsCollectiveOp(StepOp op) {
  return op == StepOp::kAllReduce || op == StepOp::kReduceScatter || op == StepOp::kAllGather;
}

// cross_entropy, or the fused instruction that also writes its gradient
// (both read logits, label): what evaluation and sampling look for.
inline constexpr bool IsCrossEntropy(KernelOp op) {
  return op == KernelOp::kCrossEntropy || op == KernelOp::kCrossEntropyFused;
}

// The kernel's own name, the enumerator without its k: "CastToBf16".
inline const char* KernelOpName(KernelOp op) {
  return kernel_ops_internal::kKernelNames[static_cast<int>(op)];
}

// The family of a kernel; kNone for kNotCompute.
inline constexpr KernelFamily FamilyOf(KernelOp op) {
  return kernel_ops_internal::kFamilies[static_cast<int>(op)];
}

// The family of instruction op `name` (KernelFamily::kCast for "cast");
// kNone for an op without a kernel.
inline KernelFamily FamilyOfInstruction(std::string_view name) {
  return FamilyOf(KernelOpOfInstruction(name));
}

// The family's name, the enumerator without its k: "LayerNorm".
inline const char* KernelFamilyName(KernelFamily family) {
  return kernel_ops_internal::kFamilyNames[static_cast<int>(family)];
}

// 1 or 2 for a pointwise op (y = F(a) or F(a, b)), else 0.
inline int PointwiseArity(KernelOp op) {
  const int i = static_cast<int>(op);
  return i < static_cast<int>(sizeof(kernel_ops_internal::kPointwiseArity) / sizeof(int))
             ? kernel_ops_internal::kPointwiseArity[i]
             : 0;
}

}  // namespace trainc

// The unit families' own headers (each includes this one).
#include "compiler/ops/attention_family.h"
#include "compiler/ops/group_norm_family.h"
#include "compiler/ops/cross_entropy_family.h"
#include "compiler/ops/mse_family.h"
#include "compiler/ops/embedding_family.h"
#include "compiler/ops/layer_norm_family.h"
#include "compiler/ops/linear_family.h"
#include "compiler/ops/rms_norm_family.h"
#include "compiler/ops/softmax_family.h"
#include "compiler/ops/window_family.h"
#include "compiler/ops/dropout_family.h"
#include "compiler/ops/reshape_family.h"
#include "compiler/ops/cast_family.h"
#include "compiler/ops/sum_squares_family.h"
#include "compiler/ops/optimizer_family.h"
#include "compiler/ops/swiglu_family.h"

#endif  // TRAINC_COMPILER_OPS_KERNEL_FAMILIES_H_
