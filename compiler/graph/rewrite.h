// Small helpers the rewriting passes share (dead code, fusion:
// fuse_classifier.h, fuse_linear_gelu.h, fuse_linear_gelu_grad.h,
// fuse_add_layernorm.h).
#ifndef TRAINC_COMPILER_GRAPH_REWRITE_H_
#define TRAINC_COMPILER_GRAPH_REWRITE_H_

#include <vector>

#include "compiler/graph/graph.h"

namespace trainc {

// The ids of the nodes reading value `id`, each once, in program order.
std::vector<int> ReadersOf(const std::vector<Node>& nodes, int id);

// Removes the nodes with drop[id] set and renumbers the rest in order;
// returns whether it removed any (a fusion pass's "changed").
bool DropNodes(const std::vector<bool>& drop, Graph* graph);

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_REWRITE_H_
