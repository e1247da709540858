// Gradient bucketing: which parameter gradients are all-reduced together.
//
// Like PyTorch DDP's reducer, but decided once at compile time: gradients
// are taken in the order the backward pass produces them (last layer
// first) and appended to the current bucket; the bucket closes as soon as
// it holds at least its capacity. A parameter is never split, so a bucket
// may exceed its capacity by one parameter. A capacity of 0 gives one
// bucket per parameter. `first_bucket_mb` > 0 gives the first bucket its
// own (usually smaller) capacity, so that the first all-reduce starts
// early, as DDP does. The result depends only on its arguments, so every
// rank computes the same buckets.
//
// Capacities are in MiB (1 MB = 1024 * 1024 bytes), as DDP's bucket_cap_mb.
#ifndef TRAINC_COMPILER_PLANNER_BUCKETING_H_
#define TRAINC_COMPILER_PLANNER_BUCKETING_H_

#include <cstdint>
#include <vector>

namespace trainc {

inline constexpr int64_t kBytesPerMb = 1024 * 1024;

struct BucketAssignment {
  // buckets[b] = indices into the ready order, ascending; every index in
  // exactly one bucket; buckets in all-reduce order.
  std::vector<std::vector<int>> buckets;
};

// `grad_bytes[i]`: size of the i-th gradient in ready order.
BucketAssignment AssignBuckets(const std::vector<int64_t>& grad_bytes, double bucket_mb,
                               double first_bucket_mb = 0.0);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_BUCKETING_H_
