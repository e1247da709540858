// Activation recomputation (`repeat(layer, n, x, recompute = true)`): the
// forward values inside each listed block instance are not kept for the
// backward pass; the block's forward nodes the backward needs are run
// again, from the block's input, just before the first backward node that
// reads them.
//
// A block instance is a value-name prefix ("h.3": h.3.ln_1, h.3.attn.y,
// h.3.attn.y/lse, h.3.ln_1.bf16 ...). Values of the block read by forward
// nodes outside it (its output, the next block's input) stay saved: they
// are the checkpoints. The copies ("<name>.recompute", role backward,
// labels ending "(recompute)") compute what the originals did from the
// same operands, dropout masks included (a mask is a function of the
// statement's key, the example and the step), so the gradients are the
// same bits; the memory planner frees the originals after their last
// forward reader.
#ifndef TRAINC_COMPILER_GRAPH_RECOMPUTE_H_
#define TRAINC_COMPILER_GRAPH_RECOMPUTE_H_

#include <string>
#include <vector>

#include "compiler/graph/pass.h"

namespace trainc {

class Recompute : public GraphPass {
 public:
  explicit Recompute(std::vector<std::string> blocks) : blocks_(std::move(blocks)) {}
  absl::string_view name() const override { return "recompute"; }
  absl::StatusOr<bool> Run(Graph* graph) override;

 private:
  std::vector<std::string> blocks_;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_RECOMPUTE_H_
