// MixedPrecision: the graph pass behind `precision = bf16`.
//
// Runs after autodiff, on the whole differentiated micro-step. It gives
// every forward value the dtype its op's policy says (ops::PrecisionOf:
// matrix products write bf16, the elementwise ops that follow them stay
// bf16, normalization / softmax / losses / embeddings write f32), gives
// every gradient its value's dtype, and makes a matrix product's f32
// operands bf16 with `cast` nodes: one per value, placed before its first
// reader, shared by the forward product and its backward (so the tensor
// saved for the backward pass is the bf16 copy). Parameters, their
// gradients (accumulated over micro-steps in f32) and the loss stay f32;
// a parameter's bf16 copy is made each micro-step from the f32 master.
//
//   pipeline.Add(std::make_unique<Autodiff>(scale));
//   pipeline.Add(std::make_unique<MixedPrecision>());
#ifndef TRAINC_COMPILER_GRAPH_PRECISION_H_
#define TRAINC_COMPILER_GRAPH_PRECISION_H_

#include "compiler/graph/pass.h"

namespace trainc {

class MixedPrecision : public GraphPass {
 public:
  absl::string_view name() const override { return "mixed_precision"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_PRECISION_H_
