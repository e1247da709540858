// The checkpoints a training run writes: every checkpoints.every steps,
// when a stop signal ends it, and --save at the end. A private part of
// runtime/train (trainer.cc's). Rank 0 writes; under ZeRO every rank takes
// part in the gather of the shards (`sharding`).
#ifndef TRAINC_RUNTIME_TRAIN_RUN_CHECKPOINTS_H_
#define TRAINC_RUNTIME_TRAIN_RUN_CHECKPOINTS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/device/device.h"
#include "runtime/train/trainer.h"

namespace trainc {

// The training state after `step`: what a checkpoint written then holds.
TrainingState StateAfter(int64_t step, int64_t steps_per_epoch);

// The checkpoint every checkpoints.every steps (and at the last), written
// by rank 0 (under ZeRO-1 every rank takes part in the gather), then the
// folder pruned; rank 0 logs it, its line starting with `line_start`. A
// full disk stops the run naming the newest whole one.
absl::Status SavePeriodicCheckpoint(const Plan& plan, Device& device, const TrainingState& now,
                                    const Sharding* sharding, int rank, std::ostream& log,
                                    const char* line_start);

// A run stopped by a signal: its checkpoint (unless the periodic one of
// this step is already written), the folder pruned; returns its path. The
// parameters must be whole. Every rank calls it.
absl::StatusOr<std::string> SaveStopCheckpoint(const Plan& plan, const TrainOptions& options,
                                               Device& device, const TrainingState& now,
                                               const Sharding* sharding, int rank);

// --save: the final weights and state (rank 0 writes and logs it; every
// rank under ZeRO). The parameters must be whole.
absl::Status SaveFinalCheckpoint(const Plan& plan, const std::string& path, Device& device,
                                 const TrainingState& out, const Sharding* sharding, int rank,
                                 std::ostream& log);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RUN_CHECKPOINTS_H_
