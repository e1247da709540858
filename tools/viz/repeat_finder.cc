#include "tools/viz/repeat_finder.h"

#include <string>
#include <vector>

namespace trainc::viz {

std::vector<RepeatedBlock> FindRepeatedBlocks(
    const std::vector<std::string>& signatures,
    const std::vector<std::string>& statements, int min_repeats,
    int max_period) {
  const int n = static_cast<int>(signatures.size());
  const bool aligned = statements.size() == signatures.size();
  // A boundary before index i: the statement changes there (or the ends).
  auto boundary = [&](int i) {
    if (!aligned || i <= 0 || i >= n) return true;
    return statements[i] != statements[i - 1];
  };
  auto same = [&](int a, int b, int len) {
    for (int k = 0; k < len; ++k) {
      if (signatures[a + k] != signatures[b + k]) return false;
    }
    return true;
  };
  std::vector<RepeatedBlock> blocks;
  if (min_repeats < 2) min_repeats = 2;
  int i = 0;
  while (i < n) {
    RepeatedBlock best;
    if (boundary(i)) {
      for (int p = 1; p <= max_period && i + p * min_repeats <= n; ++p) {
        if (!boundary(i + p)) continue;
        int r = 1;
        while (i + (r + 1) * p <= n && same(i, i + r * p, p)) ++r;
        while (r >= min_repeats && !boundary(i + r * p)) --r;
        if (r < min_repeats) continue;
        if (p * r > best.period * best.repeats) best = {i, p, r};
      }
    }
    if (best.repeats > 0) {
      blocks.push_back(best);
      i = best.end();
    } else {
      ++i;
    }
  }
  return blocks;
}

}  // namespace trainc::viz
