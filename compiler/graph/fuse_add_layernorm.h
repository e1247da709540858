// FuseAddLayerNorm: a residual add and the layernorm of its sum as one
// instruction.
//
// A pre-norm transformer block (GPT-2's) adds each sublayer's output to
// the residual stream and normalizes the sum for the next sublayer:
// `r = x + attn(ln_1(x))`, then `ln_2(r)`; the block's output `r + mlp`
// is the next block's ln_1 input (after the last block, ln_f's). After
// autodiff, add writes the sum and layernorm reads it back and writes y,
// mean and rstd. When the sum of an add is read by exactly one layernorm
// of the same role, as its x, this pass replaces the pair by
// add_layernorm(a, b, weight, bias) -> sum, y, mean, rstd at the add's
// place (llm.c's fused_residual_forward): one pass over the rows that
// writes the sum and normalizes it as it is made, the same arithmetic
// (compiler/ops/op_table.cc, the kernels' comments). The sum is still
// written, so its other readers are fine: the next residual add and the
// layernorm's gradients read it, and every backward node reads the values
// it read before. Two layernorms of one sum leave the add alone. y may
// take b's bytes (OpDef::in_place): the sublayer's output that b is has
// no reader after the add, and the unfused layernorm could have taken
// them too, so the fused plan's arena is no larger.
//
// Runs after MixedPrecision (the values keep their dtypes: the residual
// sum f32, y, mean and rstd f32; a sum of two bf16 values stays bf16 and
// is rounded before it is normalized) and after Recompute: a block's
// output is its recomputation checkpoint and the layernorm reading it
// belongs to the next block, which recomputes that layernorm alone from
// the checkpoint; fused first, the pair would move into the first block
// and the next block would keep its ln_1 output instead. So the forward
// pairs are fused here, and so are the recomputed copies of a pair inside
// one block (both role backward, made by Recompute).
#ifndef TRAINC_COMPILER_GRAPH_FUSE_ADD_LAYERNORM_H_
#define TRAINC_COMPILER_GRAPH_FUSE_ADD_LAYERNORM_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseAddLayerNorm : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_add_layernorm"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_ADD_LAYERNORM_H_
