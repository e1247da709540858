// PlanBuilder: a differentiated graph of one micro-step, one bucketing
// and the ZeRO choices -> the Plan of one optimizer step (planner.h says
// what it decides). Internal to compiler/planner: BuildPlan and its
// searches (bucket_mb, zero_accumulate, zero_prefetch, memory = ...)
// build their candidates with it.
#ifndef TRAINC_COMPILER_PLANNER_PLAN_BUILDER_H_
#define TRAINC_COMPILER_PLANNER_PLAN_BUILDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/graph/graph.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/bucket_search.h"
#include "compiler/planner/planner.h"
#include "compiler/spec/model_signature.h"
#include "compiler/spec/train_spec.h"

namespace trainc {

// What the ZeRO searches decided: ZeRO-2's accumulation (local or shard)
// and ZeRO-3's prefetch depth in buckets.
struct ZeroChoices {
  ZeroAccumulate accumulate = ZeroAccumulate::kLocal;
  int64_t prefetch = 0;
};

class PlanBuilder {
 public:
  // All four must outlive the builder.
  PlanBuilder(const TrainSpec& spec, const Graph& graph, const PlanOptions& options,
              const BucketSizes& sizes, const ZeroChoices& zero = {});
  ~PlanBuilder();

  // The first half of Build: the config and which parameters share a
  // bucket (each bucket's parameter value ids, in bucket order).
  std::vector<std::vector<int>> AssignBuckets();

  // The rest, after AssignBuckets. `for_costing`: only what the cost model
  // reads (instructions, buffers and their shapes; no workspace sizes, no
  // arena, no validation), for bucket_mb = auto's candidates. Once.
  absl::StatusOr<Plan> Build(bool for_costing = false);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_PLAN_BUILDER_H_
