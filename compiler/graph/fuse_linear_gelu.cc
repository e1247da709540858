#include "compiler/graph/fuse_linear_gelu.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/graph/rewrite.h"

namespace trainc {
namespace {

// The forward gelu_tanh of `pre` when it and the gelu's gradients are
// pre's only readers; -1 otherwise.
int SoleGelu(const std::vector<Node>& nodes, int pre) {
  int gelu = -1;
  for (int id : ReadersOf(nodes, pre)) {
    const Node& reader = nodes[id];
    if (reader.op == "gelu_tanh" && reader.role == NodeRole::kForward && gelu < 0 &&
        reader.inputs.size() == 1 && reader.outputs.size() == 1) {
      gelu = id;
    } else if (reader.op != "gelu_tanh_grad" || reader.inputs.size() != 2 ||
               reader.inputs[0] == pre) {
      return -1;  // another reader (or pre as a gradient) keeps the two apart
    }
  }
  return gelu;
}

}  // namespace

absl::StatusOr<bool> FuseLinearGelu::Run(Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  std::vector<bool> drop(nodes.size(), false);
  for (Node& linear : nodes) {
    if (linear.op != "linear" || linear.role != NodeRole::kForward ||
        linear.outputs.size() != 1) {
      continue;
    }
    const int pre = linear.outputs[0];
    const int gelu = SoleGelu(nodes, pre);
    if (gelu < 0) continue;
    const int y = nodes[gelu].outputs[0];
    linear.op = "linear_gelu";
    linear.outputs = {pre, y};
    linear.label = absl::StrCat(graph->value(pre).name, ", ", graph->value(y).name,
                                " = linear_gelu");
    drop[gelu] = true;
  }
  return DropNodes(drop, graph);
}

}  // namespace trainc
