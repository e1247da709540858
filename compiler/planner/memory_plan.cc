#include "compiler/planner/memory_plan.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <utility>

namespace trainc {
namespace {

// Free blocks below the arena's top, merged on release.
class FreeList {
 public:
  // Returns the offset of a block of `size`, or -1 when none fits.
  int64_t TakeBestFit(int64_t size) {
    auto it = by_size_.lower_bound({size, 0});
    if (it == by_size_.end()) return -1;
    const auto [block_size, offset] = *it;
    Erase(offset, block_size);
    if (block_size > size) Insert(offset + size, block_size - size);
    return offset;
  }

  // Frees [offset, offset + size); returns the new top when the freed
  // block (merged) reaches `top`, so the arena shrinks back instead.
  int64_t Release(int64_t offset, int64_t size, int64_t top) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      size += next->second;
      Erase(next->first, next->second);
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        Erase(prev->first, prev->second);
      }
    }
    if (offset + size == top) return offset;
    Insert(offset, size);
    return top;
  }

 private:
  void Insert(int64_t offset, int64_t size) {
    by_offset_[offset] = size;
    by_size_.insert({size, offset});
  }
  void Erase(int64_t offset, int64_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }

  std::map<int64_t, int64_t> by_offset_;          // offset -> size
  std::set<std::pair<int64_t, int64_t>> by_size_;  // (size, offset)
};

// Offsets by decreasing size (TFLite's greedy-by-size planner, XLA's
// decreasing-size best fit): each buffer, largest first, goes into the
// smallest gap between the placed buffers it meets in time that holds it,
// else above them. Sets offsets and size. O(n^2): every placed buffer is
// looked at per placement.
void PlanBySize(const std::vector<LiveInterval>& intervals, MemoryPlan& plan) {
  const int n = static_cast<int>(intervals.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int64_t sa = AlignUp(intervals[a].bytes), sb = AlignUp(intervals[b].bytes);
    if (sa != sb) return sa > sb;
    return intervals[a].first < intervals[b].first;
  });
  plan.offsets.assign(n, 0);
  plan.size = 0;
  std::vector<int> placed;  // by offset
  for (int i : order) {
    const LiveInterval& iv = intervals[i];
    const int64_t size = AlignUp(iv.bytes);
    if (size == 0) continue;
    int64_t end = 0, best = -1, best_gap = 0;
    for (int j : placed) {
      if (intervals[j].last < iv.first || iv.last < intervals[j].first) continue;
      const int64_t gap = plan.offsets[j] - end;
      if (gap >= size && (best < 0 || gap < best_gap)) {
        best = end;
        best_gap = gap;
      }
      end = std::max(end, plan.offsets[j] + AlignUp(intervals[j].bytes));
    }
    plan.offsets[i] = best >= 0 ? best : end;
    plan.size = std::max(plan.size, plan.offsets[i] + size);
    auto at = std::upper_bound(placed.begin(), placed.end(), plan.offsets[i],
                               [&](int64_t offset, int j) { return offset < plan.offsets[j]; });
    placed.insert(at, i);
  }
}

}  // namespace

MemoryPlan PlanMemory(const std::vector<LiveInterval>& intervals) {
  const int n = static_cast<int>(intervals.size());
  MemoryPlan plan;
  plan.offsets.assign(n, 0);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Larger buffers first among those born together: fewer holes.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (intervals[a].first != intervals[b].first) return intervals[a].first < intervals[b].first;
    return intervals[a].bytes > intervals[b].bytes;
  });
  using Death = std::pair<int, int>;  // (last use, interval)
  std::priority_queue<Death, std::vector<Death>, std::greater<Death>> live;
  FreeList free;
  int64_t top = 0;
  int64_t live_bytes = 0;
  for (int i : order) {
    const LiveInterval& iv = intervals[i];
    while (!live.empty() && live.top().first < iv.first) {
      const int dead = live.top().second;
      live.pop();
      const int64_t size = AlignUp(intervals[dead].bytes);
      live_bytes -= size;
      top = free.Release(plan.offsets[dead], size, top);
    }
    const int64_t size = AlignUp(iv.bytes);
    plan.unshared_bytes += size;
    if (size == 0) continue;
    int64_t offset = free.TakeBestFit(size);
    if (offset < 0) {
      offset = top;
      top += size;
    }
    plan.offsets[i] = offset;
    plan.size = std::max(plan.size, top);
    live_bytes += size;
    plan.peak_live_bytes = std::max(plan.peak_live_bytes, live_bytes);
    live.push({iv.last, i});
  }
  // The packing by size, when it is smaller and the plan small enough for
  // its O(n^2) (deep models keep the O(n log n) one: compile time stays
  // linear).
  if (n <= kPlanBySizeLimit) {
    MemoryPlan by_size;
    PlanBySize(intervals, by_size);
    if (by_size.size < plan.size) {
      plan.offsets = std::move(by_size.offsets);
      plan.size = by_size.size;
    }
  }
  return plan;
}

}  // namespace trainc
