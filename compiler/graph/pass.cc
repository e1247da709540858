#include "compiler/graph/pass.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {

bool FuseEach(Graph* graph, KernelOp root, absl::FunctionRef<int(int id)> fuse) {
  const int num_nodes = static_cast<int>(graph->nodes().size());
  std::vector<bool> drop(num_nodes, false);
  for (int id = 0; id < num_nodes; ++id) {
    if (graph->node(id).kernel != root) continue;
    const int absorbed = fuse(id);
    if (absorbed >= 0) drop[absorbed] = true;
  }
  return graph->RemoveNodes(drop);
}

absl::StatusOr<bool> PassPipeline::Run(Graph* graph) {
  absl::Status input = graph->Verify();
  if (!input.ok()) {
    return absl::Status(input.code(),
                        absl::StrCat(name_, ": invalid input graph: ", input.message()));
  }
  bool changed = false;
  for (const auto& pass : passes_) {
    ASSIGN_OR_RETURN(bool pass_changed, pass->Run(graph));
    changed |= pass_changed;
    absl::Status after = graph->Verify();
    if (!after.ok()) {
      return absl::Status(after.code(), absl::StrCat(name_, ": after pass ", pass->name(),
                                                     ": ", after.message()));
    }
  }
  return changed;
}

}  // namespace trainc
