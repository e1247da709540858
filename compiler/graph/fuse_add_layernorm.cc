#include "compiler/graph/fuse_add_layernorm.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/graph/rewrite.h"

namespace trainc {
namespace {

// The layernorm that reads `add`'s sum as its x, of the add's role, when
// it is the only one; -1 otherwise.
int SoleLayerNorm(const std::vector<Node>& nodes, const Node& add) {
  const int sum = add.outputs[0];
  int norm = -1;
  for (int id : ReadersOf(nodes, sum)) {
    const Node& reader = nodes[id];
    if (reader.op != "layernorm" || reader.role != add.role) continue;
    if (norm >= 0 || reader.inputs.size() != 3 || reader.outputs.size() != 3 ||
        reader.inputs[0] != sum || reader.inputs[1] == sum || reader.inputs[2] == sum) {
      return -1;  // two layernorms of the sum, or the sum as a parameter
    }
    norm = id;
  }
  return norm;
}

// "h.0.r" of "h.0.r = add (recompute)"; the value's name without a label.
std::string Target(const Graph& graph, const Node& node) {
  const size_t eq = node.label.find(" = ");
  return eq == std::string::npos ? graph.value(node.outputs[0]).name
                                 : node.label.substr(0, eq);
}

}  // namespace

absl::StatusOr<bool> FuseAddLayerNorm::Run(Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  // The node writing each value (-1: a parameter or input).
  std::vector<int> producer(graph->values().size(), -1);
  for (const Node& node : nodes) {
    for (int out : node.outputs) producer[out] = node.id;
  }
  std::vector<bool> drop(nodes.size(), false);
  for (Node& add : nodes) {
    if (add.op != "add" || add.inputs.size() != 2 || add.outputs.size() != 1) continue;
    const int id = SoleLayerNorm(nodes, add);
    if (id < 0) continue;
    const Node& norm = nodes[id];
    // The fused node runs at the add's place: weight and bias must exist.
    if (producer[norm.inputs[1]] > add.id || producer[norm.inputs[2]] > add.id) continue;
    const std::string recompute =
        absl::EndsWith(add.label, " (recompute)") ? " (recompute)" : "";
    add.label = absl::StrCat(Target(*graph, add), ", ", Target(*graph, norm),
                             " = add_layernorm", recompute);
    add.op = "add_layernorm";
    add.inputs.insert(add.inputs.end(), norm.inputs.begin() + 1, norm.inputs.end());
    add.outputs.insert(add.outputs.end(), norm.outputs.begin(), norm.outputs.end());
    add.attrs = norm.attrs;  // eps
    drop[id] = true;
  }
  return DropNodes(drop, graph);
}

}  // namespace trainc
