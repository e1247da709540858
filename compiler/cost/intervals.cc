#include "compiler/cost/intervals.h"

#include <algorithm>

namespace trainc::cost {

std::vector<Interval> Union(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.second <= i.first) continue;
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

double Length(const std::vector<Interval>& u) {
  double t = 0;
  for (const Interval& i : u) t += i.second - i.first;
  return t;
}

double IntersectionLength(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double t = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first);
    const double hi = std::min(a[i].second, b[j].second);
    if (hi > lo) t += hi - lo;
    if (a[i].second < b[j].second) ++i; else ++j;
  }
  return t;
}

}  // namespace trainc::cost
