// Predicted scaling of a plan: the file compiled once per world size (as
// `train --gpus N` would compile it) and one step of each plan replayed on a
// machine profile (compiler/cost/simulator.h). The simulate command line
// prints it as tables; `viz FILE.train --scaling` plots it.
//
//   ASSIGN_OR_RETURN(cost::MachineProfile profile, LoadProfileFlag("a100_nvlink"));
//   ASSIGN_OR_RETURN(std::vector<ScalingCurve> curves,
//                    SimulateScaling("dsl_examples/gpt2_small.train", profile, {}));
#ifndef TRAINC_TOOLS_SIMULATE_SCALING_H_
#define TRAINC_TOOLS_SIMULATE_SCALING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/cost/machine_profile.h"
#include "compiler/cost/simulator.h"
#include "compiler/frontend/overrides.h"
#include "compiler/plan/plan.h"

namespace trainc::simulate {

// The profile a --machine flag names (a bundled name or a file); errors
// start with "--machine NAME: " and a file's errors name the file and line.
absl::StatusOr<cost::MachineProfile> LoadProfileFlag(const std::string& machine);

// A .train file through the front end and the planner, as train does
// (bucket_mb = auto costed on `profile` with `overlap`); any other file is
// read as a compiled plan, which takes no overrides.
absl::StatusOr<Plan> LoadPlanForProfile(const std::string& file, const Overrides& overrides,
                                        const cost::MachineProfile& profile, bool overlap);

// 1, 2, 4, ..., 1024.
std::vector<int64_t> DefaultWorldSizes();

// A --gpus value, "8" or "1,8,64"; errors start with "--gpus: ".
absl::StatusOr<std::vector<int64_t>> ParseWorldSizes(const std::string& value);

struct ScalingOptions {
  std::vector<int64_t> gpus;           // empty: DefaultWorldSizes()
  std::vector<std::string> bucket_mb;  // one curve each, as typed; empty: the file's
  bool overlap = true;                 // as train --no-overlap when false
  Overrides overrides;                 // --FIELD VALUE, as train takes them
};

struct ScalingPoint {
  int64_t gpus = 1;
  int64_t global_batch = 0;
  std::string bucket_choice;    // bucket_mb = auto's reason at this size
  cost::StepPrediction prediction;  // without its spans
  double efficiency = 0;        // samples/s per rank against one rank (1 = 100%)
};

struct ScalingCurve {
  std::string bucket_mb;    // as asked; empty: the file's
  std::string label;        // "bucket_mb 25", "bucket_mb auto"
  std::string model;
  std::string description;  // buckets, gradient size, ZeRO, gradient type
  std::vector<ScalingPoint> points;  // in the order of ScalingOptions::gpus
};

// One curve per bucket_mb. A plan file (not .train) runs its own plan on
// every world size: the same per-rank work.
absl::StatusOr<std::vector<ScalingCurve>> SimulateScaling(const std::string& input,
                                                          const cost::MachineProfile& profile,
                                                          const ScalingOptions& options);

}  // namespace trainc::simulate

#endif  // TRAINC_TOOLS_SIMULATE_SCALING_H_
