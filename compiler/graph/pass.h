// Graph passes, in the style of XLA's HLO passes.
//
// A pass rewrites a graph in place and says whether it changed anything; a
// pipeline runs passes in order and verifies the graph after each, so a
// broken invariant is reported by the pass that broke it.
//
//   PassPipeline pipeline("train");
//   pipeline.Add(std::make_unique<DeadCodeElimination>());
//   pipeline.Add(std::make_unique<Autodiff>(/*loss_scale=*/1.0 / 256));
//   RETURN_IF_ERROR(pipeline.Run(&graph));
#ifndef TRAINC_COMPILER_GRAPH_PASS_H_
#define TRAINC_COMPILER_GRAPH_PASS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/graph/graph.h"

namespace trainc {

class GraphPass {
 public:
  virtual ~GraphPass() = default;
  virtual absl::string_view name() const = 0;
  // Returns whether the graph changed.
  virtual absl::StatusOr<bool> Run(Graph* graph) = 0;
};

class PassPipeline {
 public:
  explicit PassPipeline(std::string name) : name_(std::move(name)) {}

  void Add(std::unique_ptr<GraphPass> pass) { passes_.push_back(std::move(pass)); }

  // Verifies the input, then runs every pass and verifies after each.
  // Returns whether any pass changed the graph.
  absl::StatusOr<bool> Run(Graph* graph);

 private:
  std::string name_;
  std::vector<std::unique_ptr<GraphPass>> passes_;
};

// The loop of a fusion pass: for each node whose kernel is `root`, in
// program order, `fuse(id)` may replace it (Graph::ReplaceNode) by a fused
// node and returns the id of the node that node absorbed, or -1; the
// absorbed nodes are removed at the end, in one O(graph) step. Returns
// whether any was.
bool FuseEach(Graph* graph, KernelOp root, absl::FunctionRef<int(int id)> fuse);

}  // namespace trainc

#endif  // TRAINC_COMPILER_GRAPH_PASS_H_
