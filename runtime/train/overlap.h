// How much of the comm stream's time the compute stream hid.
#ifndef TRAINC_RUNTIME_TRAIN_OVERLAP_H_
#define TRAINC_RUNTIME_TRAIN_OVERLAP_H_

#include <cstdint>
#include <vector>

#include "runtime/trace/tracer.h"

namespace trainc {

struct OverlapStats {
  int64_t comm_ns = 0;     // total time of comm-stream spans
  int64_t hidden_ns = 0;   // of it, time when some compute span also ran
  int64_t steps = 0;       // distinct steps in the spans
  double hidden_fraction() const {
    return comm_ns > 0 ? static_cast<double>(hidden_ns) / comm_ns : 0.0;
  }
};

// Spans of one rank. O(n log n).
OverlapStats ComputeOverlap(const std::vector<TraceSpan>& spans);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_OVERLAP_H_
