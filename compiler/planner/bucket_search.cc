#include "compiler/planner/bucket_search.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/planner/bucketing.h"

namespace trainc {
namespace {

// The fixed sizes a choice is compared with (always among the candidates).
constexpr double kReferenceMb[] = {1.0, 25.0, 100.0};

}  // namespace

std::vector<BucketSizes> BucketCandidates(int64_t grad_bytes) {
  const double total_mb = static_cast<double>(grad_bytes) / kBytesPerMb;
  std::vector<double> sizes(std::begin(kReferenceMb), std::end(kReferenceMb));
  for (double mb = 0.25;; mb *= 2) {
    sizes.push_back(mb);
    if (mb >= total_mb) break;
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<BucketSizes> out;
  for (double mb : sizes) {
    out.push_back({mb, 0.0});
    for (double divisor : {4.0, 16.0}) {
      if (mb / divisor >= 0.0625) out.push_back({mb, mb / divisor});
    }
  }
  return out;
}

size_t BestCandidate(const std::vector<CandidateCost>& costs) {
  size_t best = 0;
  for (size_t i = 1; i < costs.size(); ++i) {
    const double tolerance = 1e-9 * costs[best].step_us;
    if (costs[i].step_us < costs[best].step_us - tolerance ||
        (costs[i].step_us <= costs[best].step_us + tolerance &&
         costs[i].buckets < costs[best].buckets)) {
      best = i;
    }
  }
  return best;
}

std::string ExplainBucketChoice(const std::vector<CandidateCost>& costs, size_t best,
                                int distinct, const std::string& machine,
                                int64_t world_size, bool overlap) {
  const CandidateCost& c = costs[best];
  std::string out = absl::StrCat(
      "bucket_mb auto on ", machine, " x ", world_size, world_size == 1 ? " rank" : " ranks",
      overlap ? "" : " (overlap off)", ": bucket_mb ", absl::StrFormat("%g", c.sizes.bucket_mb),
      c.sizes.first_bucket_mb > 0
          ? absl::StrFormat(", first %g", c.sizes.first_bucket_mb)
          : std::string(),
      absl::StrFormat(" (%d buckets, largest %.1f MiB); predicted step %.3f ms, exposed "
                      "communication %.3f ms",
                      c.buckets, static_cast<double>(c.largest_bucket_bytes) / kBytesPerMb,
                      c.step_us / 1e3, c.exposed_us / 1e3));
  std::string fixed;
  for (double mb : kReferenceMb) {
    for (const CandidateCost& r : costs) {
      if (r.sizes.bucket_mb != mb || r.sizes.first_bucket_mb != 0) continue;
      absl::StrAppend(&fixed, fixed.empty() ? "" : ", ",
                      absl::StrFormat("%g MB %.3f ms (%.3f exposed)", mb, r.step_us / 1e3,
                                      r.exposed_us / 1e3));
      break;
    }
  }
  if (!fixed.empty()) absl::StrAppend(&out, "; fixed sizes: ", fixed);
  absl::StrAppend(&out, "; ", costs.size(), " candidates, ", distinct,
                  " distinct bucketings");
  return out;
}

}  // namespace trainc
