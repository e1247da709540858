#include "compiler/graph/dce.h"

#include <vector>

namespace trainc {

absl::StatusOr<bool> DeadCodeElimination::Run(Graph* graph) {
  const std::vector<Node>& nodes = graph->nodes();
  std::vector<bool> needed(graph->values().size(), false);
  if (graph->loss() >= 0) needed[graph->loss()] = true;
  std::vector<bool> keep(nodes.size(), false);
  // One reverse sweep suffices: nodes are in topological order.
  for (int i = static_cast<int>(nodes.size()) - 1; i >= 0; --i) {
    for (int out : nodes[i].outputs) keep[i] = keep[i] || needed[out];
    if (nodes[i].role == NodeRole::kBackward) keep[i] = true;
    if (!keep[i]) continue;
    for (int in : nodes[i].inputs) needed[in] = true;
  }
  keep.flip();  // now the nodes to drop
  return graph->RemoveNodes(keep);
}

}  // namespace trainc
