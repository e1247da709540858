// FuseLinearActivation and FuseConvRelu: a linear or a convolution and the
// activation of its output as one instruction, decided here and visible in
// the plan; the backends run the fused op and never decide to fuse.
//
// FuseLinearActivation: `relu(linear(..))`, `tanh(linear(..))` and
// `gelu(linear(..))` (erf form; the tanh form is FuseLinearGelu's) become
// linear_relu / linear_tanh / linear_gelu_erf(x, w, b) -> [pre,] y at the
// linear's place: the product, the bias and the activation in one pass over
// the output (on CUDA linear_relu without pre is one cublasLt GEMM with the
// RELU_BIAS epilogue). pre, the linear's output, stays an output only when
// another node reads it: gelu_grad reads it (so a trained gelu keeps it),
// relu_grad and tanh_grad read y instead (so a trained MLP's relu drops it,
// and with it a buffer per layer), and so does any other reader.
//
// FuseConvRelu: `relu(conv2d(..))` becomes conv2d_relu(x, w, b) -> y,
// workspace (oneDNN's relu post-op) when the relu is the convolution
// output's only reader: the convolution's own output is never stored.
//
// Preconditions, checked on the graph:
//   - the activation is a forward node reading the forward linear's (or
//     convolution's) output, its only input;
//   - every value of both nodes is f32. Under precision = bf16 the
//     activation reads the bf16-rounded output, which one kernel would not
//     round: those pairs stay apart.
// As one instruction nothing can come between the two (no event, no other
// instruction), and the memory plan keeps every output of an instruction
// apart from its inputs (both are live at it), so y never shares bytes
// with x, w or b. The arithmetic is the two instructions' (the kernels'
// comments). Runs after MixedPrecision (it reads the dtypes) and before
// Recompute, which then copies the fused node (compiler/graph/pipeline.h).
#ifndef TRAINC_COMPILER_GRAPH_FUSE_ACTIVATION_H_
#define TRAINC_COMPILER_GRAPH_FUSE_ACTIVATION_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseLinearActivation : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_linear_activation"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

class FuseConvRelu : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_conv_relu"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_ACTIVATION_H_
