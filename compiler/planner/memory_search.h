// memory = "80GiB": fitting a training run to each device's memory.
//
// The planner builds a plan for every combination of ZeRO stage (0, 1, 2,
// and 2 scattering every micro-step when there are several outside
// deterministic mode; 0 alone on one rank), recomputation of the repeat blocks (off, on; off
// alone without any) and, with micro_batch = auto, every micro-batch that
// divides the rank's share of the global batch (accumulate making up the
// rest), replays each on the machine profile (compiler/cost/simulator.h),
// and keeps the plan of least predicted step time whose device memory (the
// arena plus the bf16 staging a device keeps beside it) fits the budget;
// on a tie, the smaller. The table of what it tried is the plan's
// `memory_choice`. When nothing fits it refuses with the smallest plan's
// arithmetic. Not counted: a library's own allocations (cuBLAS, NCCL,
// the CUDA context), which the budget should leave room for.
#ifndef TRAINC_COMPILER_PLANNER_MEMORY_SEARCH_H_
#define TRAINC_COMPILER_PLANNER_MEMORY_SEARCH_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "compiler/spec/train_spec.h"

namespace trainc {

// How the search plans a candidate (the planner's own pipeline, without
// the report-only extras BuildPlan adds to the plan it returns).
using CandidatePlanner = std::function<absl::StatusOr<Plan>(const TrainSpec& spec)>;

struct MemoryFit {
  TrainSpec spec;     // the kept candidate, its budget cleared: BuildPlan it
  std::string table;  // what was tried: the plan's memory_choice
};

// spec.train.memory_bytes > 0: the fastest candidate that fits, or
// ResourceExhausted with the smallest candidate's arithmetic.
absl::StatusOr<MemoryFit> FitToMemory(const TrainSpec& spec, const PlanOptions& options,
                                      const CandidatePlanner& plan);

// The bytes a device needs for `plan`: its arena and its bf16 staging.
int64_t DeviceBytes(const Plan& plan);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_MEMORY_SEARCH_H_
