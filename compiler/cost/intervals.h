// Time intervals on one timeline: the arithmetic behind "hidden" and
// "exposed" communication, shared by the simulator (cost/simulator.h) and
// tools/viz's overlap table of a measured trace, so both mean the same.
#ifndef TRAINC_COMPILER_COST_INTERVALS_H_
#define TRAINC_COMPILER_COST_INTERVALS_H_

#include <utility>
#include <vector>

namespace trainc::cost {

using Interval = std::pair<double, double>;  // [start, end)

// The sorted, disjoint union of `v` (empty intervals dropped).
std::vector<Interval> Union(std::vector<Interval> v);

// The total length of a sorted, disjoint union.
double Length(const std::vector<Interval>& u);

// The length of the intersection of two sorted, disjoint unions.
double IntersectionLength(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace trainc::cost

#endif  // TRAINC_COMPILER_COST_INTERVALS_H_
