// Offset assignment for buffers with live ranges (the arena's reusable part).
//
// Buffers are placed in order of first use; before each placement, every
// buffer whose last use is earlier is freed. A buffer goes into the
// smallest free block that fits (best fit, ties to the lowest offset), else
// on top of the arena. Free blocks are kept in two ordered sets (by offset,
// to merge neighbours; by size, to find the best fit), so planning n
// buffers costs O(n log n) — no pairwise overlap checks.
//
// Up to kPlanBySizeLimit buffers, a second packing is tried and kept when
// it needs less: largest buffer first, each into the smallest gap among
// the placed buffers it meets in time (TFLite's greedy-by-size planner;
// XLA likewise keeps the best of several heap algorithms). Neither wins
// everywhere: first-use order leaves holes where a large buffer is born
// after smaller ones (fashion_cnn's convolutions), size order where
// lifetimes interleave. Its O(n^2) is why deep models keep the first.
//
// Live ranges are inclusive: a buffer last read by instruction i and one
// first written by instruction i never share memory (no in-place kernels).
#ifndef TRAINC_COMPILER_PLANNER_MEMORY_PLAN_H_
#define TRAINC_COMPILER_PLANNER_MEMORY_PLAN_H_

#include <cstdint>
#include <vector>

namespace trainc {

inline constexpr int64_t kArenaAlignment = 64;

inline int64_t AlignUp(int64_t n, int64_t alignment = kArenaAlignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// The most buffers the size-ordered packing is tried for (O(n^2)).
inline constexpr int kPlanBySizeLimit = 4096;

struct LiveInterval {
  int64_t bytes = 0;
  int first = 0;  // first instruction that touches it
  int last = 0;   // last instruction that touches it, >= first
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per interval, aligned, from 0
  int64_t size = 0;              // bytes needed (the high-water mark)
  int64_t peak_live_bytes = 0;   // max over time of live (aligned) bytes
  int64_t unshared_bytes = 0;    // sum of aligned sizes: no reuse at all
};

MemoryPlan PlanMemory(const std::vector<LiveInterval>& intervals);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_MEMORY_PLAN_H_
