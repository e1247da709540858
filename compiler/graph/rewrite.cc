#include "compiler/graph/rewrite.h"

#include <algorithm>
#include <utility>

namespace trainc {

std::vector<int> ReadersOf(const std::vector<Node>& nodes, int id) {
  std::vector<int> readers;
  for (const Node& node : nodes) {
    if (std::find(node.inputs.begin(), node.inputs.end(), id) != node.inputs.end()) {
      readers.push_back(node.id);
    }
  }
  return readers;
}

bool DropNodes(const std::vector<bool>& drop, Graph* graph) {
  std::vector<Node>& nodes = graph->mutable_nodes();
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!drop[i]) kept.push_back(std::move(nodes[i]));
  }
  const bool changed = kept.size() != nodes.size();
  for (size_t i = 0; i < kept.size(); ++i) kept[i].id = static_cast<int>(i);
  nodes = std::move(kept);
  return changed;
}

}  // namespace trainc
