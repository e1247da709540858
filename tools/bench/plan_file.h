// The benchmarks' plans: a .train file compiled by the real front end with
// overrides, then planned for a backend.
#ifndef TRAINC_TOOLS_BENCH_PLAN_FILE_H_
#define TRAINC_TOOLS_BENCH_PLAN_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiler/frontend/overrides.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"

namespace trainc::bench {

// `path` (relative to the workspace root: run through bazel run) with
// `overrides`, planned with `options`; a failed compilation's diagnostics
// are the error's message.
absl::StatusOr<Plan> PlanFile(const std::string& path, const Overrides& overrides,
                              const PlanOptions& options);

}  // namespace trainc::bench

#endif  // TRAINC_TOOLS_BENCH_PLAN_FILE_H_
