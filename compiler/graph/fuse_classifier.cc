#include "compiler/graph/fuse_classifier.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace trainc {
namespace {

// The index of the one node reading value `id`, or -1 (none, or several).
int SoleReader(const std::vector<Node>& nodes, int id) {
  int reader = -1;
  for (const Node& node : nodes) {
    for (int in : node.inputs) {
      if (in != id) continue;
      if (reader >= 0 && reader != node.id) return -1;
      reader = node.id;
    }
  }
  return reader;
}

}  // namespace

absl::StatusOr<bool> FuseClassifier::Run(Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  std::vector<bool> drop(nodes.size(), false);
  bool changed = false;
  for (Node& loss : nodes) {
    if (loss.op != "cross_entropy" || loss.outputs.size() != 2) continue;
    const int reader = SoleReader(nodes, loss.outputs[1]);
    if (reader < 0) continue;
    const Node& grad = nodes[reader];
    auto acc = grad.attrs.find("accumulate");
    if (grad.op != "cross_entropy_grad" || grad.inputs.size() != 2 ||
        grad.inputs[0] != loss.outputs[1] || grad.inputs[1] != loss.inputs[1] ||
        !grad.attrs.count("scale") || (acc != grad.attrs.end() && acc->second != 0)) {
      continue;
    }
    const int dlogits = grad.outputs[0];
    loss.op = "cross_entropy_fused";
    loss.outputs[1] = dlogits;
    loss.attrs = {{"scale", grad.attrs.at("scale")}, {"accumulate", 0}};
    loss.label = absl::StrCat(graph->value(loss.outputs[0]).name, ", ",
                              graph->value(dlogits).name, " = cross_entropy_fused");
    drop[reader] = true;
    changed = true;
  }
  if (!changed) return false;
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(nodes[i]));
  }
  for (size_t i = 0; i < kept.size(); ++i) kept[i].id = static_cast<int>(i);
  nodes = std::move(kept);
  return true;
}

}  // namespace trainc
