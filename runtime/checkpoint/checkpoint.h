// Training checkpoints, as two safetensors files side by side (the way
// Hugging Face's Trainer keeps model.safetensors beside optimizer.pt):
//
//   X.safetensors              the model's parameters and nothing else,
//                              named as PyTorch names them ("h1.weight"),
//                              so load_state_dict(strict=True) takes them;
//                              metadata format = "pt", trainc =
//                              "checkpoint-2", where training stands
//   X.train_state.safetensors  the optimizer state ("optimizer.h1.weight.
//                              exp_avg", ".exp_avg_sq"; sgd:
//                              ".momentum_buffer") and where training
//                              stands: step, epoch, step_in_epoch, seed,
//                              world_size, micro_batch, accumulate,
//                              global_batch, optimizer
//
// Both carry one checkpoint_id, so a pair written by two runs is refused.
// The training state is written first, each file atomically, so a weights
// file under its final name always has its state. Old single-file
// checkpoints (format "trainc-checkpoint-1", the optimizer state inside)
// still load.
//
// The sampler is a pure function of (seed, epoch), so (epoch,
// step_in_epoch) is the whole data position: resuming continues bit for bit.
// Resuming on another split of the same global batch (other gpus x
// accumulate) is allowed; another global batch or seed is not, since the
// data order would change.
#ifndef TRAINC_RUNTIME_CHECKPOINT_CHECKPOINT_H_
#define TRAINC_RUNTIME_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"

namespace trainc {

struct TrainingState {
  int64_t step = 0;           // optimizer steps completed
  int64_t epoch = 0;          // the epoch of the next step
  int64_t step_in_epoch = 0;  // the next step's index within that epoch
};

// ZeRO (plan.zero): each rank holds one shard of every optimizer state
// span (and under ZeRO-3 of every bucket's parameters). Checkpoints still
// hold whole tensors: SaveCheckpoint gathers them, LoadCheckpoint keeps
// this rank's shard, so a run resumes on another rank count and stage.
struct Sharding {
  int rank = 0;
  // Collective, host memory: whole[r * count + i] = rank r's mine[i].
  std::function<absl::Status(const float* mine, float* whole, int64_t count)>
      all_gather;
};

// Synchronizes `device`, then writes `path` and TrainingStatePath(path),
// each atomically (see safetensors.h). Call
// on one rank: every rank holds the same weights after a step. A ZeRO
// plan needs `sharding`, and then every rank calls it (the shards are
// gathered) and rank 0 writes.
absl::Status SaveCheckpoint(const std::string& path, const Plan& plan,
                            Device& device, const TrainingState& state,
                            const Sharding* sharding = nullptr);

// The training state file that goes with a weights file:
// "a/step-5.safetensors" -> "a/step-5.train_state.safetensors".
std::string TrainingStatePath(const std::string& weights_path);

// Uploads the checkpoint's parameters into the plan's arena. Every rank
// loads the same file (or rank 0 loads and broadcasts the parameters). Unless
// `weights_only` (--init-from), also the optimizer state from the training
// state file beside `path` (or from `path` itself, an old single-file
// checkpoint), and sets *state.
// Every parameter (and state tensor) must be present with the plan's shape
// and dtype; a tensor the plan does not have is an error too (the wrong
// model), except optimizer state when `weights_only`. A checkpoint that
// records its model (metadata model_signature, compiler/spec/
// model_signature.h; saved since plans carry one) must have been trained
// as the plan's model: weights of other heads over key/value heads, or
// another rope_theta or eps, have the same shapes but are another model,
// and the error names both files and the calls that differ. Checkpoints
// without it load as before.
// Under ZeRO `rank` picks the shards this rank keeps.
absl::Status LoadCheckpoint(const std::string& path, const Plan& plan,
                            Device& device, TrainingState* state,
                            bool weights_only, int rank = 0);

// Whether LoadCheckpoint's `status` says the file is a whole checkpoint of
// another model (its signature, or its parameters' names or shapes, differ
// from the plan's), rather than one that cannot be used (no training
// state beside it, another seed, non-finite values, unreadable).
// --resume DIR stops there instead of trying an older checkpoint.
bool IsCheckpointOfAnotherModel(const absl::Status& status);

// Parameter `index` (of plan.parameter_buffers) set to `values` (its
// whole tensor): into its buffer, or under ZeRO-3 this rank's part of it
// into its bucket's parameter shard.
absl::Status UploadParameter(const Plan& plan, Device& device, int index,
                             absl::Span<const float> values, int rank);

// Every parameter's whole value, in plan.parameter_buffers order. Under
// ZeRO-3 the shards are gathered through `sharding` (a collective: every
// rank calls it).
absl::StatusOr<std::vector<std::vector<float>>> DownloadParameters(const Plan& plan,
                                                                   Device& device,
                                                                   const Sharding* sharding);

// A folder of checkpoints during a run (Plan::checkpoints):
// <dir>/step-<8-digit step>.safetensors. Each is written atomically
// (safetensors.h: a temporary file, fsync, rename), so a name of this form
// is always a whole file, also when the run is killed or the disk fills
// while the next one is written.
std::string CheckpointPath(const std::string& dir, int64_t step);

// Makes `dir` (and its parents) when missing and checks that a file can be
// created in it: before the first step, not when the first checkpoint is due.
absl::Status PrepareCheckpointFolder(const std::string& dir);

// The checkpoints in `dir`, newest (highest step) first; empty when there
// are none. Fails when `dir` cannot be read.
absl::StatusOr<std::vector<std::string>> CheckpointsNewestFirst(const std::string& dir);

// Deletes all but the newest `keep` checkpoints of `dir` (both files), and
// training states and temporary files left by writes that never finished
// (a killed run).
absl::Status PruneCheckpoints(const std::string& dir, int64_t keep);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CHECKPOINT_CHECKPOINT_H_
