#include "runtime/train/overlap.h"

#include <algorithm>
#include <set>
#include <utility>

namespace trainc {

OverlapStats ComputeOverlap(const std::vector<TraceSpan>& spans) {
  OverlapStats stats;
  std::vector<std::pair<int64_t, int64_t>> compute;
  std::set<int64_t> steps;
  for (const TraceSpan& s : spans) {
    steps.insert(s.step);
    if (s.stream == Stream::kCompute) compute.emplace_back(s.begin_ns, s.end_ns);
  }
  stats.steps = static_cast<int64_t>(steps.size());
  // Union of compute intervals, sorted and disjoint.
  std::sort(compute.begin(), compute.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& iv : compute) {
    if (!merged.empty() && iv.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, iv.second);
    } else {
      merged.push_back(iv);
    }
  }
  for (const TraceSpan& s : spans) {
    if (s.stream != Stream::kComm) continue;
    stats.comm_ns += s.end_ns - s.begin_ns;
    auto it = std::upper_bound(
        merged.begin(), merged.end(), std::make_pair(s.begin_ns, INT64_MAX));
    if (it != merged.begin()) --it;
    for (; it != merged.end() && it->first < s.end_ns; ++it) {
      const int64_t lo = std::max(it->first, s.begin_ns);
      const int64_t hi = std::min(it->second, s.end_ns);
      if (hi > lo) stats.hidden_ns += hi - lo;
    }
  }
  return stats;
}

}  // namespace trainc
