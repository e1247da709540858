#include "compiler/graph/fuse_linear_gelu.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// The forward gelu_tanh of `pre` when it and the gelu's gradients are
// pre's only readers; -1 otherwise.
int SoleGelu(const Graph& graph, int pre) {
  int gelu = -1;
  for (int id : graph.readers(pre)) {
    const Node& reader = graph.node(id);
    if (reader.kernel == KernelOp::kGeluTanh && reader.role == NodeRole::kForward && gelu < 0 &&
        reader.inputs.size() == 1 && reader.outputs.size() == 1) {
      gelu = id;
    } else if (reader.kernel != KernelOp::kGeluTanhGrad || reader.inputs.size() != 2 ||
               reader.inputs[0] == pre) {
      return -1;  // another reader (or pre as a gradient) keeps the two apart
    }
  }
  return gelu;
}

}  // namespace

absl::StatusOr<bool> FuseLinearGelu::Run(Graph* graph) {
  return FuseEach(graph, KernelOp::kLinear, [&](int id) {
    const Node& linear = graph->node(id);
    if (linear.role != NodeRole::kForward || linear.outputs.size() != 1) return -1;
    const int pre = linear.outputs[0];
    const int gelu = SoleGelu(*graph, pre);
    if (gelu < 0) return -1;
    const int y = graph->node(gelu).outputs[0];
    Node fused = linear;
    fused.op = "linear_gelu";
    fused.outputs = {pre, y};
    fused.label = absl::StrCat(graph->value(pre).name, ", ", graph->value(y).name,
                               " = linear_gelu");
    graph->ReplaceNode(id, std::move(fused));
    return gelu;
  });
}

}  // namespace trainc
