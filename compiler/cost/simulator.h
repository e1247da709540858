// Replays one optimizer step of a Plan on a machine profile.
//
//   ASSIGN_OR_RETURN(StepPrediction p, SimulateStep(plan, profile, {.world_size = 64}));
//   std::cout << p.step_us << " us per step, " << p.exposed_us << " us exposed\n";
//
// The replay follows runtime/exec/executor.cc instruction by instruction:
// the host issues the plan in program order (with overlap off, every
// all-reduce issued before the last backward instruction moves after it,
// behind a compute -> comm fence); an instruction starts once it is issued,
// its stream is free and every event it waits for is recorded, and records
// its events when it ends. On a host-synchronous device (the CPU: the host
// thread runs each compute instruction) the host issues nothing while a
// compute instruction runs, and a compute-stream wait blocks the host; on
// an asynchronous device (CUDA) the host runs ahead. Durations come from
// cost_model.h.
//
// Every rank runs the same plan, so two replays stand for all of them: a
// typical rank at the modelled speed and, when the profile has a
// compute.rank_imbalance, the slowest rank, whose compute takes
// (1 + imbalance) times as long. A collective starts on every rank when
// the last one reaches it (a rank that arrives early waits inside it, as a
// measured trace shows); the step ends when every rank has drained. While
// a collective moves data (from the last arrival to its end), the rank's
// compute runs 1 + compute.comm_contention times slower.
//
// A collective is any instruction of op category kCollective
// (IsCollective, cost_model.h): a bucket's all_reduce or reduce_scatter,
// ZeRO-1's all_gather and its all_reduce of grad_sq. With overlap off the
// executor holds back only the bucket collectives issued before the last
// backward instruction.
//
// The reported numbers are the typical rank's, and mean what tools/viz's
// overlap table means for a measured trace (tools/viz/timeline.h): the
// same intervals (intervals.h) of the same events.
#ifndef TRAINC_COMPILER_COST_SIMULATOR_H_
#define TRAINC_COMPILER_COST_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "compiler/cost/machine_profile.h"

namespace trainc::cost {

struct SimulationOptions {
  int64_t world_size = 0;  // 0: the plan's world_size
  bool overlap = true;     // as ExecutorOptions::overlap (train --no-overlap)
};

// One instruction as replayed.
struct SimulatedSpan {
  int instr = -1;
  Stream stream = Stream::kCompute;
  double begin_us = 0;
  double end_us = 0;
};

struct StepPrediction {
  int64_t world_size = 1;
  // One step's period, as train's step_ms: from the first instruction's
  // start until both streams are drained, plus the profile's host overhead
  // between steps.
  double step_us = 0;
  double compute_us = 0;     // busy time of the compute stream
  double backward_us = 0;    // busy time of backward instructions
  double all_reduce_us = 0;  // busy time of the comm stream's collectives
  double hidden_us = 0;      // collective time while compute was busy
  double exposed_us = 0;     // all_reduce_us - hidden_us
  std::vector<SimulatedSpan> spans;  // the typical rank's, in issue order;
                                     // no span for a no-op
};

// Checks the plan's instructions, streams and events, then replays a step.
absl::StatusOr<StepPrediction> SimulateStep(const Plan& plan,
                                            const MachineProfile& profile,
                                            const SimulationOptions& options = {});

}  // namespace trainc::cost

#endif  // TRAINC_COMPILER_COST_SIMULATOR_H_
