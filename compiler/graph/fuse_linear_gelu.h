// FuseLinearGelu: a linear and the tanh GELU of its output as one
// instruction.
//
// GPT-2's MLP is `gelu(linear(x, 4 C), approximate = "tanh")`: after
// autodiff, linear writes pre (bias included), gelu_tanh reads it and
// writes y, and the backward's gelu_tanh_grad reads pre again. When pre has
// no other reader, this pass replaces the pair by
// linear_gelu(x, w, b) -> pre, y at the linear's place: one instruction
// writing both (on CUDA one cublasLt GEMM with the GELU_AUX_BIAS epilogue,
// pre as its aux output), the same arithmetic (compiler/ops/op_table.cc,
// the kernels' comments). The backward nodes read pre and y as before.
// Runs after MixedPrecision: under bf16 the fused node reads the linear's
// bf16 operands and writes bf16, as the two did.
#ifndef TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_H_
#define TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseLinearGelu : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_linear_gelu"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_H_
