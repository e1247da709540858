// bucket_mb = auto: the bucket sizes the planner tries, and the choice.
//
// BuildPlan (planner.h) builds the plan of every candidate, replays one
// step of each on the machine profile (compiler/cost/simulator.h) and keeps
// the least predicted step time; a tie goes to fewer buckets. The plan's
// bucket_choice says what it chose and what the fixed sizes would cost.
#ifndef TRAINC_COMPILER_PLANNER_BUCKET_SEARCH_H_
#define TRAINC_COMPILER_PLANNER_BUCKET_SEARCH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainc {

struct BucketSizes {
  double bucket_mb = 25.0;
  double first_bucket_mb = 0.0;  // 0: as bucket_mb
};

// For `grad_bytes` of gradients in all: bucket_mb doubling from 0.25 MiB
// up to the first size that holds every gradient (one bucket), plus 1, 25
// (DDP's default) and 100; each with no separate first bucket and with a
// first bucket of 1/4 and 1/16 of it (not below 0.0625 MiB). Sizes in MiB,
// ascending by bucket_mb; the first of them has first_bucket_mb 0.
std::vector<BucketSizes> BucketCandidates(int64_t grad_bytes);

// What one candidate's plan is predicted to cost.
struct CandidateCost {
  BucketSizes sizes;
  int buckets = 0;
  int64_t largest_bucket_bytes = 0;
  double step_us = 0;
  double exposed_us = 0;
};

// The least step_us; equal ones (within 1e-9 of it) go to fewer buckets,
// then to the earlier candidate. `costs` must not be empty.
size_t BestCandidate(const std::vector<CandidateCost>& costs);

// One line for the plan summary, e.g. "bucket_mb auto on h100_nvlink_ib x
// 64 ranks: bucket_mb 64, first 4 (9 buckets, largest 66.1 MiB); predicted
// step 312.40 ms, exposed communication 1.23 ms; fixed sizes: 1 MB 330.10
// ms (18.90 exposed), ...; 42 candidates, 31 distinct bucketings".
// `costs` holds every candidate (one whose buckets equal an earlier one's
// has its cost); `distinct` says how many were built and replayed.
std::string ExplainBucketChoice(const std::vector<CandidateCost>& costs, size_t best,
                                int distinct, const std::string& machine,
                                int64_t world_size, bool overlap);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_BUCKET_SEARCH_H_
