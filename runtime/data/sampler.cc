#include "runtime/data/sampler.h"

#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainc {

uint64_t SplitMix64::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Below(uint64_t bound) {
  // Reject the lowest (2^64 mod bound) values so that every residue is
  // equally likely.
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

EpochSampler::EpochSampler(int64_t num_examples, int64_t seed, bool shuffle)
    : num_examples_(num_examples), seed_(seed), shuffle_(shuffle) {}

std::vector<int64_t> EpochSampler::Permutation(int64_t epoch) const {
  std::vector<int64_t> order(num_examples_);
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle_) return order;
  SplitMix64 rng(static_cast<uint64_t>(seed_) + static_cast<uint64_t>(epoch));
  for (int64_t i = num_examples_ - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<BatchPlanner> BatchPlanner::Create(int64_t num_examples,
                                                  const BatchConfig& config) {
  if (config.world_size < 1 || config.accumulate < 1 ||
      config.micro_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sizes must be positive: world_size=", config.world_size,
        " accumulate=", config.accumulate,
        " micro_batch=", config.micro_batch));
  }
  const int64_t global =
      config.world_size * config.accumulate * config.micro_batch;
  if (num_examples < global) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data set has ", num_examples,
        " examples, fewer than one global batch of ", global));
  }
  return BatchPlanner(num_examples, config);
}

absl::StatusOr<BatchPlanner> BatchPlanner::ForPlan(const Plan& plan,
                                                   int64_t num_examples) {
  BatchConfig config;
  config.world_size = plan.world_size;
  config.accumulate = plan.accumulate;
  config.micro_batch = plan.micro_batch;
  config.seed = plan.seed;
  config.shuffle = plan.data.shuffle;
  return Create(num_examples, config);
}

BatchPlanner::BatchPlanner(int64_t num_examples, const BatchConfig& config)
    : config_(config),
      sampler_(num_examples, config.seed, config.shuffle),
      steps_per_epoch_(num_examples / global_batch()) {}

int64_t BatchPlanner::global_batch() const {
  return config_.world_size * config_.accumulate * config_.micro_batch;
}

absl::StatusOr<std::vector<int64_t>> BatchPlanner::MicroBatchIndices(
    int64_t epoch, int64_t step_in_epoch, int rank, int micro) const {
  if (epoch < 0 || step_in_epoch < 0 || step_in_epoch >= steps_per_epoch_ ||
      rank < 0 || rank >= config_.world_size || micro < 0 ||
      micro >= config_.accumulate) {
    return absl::OutOfRangeError(absl::StrCat(
        "no micro-batch (epoch ", epoch, ", step ", step_in_epoch, ", rank ",
        rank, ", micro ", micro, "): ", steps_per_epoch_,
        " steps per epoch, world size ", config_.world_size, ", accumulate ",
        config_.accumulate));
  }
  if (epoch != cached_epoch_) {
    cached_permutation_ = sampler_.Permutation(epoch);
    cached_epoch_ = epoch;
  }
  const int64_t m = int64_t{rank} * config_.accumulate + micro;
  const int64_t begin =
      step_in_epoch * global_batch() + m * config_.micro_batch;
  return std::vector<int64_t>(
      cached_permutation_.begin() + begin,
      cached_permutation_.begin() + begin + config_.micro_batch);
}

EvalIterator::EvalIterator(int64_t num_examples, int64_t batch, int rank,
                           int world_size)
    : begin_(num_examples * rank / world_size),
      end_(num_examples * (rank + 1) / world_size),
      next_(begin_),
      batch_(batch) {}

bool EvalIterator::Next(std::vector<int64_t>* indices) {
  indices->clear();
  if (next_ >= end_) return false;
  const int64_t stop = std::min(end_, next_ + batch_);
  for (int64_t i = next_; i < stop; ++i) indices->push_back(i);
  next_ = stop;
  return true;
}

}  // namespace trainc
