#include "compiler/graph/fuse_add_layernorm.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// The layernorm that reads `add`'s sum as its x, of the add's role, when
// it is the only one; -1 otherwise.
int SoleLayerNorm(const Graph& graph, const Node& add) {
  const int sum = add.outputs[0];
  int norm = -1;
  for (int id : graph.readers(sum)) {
    const Node& reader = graph.node(id);
    if (reader.kernel != KernelOp::kLayerNorm || reader.role != add.role) continue;
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
  // The last node writing each value before this pass (-1: a parameter or
  // input).
  std::vector<int> producer(graph->values().size(), -1);
  for (size_t v = 0; v < producer.size(); ++v) {
    if (!graph->writers(v).empty()) producer[v] = graph->writers(v).back();
  }
  return FuseEach(graph, KernelOp::kAdd, [&](int id) {
    const Node& add = graph->node(id);
    if (add.inputs.size() != 2 || add.outputs.size() != 1) return -1;
    const int norm_id = SoleLayerNorm(*graph, add);
    if (norm_id < 0) return -1;
    const Node& norm = graph->node(norm_id);
    // The fused node runs at the add's place: weight and bias must exist.
    if (producer[norm.inputs[1]] > id || producer[norm.inputs[2]] > id) return -1;
    const std::string recompute =
        absl::EndsWith(add.label, " (recompute)") ? " (recompute)" : "";
    Node fused = add;
    fused.label = absl::StrCat(Target(*graph, add), ", ", Target(*graph, norm),
                               " = add_layernorm", recompute);
    fused.op = "add_layernorm";
    fused.inputs.insert(fused.inputs.end(), norm.inputs.begin() + 1, norm.inputs.end());
    fused.outputs.insert(fused.outputs.end(), norm.outputs.begin(), norm.outputs.end());
    fused.attrs = norm.attrs;  // eps
    graph->ReplaceNode(id, std::move(fused));
    return norm_id;
  });
}

}  // namespace trainc
