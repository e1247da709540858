// Which examples each rank loads at each micro-step: a pure function of
// (seed, epoch, step), the same on every rank and every platform.
//
// Each epoch is one permutation of the training set: a Fisher-Yates shuffle
// driven by SplitMix64 seeded with `seed + epoch` (no std:: distribution,
// whose output is implementation-defined). Global batch s of the epoch is
// permutation[s * G, (s + 1) * G), G = world_size * accumulate * micro_batch;
// the last partial global batch is dropped (drop_last), so every optimizer
// step averages exactly G examples. Global batch s is cut into
// world_size * accumulate micro-batches of micro_batch consecutive entries;
// micro-batch m = rank * accumulate + k goes to rank `rank`, micro-step k.
//
// Hence the set of examples in a global batch does not depend on how it is
// split (1 x 4, 2 x 2 and 4 x 1 see the same 256 examples), and the global
// micro-batch order is the one the deterministic all-reduce sums in.
// Resuming needs only (epoch, step_in_epoch).
//
//   ASSIGN_OR_RETURN(BatchPlanner batches, BatchPlanner::ForPlan(plan, n));
//   for (int64_t s = 0; s < batches.steps_per_epoch(); ++s)
//     for (int k = 0; k < plan.accumulate; ++k)
//       Load(batches.MicroBatchIndices(epoch, s, rank, k));
#ifndef TRAINC_RUNTIME_DATA_SAMPLER_H_
#define TRAINC_RUNTIME_DATA_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, bound), bound > 0, without modulo bias (rejection).
  uint64_t Below(uint64_t bound);

 private:
  uint64_t state_;
};

// The order in which one epoch visits the examples.
class EpochSampler {
 public:
  EpochSampler(int64_t num_examples, int64_t seed, bool shuffle);

  // A permutation of [0, num_examples); the identity when not shuffling.
  std::vector<int64_t> Permutation(int64_t epoch) const;

 private:
  int64_t num_examples_;
  int64_t seed_;
  bool shuffle_;
};

struct BatchConfig {
  int64_t world_size = 1;
  int64_t accumulate = 1;
  int64_t micro_batch = 1;
  int64_t seed = 0;
  bool shuffle = true;
};

class BatchPlanner {
 public:
  // Fails when a size is not positive or the data set holds fewer examples
  // than one global batch.
  static absl::StatusOr<BatchPlanner> Create(int64_t num_examples,
                                             const BatchConfig& config);
  static absl::StatusOr<BatchPlanner> ForPlan(const Plan& plan,
                                              int64_t num_examples);

  int64_t global_batch() const;
  // Full global batches per epoch (the remainder is dropped).
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

  // The micro_batch example indices that `rank` loads at micro-step `micro`
  // of step `step_in_epoch` of `epoch`. Caches the current epoch's
  // permutation, so it is cheap when called in order, and not thread-safe.
  absl::StatusOr<std::vector<int64_t>> MicroBatchIndices(int64_t epoch,
                                                         int64_t step_in_epoch,
                                                         int rank,
                                                         int micro) const;

 private:
  BatchPlanner(int64_t num_examples, const BatchConfig& config);

  BatchConfig config_;
  EpochSampler sampler_;
  int64_t steps_per_epoch_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
};

// Evaluation: every example once, in order, each rank a contiguous shard
// [size * rank / world, size * (rank + 1) / world). Batches hold at most
// `batch` indices; the last one of a shard may be shorter (the loader pads
// it, and the trainer counts only the real rows). Shards differ in size by
// at most one, so ranks may run different numbers of batches: evaluation
// must not use collectives until the final all-reduce of the counts.
class EvalIterator {
 public:
  EvalIterator(int64_t num_examples, int64_t batch, int rank, int world_size);

  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }

  // Fills `indices` with the next batch; false when the shard is done.
  bool Next(std::vector<int64_t>* indices);

 private:
  int64_t begin_, end_, next_, batch_;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_SAMPLER_H_
