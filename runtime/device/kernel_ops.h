// KernelOp: the one list of kernels every backend provides, one per
// compute instruction op of the op table (compiler/ops/op_table.h), or two
// where the instruction's dtypes or the plan pick between them (cast,
// optimizer). Pointwise ops come from their own list
// (compiler/ops/pointwise.h); the rest are below.
//
// Each backend fills a KernelTable indexed by KernelOp; a backend that
// lacks an op's kernel says so when it prepares a plan that uses it, and
// runtime/conformance/op_conformance_test.cc checks that every op has one everywhere.
#ifndef TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_
#define TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_

#include <array>
#include <cstdint>

#include "compiler/ops/pointwise.h"

// X(Name, instruction op): the kernels that are not pointwise. The
// operands of each are in its OpDef::doc (compiler/ops/op_table.cc).
#define TRAINC_KERNEL_OPS(X)                            \
  X(Linear, linear)                                     \
  X(LinearGradInput, linear_grad_input)                 \
  X(LinearGradParams, linear_grad_params)               \
  X(LinearGelu, linear_gelu)                            \
  X(LinearGradInputGelu, linear_grad_input_gelu)        \
  X(LayerNorm, layernorm)                               \
  X(LayerNormGradInput, layernorm_grad_input)           \
  X(LayerNormGradParams, layernorm_grad_params)         \
  X(AddLayerNorm, add_layernorm)                        \
  X(RmsNorm, rmsnorm)                                   \
  X(RmsNormGradInput, rmsnorm_grad_input)               \
  X(RmsNormGradParams, rmsnorm_grad_params)             \
  X(Softmax, softmax)                                   \
  X(SoftmaxGrad, softmax_grad)                          \
  X(Dropout, dropout)                                   \
  X(DropoutGrad, dropout_grad)                          \
  X(Embedding, embedding)                               \
  X(EmbeddingGrad, embedding_grad)                      \
  X(PositionEmbedding, position_embedding)              \
  X(PositionEmbeddingGrad, position_embedding_grad)     \
  X(Attention, attention)                               \
  X(AttentionGrad, attention_grad)                      \
  X(CrossEntropy, cross_entropy)                        \
  X(CrossEntropyGrad, cross_entropy_grad)               \
  X(CrossEntropyFused, cross_entropy_fused)             \
  X(Mse, mse)                                           \
  X(MseGrad, mse_grad)                                  \
  X(Conv2d, conv2d)                                     \
  X(Conv2dGradInput, conv2d_grad_input)                 \
  X(Conv2dGradParams, conv2d_grad_params)               \
  X(MaxPool2d, max_pool2d)                              \
  X(MaxPool2dGrad, max_pool2d_grad)                     \
  X(AvgPool2d, avg_pool2d)                              \
  X(AvgPool2dGrad, avg_pool2d_grad)                     \
  X(Reshape, reshape)                                   \
  X(CastToBf16, cast)                                   \
  X(CastToF32, cast)                                    \
  X(SumSquares, sum_squares)                            \
  X(AdamW, optimizer)                                   \
  X(Sgd, optimizer)

namespace trainc {

#define TRAINC_POINTWISE_ENUM(op, Name, arity) k##Name,
#define TRAINC_KERNEL_ENUM(Name, op) k##Name,
enum class KernelOp : uint8_t {
  kNotCompute,  // load_batch and the collectives: the executor's, not a kernel
  kFused,       // an activation already computed by the linear before it
  TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_ENUM)
  TRAINC_KERNEL_OPS(TRAINC_KERNEL_ENUM)
};
#undef TRAINC_POINTWISE_ENUM
#undef TRAINC_KERNEL_ENUM

namespace kernel_ops_internal {
#define TRAINC_POINTWISE_NAME(op, Name, arity) #op,
#define TRAINC_KERNEL_NAME(Name, op) #op,
inline constexpr const char* kInstructionOps[] = {
    "", "", TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_NAME)
                TRAINC_KERNEL_OPS(TRAINC_KERNEL_NAME)};
#define TRAINC_POINTWISE_KERNEL(op, Name, arity) #Name,
#define TRAINC_KERNEL_KERNEL(Name, op) #Name,
inline constexpr const char* kKernelNames[] = {
    "NotCompute", "Fused", TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_KERNEL)
                               TRAINC_KERNEL_OPS(TRAINC_KERNEL_KERNEL)};
#define TRAINC_POINTWISE_ARITY(op, Name, arity) arity,
inline constexpr int kPointwiseArity[] = {
    0, 0, TRAINC_POINTWISE_OPS(TRAINC_POINTWISE_ARITY)};
#undef TRAINC_POINTWISE_NAME
#undef TRAINC_KERNEL_NAME
#undef TRAINC_POINTWISE_ARITY
#undef TRAINC_POINTWISE_KERNEL
#undef TRAINC_KERNEL_KERNEL
}  // namespace kernel_ops_internal

// Every KernelOp, kNotCompute and kFused included.
inline constexpr int kNumKernelOps =
    sizeof(kernel_ops_internal::kInstructionOps) / sizeof(const char*);

// The instruction op a kernel runs ("linear"; "cast" for both casts);
// "" for kNotCompute and kFused.
inline const char* InstructionOpOf(KernelOp op) {
  return kernel_ops_internal::kInstructionOps[static_cast<int>(op)];
}

// The (first) kernel of instruction op `name`; kNotCompute when none.
inline KernelOp KernelOpOfInstruction(const char* name) {
  for (int i = 2; i < kNumKernelOps; ++i) {
    const char* a = kernel_ops_internal::kInstructionOps[i];
    const char* b = name;
    while (*a != 0 && *a == *b) ++a, ++b;
    if (*a == 0 && *b == 0) return static_cast<KernelOp>(i);
  }
  return KernelOp::kNotCompute;
}

// The kernel's own name, the enumerator without its k: "CastToBf16".
inline const char* KernelOpName(KernelOp op) {
  return kernel_ops_internal::kKernelNames[static_cast<int>(op)];
}

// 1 or 2 for a pointwise op (y = F(a) or F(a, b)), else 0.
inline int PointwiseArity(KernelOp op) {
  const int i = static_cast<int>(op);
  return i < static_cast<int>(sizeof(kernel_ops_internal::kPointwiseArity) / sizeof(int))
             ? kernel_ops_internal::kPointwiseArity[i]
             : 0;
}

// A backend's kernels, indexed by KernelOp; nullptr where it has none.
template <typename Fn>
class KernelTable {
 public:
  Fn& operator[](KernelOp op) { return fns_[static_cast<int>(op)]; }
  Fn operator[](KernelOp op) const { return fns_[static_cast<int>(op)]; }

 private:
  std::array<Fn, kNumKernelOps> fns_{};
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_
