// FuseSwiGlu: Llama's gated MLP activation, `silu(gate) * up`, as one
// instruction forward and one backward.
//
// After autodiff the pair is five instructions, each a pass over the
// MLP's hidden activations: silu(gate) -> s and mul(s, up) -> y forward;
// mul_grad(dy, up) -> ds, mul_grad(dy, s) -> dup and silu_grad(ds, gate)
// -> dgate backward. This pass replaces them by swiglu(gate, up) -> y at
// the mul's place and swiglu_grad(dy, gate, up) -> dgate, dup at the first
// mul_grad's (compiler/ops/swiglu_family.h): s and ds are never stored,
// nor kept from the forward to the backward, and the gradient recomputes
// silu(gate). The same arithmetic in the same order, so the same bits.
//
// Preconditions, checked on the graph (otherwise the five stay apart):
//   - silu is a forward node, the only writer of s; s is read by the mul
//     (either operand; the other, up, is neither s nor gate) and by at
//     most one other node, the mul_grad of up; s then takes all of the
//     backward fusion below, or nothing is fused (s must still exist);
//   - gate, up, s and y (and dy, ds, dgate, dup) have one dtype: f32, or
//     all bf16 (the kernels then round s and ds to bf16 as the unfused
//     plan stored them);
//   - backward: ds written by mul_grad(dy, up) alone, without
//     accumulating, and read by silu_grad(ds, gate) alone; dy the
//     gradient of y; dgate and dup gradients of activations (a parameter's
//     gradient takes micro-step accumulation as the whole instruction's
//     flag) written by silu_grad and the other mul_grad with the same
//     accumulate flag, which the fused node takes; no other node between
//     the first and the last of the three reads or writes dy, dgate or dup
//     (the fused node writes both at the first's place).
// Without a backward (up and gate constants, or evaluation) the forward
// pair alone is fused when s has no other reader.
//
// Runs after MixedPrecision (it reads the dtypes) and autodiff, and before
// Recompute, which then copies the fused forward node and points the fused
// backward node's gate and up at the copies (compiler/graph/pipeline.h).
#ifndef TRAINC_COMPILER_GRAPH_FUSE_SWIGLU_H_
#define TRAINC_COMPILER_GRAPH_FUSE_SWIGLU_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseSwiGlu : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_swiglu"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_SWIGLU_H_
