// The weights a run starts from: a private part of runtime/train
// (trainer.cc's). --resume (weights, optimizer state, step and data
// position; a file, or the newest checkpoint of a folder that loads),
// --init-from (weights only) or the plan's seeded initialisation,
// identical on every rank and platform.
#ifndef TRAINC_RUNTIME_TRAIN_STARTING_POINT_H_
#define TRAINC_RUNTIME_TRAIN_STARTING_POINT_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/device/device.h"
#include "runtime/train/trainer.h"

namespace trainc {

// The state the run starts from (step 0 unless resumed) and the checkpoint
// it was resumed from.
struct StartingPoint {
  TrainingState state;
  std::string resumed_from;
};

// Loads or initialises the parameters on `device` as `options` asks
// (warnings about skipped checkpoints go to `log`) and synchronises it.
absl::StatusOr<StartingPoint> LoadStartingPoint(const Plan& plan, const TrainOptions& options,
                                                Device& device, int rank, std::ostream& log);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_STARTING_POINT_H_
