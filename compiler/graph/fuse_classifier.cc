#include "compiler/graph/fuse_classifier.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/graph/rewrite.h"

namespace trainc {

absl::StatusOr<bool> FuseClassifier::Run(Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  std::vector<bool> drop(nodes.size(), false);
  for (Node& loss : nodes) {
    if (loss.op != "cross_entropy" || loss.outputs.size() != 2) continue;
    const std::vector<int> readers = ReadersOf(nodes, loss.outputs[1]);
    if (readers.size() != 1) continue;
    const int reader = readers[0];
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
  }
  return DropNodes(drop, graph);
}

}  // namespace trainc
