// DeadCodeElimination: removes forward nodes the loss does not depend on.
//
// A statement whose value never reaches `loss` computes nothing the step
// needs; its parameters (if any) keep a zero gradient. Values are kept (ids
// stay stable); only nodes go.
#ifndef TRAINC_COMPILER_GRAPH_DCE_H_
#define TRAINC_COMPILER_GRAPH_DCE_H_

#include "compiler/graph/pass.h"

namespace trainc {

class DeadCodeElimination : public GraphPass {
 public:
  absl::string_view name() const override { return "dce"; }
  absl::StatusOr<bool> Run(Graph* graph) override;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_DCE_H_
