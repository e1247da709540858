// FuseLinearGeluGrad: in the backward, a linear's input gradient and the
// tanh GELU's gradient of it as one instruction (the mirror of
// fuse_linear_gelu.h).
//
// GPT-2's MLP is `linear(gelu(linear(x, 4 C), approximate = "tanh"), C)`:
// after autodiff the projection's linear_grad_input(dy, w) writes dh (the
// gradient of the GELU's output) and gelu_tanh_grad(dh, pre) reads it and
// writes dpre. When dh has no other reader and no other writer (written by
// that linear_grad_input alone, not accumulated) and the same dtype as
// dpre, this pass replaces the pair by
// linear_grad_input_gelu(dy, w, pre) -> dpre, workspace at the
// gelu_tanh_grad's place (its operands all exist there): one instruction
// (on CUDA one cublasLt GEMM with the DGELU epilogue, pre as its aux
// input), dh never stored; the same arithmetic (compiler/ops/op_table.cc,
// the kernels' comments). It takes gelu_tanh_grad's accumulate: where
// dpre has another contribution the fused node adds to it, dh then held
// in the node's workspace (sized by the backend; empty otherwise).
//
// Runs after MixedPrecision: the fused node reads the bf16 casts (dy's and
// w's) and pre, and writes dpre, as the two did; dh's dtype (dpre's, which
// the pass checks) says whether the product is rounded to bf16 before the
// gelu's gradient reads it. After FuseLinearGelu, whose test of pre's
// readers accepts gelu_tanh_grad, not the fused node. Before Recompute,
// beside the forward fusions: Recompute copies forward nodes only and
// points the backward readers of a block's values at the copies, so the
// fused node, a backward node reading the forward values the two read (w's
// cast, pre), gets the same recomputed copies, and dh is a backward value
// it never touches.
#ifndef TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_GRAD_H_
#define TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_GRAD_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseLinearGeluGrad : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_linear_gelu_grad"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_LINEAR_GELU_GRAD_H_
