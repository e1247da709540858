// What a trace says about overlap, and a drawing of it.
//
// The numbers are the ones a user tunes bucket_mb and accumulate by, per
// rank and averaged over the traced steps:
//   backward   time the compute stream spends in backward ops (busy time,
//              all micro-steps of the step)
//   all-reduce time the comm stream spends in all_reduce (busy time)
//   hidden     the part of all-reduce time during which the compute stream
//              was busy with anything (overlap)
//   exposed    all-reduce minus hidden: communication nobody hid
//   last bucket the bucket whose all-reduce finished last (most often)
#ifndef TRAINC_TOOLS_VIZ_TIMELINE_H_
#define TRAINC_TOOLS_VIZ_TIMELINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/viz/trace_reader.h"

namespace trainc::viz {

struct RankOverlap {
  int rank = 0;
  int steps = 0;              // traced steps averaged over
  double step_us = 0;         // first event start to last event end
  double backward_us = 0;
  double all_reduce_us = 0;
  double hidden_us = 0;
  double exposed_us = 0;
  int last_bucket = -1;       // -1 when the trace has no all-reduce
  double hidden_fraction() const {
    return all_reduce_us > 0 ? hidden_us / all_reduce_us : 0.0;
  }
};

// One entry per rank that has events, in rank order.
std::vector<RankOverlap> ComputeOverlap(const Trace& trace);

// A plain-text table of `overlap` for the terminal.
std::string FormatOverlapTable(const std::vector<RankOverlap>& overlap);

// A standalone SVG: per rank a compute lane and a comm lane over time, one
// bar per event (colour: phase; all-reduces: their bucket's colour, as in
// the graph), with a tooltip per bar. A stopped job's trace also has, per
// rank, a line where it got to labelled "rank 1: stopped here (behind)".
std::string RenderTimelineSvg(const Trace& trace);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_TIMELINE_H_
