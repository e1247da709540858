// The picture of a Plan, before it becomes DOT: which nodes to draw, how
// they are grouped, and which edges join them.
//
// What is drawn (see compiler/plan/plan.h and ARCHITECTURE.md, "The plan"):
//   - one micro-step's load/forward/backward ops, in a cluster labelled
//     "micro-step x N" (the other N-1 micro-steps are the same program and
//     are folded onto it; the last micro-step is the one drawn because it
//     is the one the all-reduces overlap with);
//   - parameters (or, for collapsed layers, one node per group of them);
//   - gradient buckets, each its own colour, and their all-reduces on the
//     comm stream; the optimizer ops per bucket;
//   - data edges (a buffer's last writer -> its reader; a gradient's writer
//     -> its bucket) and dashed event edges (recorder -> waiter).
// Runs of identical layers (same ops on the same shapes) collapse into one
// node "h2..h99 (x98)" when `collapse_repeats` is set.
#ifndef TRAINC_TOOLS_VIZ_VIZ_GRAPH_H_
#define TRAINC_TOOLS_VIZ_VIZ_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc::viz {

enum class NodeKind {
  kOp,              // one instruction
  kRepeatedBlock,   // a run of identical layers
  kParameter,
  kParameterGroup,  // the parameters of a repeated block
  kBucket,
};

enum class NodeGroup {
  kMicroStep,  // inside the "micro-step x N" cluster
  kComm,       // the comm stream cluster
  kStep,       // once per step, on the compute stream (optimizer, ...)
  kParameters,
};

struct VizNode {
  std::string id;     // DOT identifier: i12, blk0, p3, pg0, b1
  NodeKind kind = NodeKind::kOp;
  NodeGroup group = NodeGroup::kStep;
  std::string label;  // may contain '\n'
  std::string phase;  // PhaseName() of the instruction(s); "" otherwise
  bool comm = false;  // on the comm stream
  int bucket = -1;    // bucket colour to use; -1: none
  int repeats = 1;    // kRepeatedBlock: how many layers it stands for
};

enum class EdgeKind { kData, kEvent };

struct VizEdge {
  std::string from, to;
  EdgeKind kind = EdgeKind::kData;
};

struct BucketSummary {
  int id = 0;
  int64_t bytes = 0;
  std::vector<std::string> parameters;
};

struct VizGraph {
  std::string model;
  int64_t accumulate = 1;
  int64_t world_size = 1;
  int instructions = 0;  // in the plan
  int collapsed_blocks = 0;
  std::vector<VizNode> nodes;  // in drawing order
  std::vector<VizEdge> edges;  // deduplicated, in a stable order
  std::vector<BucketSummary> buckets;
};

struct VizOptions {
  bool collapse_repeats = true;
  int min_repeats = 3;  // fewer identical layers than this stay expanded
};

// Fails (InvalidArgument) only on a plan whose ids are out of range.
absl::StatusOr<VizGraph> BuildVizGraph(const Plan& plan,
                                       const VizOptions& options = {});

// "5.0 KiB", "24.9 MiB": sizes for labels and tables.
std::string HumanBytes(int64_t bytes);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_VIZ_GRAPH_H_
