// FuseClassifier: cross_entropy and its gradient as one instruction.
//
// After autodiff a language model's loss is two instructions over the
// [tokens, vocab] logits: cross_entropy writes the loss and the softmax
// probabilities (saved for the backward pass), cross_entropy_grad reads
// them back and writes dlogits. When the probabilities have no other
// reader, this pass replaces the pair by cross_entropy_fused(logits,
// label) -> loss_sum, dlogits at the forward's place (llm.c's fused
// classifier): no probabilities buffer, one pass over the logits instead
// of two, the same arithmetic (compiler/ops/op_table.cc, the kernels'
// comments). The loss and dlogits are both ready after the forward pass,
// so evaluation, which runs the forward, computes dlogits too.
#ifndef TRAINC_COMPILER_GRAPH_FUSE_CLASSIFIER_H_
#define TRAINC_COMPILER_GRAPH_FUSE_CLASSIFIER_H_

#include "compiler/graph/pass.h"

namespace trainc {

class FuseClassifier : public GraphPass {
 public:
  absl::string_view name() const override { return "fuse_classifier"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_FUSE_CLASSIFIER_H_
