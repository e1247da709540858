#include "tools/viz/timeline.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/cost/intervals.h"
#include "compiler/ops/kernel_families.h"
#include "tools/viz/palette.h"
#include "tools/viz/xml_escape.h"

namespace trainc::viz {
namespace {

using cost::Interval;
using cost::IntersectionLength;
using cost::Length;
using cost::Union;

bool IsAllReduce(const TraceEvent& e) {
  // ZeRO-1's reduce-scatter and all-gather are the same traffic, split.
  return IsCollectiveOp(StepOpOfInstruction(e.op)) || (e.op.empty() && e.stream == 1);
}

// A stopped job's positions: per rank a line across its lanes where it
// got to, a dot on the lane it was on, and "rank 1: stopped here
// (behind)"; the tooltip is the table's line.
std::string StopMarkersSvg(const Trace& trace, const std::function<double(double)>& x_of,
                           const std::function<double(int, int)>& lane_y, double lane,
                           double middle) {
  std::string svg;
  for (const StopPosition& p : trace.positions) {
    const double x = x_of(p.ts_us);
    const double top = lane_y(p.rank, 0), bottom = lane_y(p.rank, 1) + lane;
    const char* color = p.behind ? "#d62728" : "#333333";
    const std::string text =
        absl::StrCat("rank ", p.rank, ": stopped here", p.behind ? " (behind)" : "");
    absl::StrAppend(&svg, absl::StrFormat(
        "<g class=\"stop-marker%s\" data-rank=\"%d\"><title>rank %d: %s</title>"
        "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-width=\"2\"/><circle cx=\"%.2f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>"
        "<text class=\"stop-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" "
        "fill=\"%s\" font-weight=\"bold\">%s</text></g>\n",
        p.behind ? " behind" : "", p.rank, p.rank, XmlEscape(p.where), x, top - 2, x,
        bottom + 2, color, x, lane_y(p.rank, p.stream) + lane / 2, color,
        x > middle ? x - 6 : x + 6, top + lane * 0.7, x > middle ? "end" : "start", color,
        XmlEscape(text)));
  }
  return svg;
}

}  // namespace

std::vector<RankOverlap> ComputeOverlap(const Trace& trace) {
  // rank -> step -> events
  std::map<int, std::map<int64_t, std::vector<const TraceEvent*>>> by_rank;
  for (const TraceEvent& e : trace.events) by_rank[e.rank][e.step].push_back(&e);

  std::vector<RankOverlap> result;
  for (const auto& [rank, steps] : by_rank) {
    RankOverlap r;
    r.rank = rank;
    std::map<int, int> last_counts;  // bucket -> steps it finished last
    for (const auto& [step, events] : steps) {
      std::vector<Interval> compute, backward, comm;
      double first = 1e300, last = -1e300;
      double last_end = -1e300;
      int last_bucket = -1;
      for (const TraceEvent* e : events) {
        Interval iv{e->ts_us, e->ts_us + e->dur_us};
        first = std::min(first, iv.first);
        last = std::max(last, iv.second);
        if (e->stream == 0) {
          compute.push_back(iv);
          if (e->cat == "backward") backward.push_back(iv);
        } else if (IsAllReduce(*e)) {
          comm.push_back(iv);
          if (iv.second > last_end) {
            last_end = iv.second;
            last_bucket = e->bucket;
          }
        }
      }
      auto cu = Union(compute), bu = Union(backward), au = Union(comm);
      double ar = Length(au), hidden = IntersectionLength(au, cu);
      r.step_us += last - first;
      r.backward_us += Length(bu);
      r.all_reduce_us += ar;
      r.hidden_us += hidden;
      r.exposed_us += ar - hidden;
      if (last_bucket >= 0 || !comm.empty()) ++last_counts[last_bucket];
      ++r.steps;
    }
    if (r.steps > 0) {
      r.step_us /= r.steps;
      r.backward_us /= r.steps;
      r.all_reduce_us /= r.steps;
      r.hidden_us /= r.steps;
      r.exposed_us /= r.steps;
    }
    int best = 0;
    for (const auto& [bucket, count] : last_counts) {
      if (count > best) {  // ties: the lower bucket id, map order
        best = count;
        r.last_bucket = bucket;
      }
    }
    result.push_back(r);
  }
  return result;
}

std::string FormatOverlapTable(const std::vector<RankOverlap>& overlap) {
  std::string out = absl::StrFormat(
      "%-5s %6s %11s %12s %14s %11s %11s %8s %12s\n", "rank", "steps",
      "step(ms)", "backward(ms)", "all-reduce(ms)", "hidden(ms)",
      "exposed(ms)", "hidden%", "last bucket");
  for (const RankOverlap& r : overlap) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%-5d %6d %11.3f %12.3f %14.3f %11.3f %11.3f %7.1f%% %12s\n",
                        r.rank, r.steps, r.step_us / 1e3, r.backward_us / 1e3,
                        r.all_reduce_us / 1e3, r.hidden_us / 1e3,
                        r.exposed_us / 1e3, 100.0 * r.hidden_fraction(),
                        r.last_bucket >= 0 ? absl::StrCat(r.last_bucket)
                                           : std::string("-")));
  }
  return out;
}

namespace {

constexpr double kWidth = 1300, kLeft = 110, kRight = 20, kLane = 22, kLaneGap = 4,
                 kRankGap = 14, kTop = 30;
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kRankH = 2 * kLane + kLaneGap + kRankGap;

// Where the timeline draws: a row of two lanes per rank, time [t0, t1]
// across.
struct TimelineLayout {
  std::vector<int> ranks;  // sorted
  std::map<int, int> rank_row;
  double t0 = 1e300, t1 = -1e300;

  double X(double t) const { return kLeft + (t - t0) / (t1 - t0) * kPlotW; }
  double LaneY(int rank, int stream) const {
    return kTop + rank_row.at(rank) * kRankH + stream * (kLane + kLaneGap);
  }
};

TimelineLayout LayOutTimeline(const Trace& trace) {
  TimelineLayout l;
  std::vector<int>& ranks = l.ranks;
  for (const TraceEvent& e : trace.events) {
    ranks.push_back(e.rank);
    l.t0 = std::min(l.t0, e.ts_us);
    l.t1 = std::max(l.t1, e.ts_us + e.dur_us);
  }
  for (const StopPosition& p : trace.positions) {
    ranks.push_back(p.rank);
    l.t0 = std::min(l.t0, p.ts_us);
    l.t1 = std::max(l.t1, p.ts_us);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  if (ranks.empty()) {
    l.t0 = 0;
    l.t1 = 1;
  }
  if (l.t1 <= l.t0) l.t1 = l.t0 + 1;
  if (!trace.positions.empty()) l.t1 += (l.t1 - l.t0) * 0.02;  // room for the markers' lines
  for (size_t i = 0; i < ranks.size(); ++i) l.rank_row[ranks[i]] = i;
  return l;
}

// The two labelled lanes (compute, comm) of every rank.
std::string LanesSvg(const TimelineLayout& l) {
  std::string svg;
  for (int rank : l.ranks) {
    for (int stream = 0; stream < 2; ++stream) {
      double y = l.LaneY(rank, stream);
      absl::StrAppend(&svg, absl::StrFormat(
          "<text x=\"4\" y=\"%.1f\">rank %d %s</text>\n"
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" "
          "fill=\"%s\"/>\n",
          y + kLane * 0.7, rank, stream == 0 ? "compute" : "comm", kLeft, y,
          kPlotW, kLane, stream == 0 ? "#f7f7f7" : "#f3eef7"));
    }
  }
  return svg;
}

// One event's bar in its lane, an all-reduce's labelled with its bucket.
std::string EventBarSvg(const TraceEvent& e, const TimelineLayout& l) {
  double x = l.X(e.ts_us);
  double w = std::max(0.5, l.X(e.ts_us + e.dur_us) - x);
  double y = l.LaneY(e.rank, e.stream);
  bool ar = IsAllReduce(e);
  std::string fill = ar ? BucketColor(e.bucket) : PhaseColor(e.cat);
  std::string svg = absl::StrFormat(
      "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
      "height=\"%.0f\" fill=\"%s\" stroke=\"%s\" stroke-width=\"%s\">"
      "<title>%s (instr %d, step %d, micro %d): %.1f us at %.1f us"
      "</title></rect>\n",
      ar ? "bar allreduce" : "bar op", x, y, w, kLane, fill,
      ar ? "#6a3d9a" : "#555555",
      // Outlines would turn a run of thin bars into a dark block.
      w > 3 ? "0.5" : "0", XmlEscape(e.name), e.instr, e.step,
      e.micro, e.dur_us, e.ts_us);
  if (ar && e.bucket >= 0 && w > 14) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\">b%d</text>\n", x + 2,
        y + kLane * 0.7, e.bucket));
  }
  return svg;
}

// The time axis under the lanes: five ticks.
std::string TimeAxisSvg(const TimelineLayout& l) {
  std::string svg;
  double axis_y = kTop + l.ranks.size() * kRankH + 4;
  for (int i = 0; i <= 4; ++i) {
    double t = l.t0 + (l.t1 - l.t0) * i / 4;
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.3f ms</text>\n",
        l.X(t), kTop - 4, l.X(t), axis_y, l.X(t), axis_y + 14, t / 1e3));
  }
  return svg;
}

}  // namespace

std::string RenderTimelineSvg(const Trace& trace) {
  const TimelineLayout l = LayOutTimeline(trace);
  const double height = kTop + l.ranks.size() * kRankH + 30;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" "
      "width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, height, kWidth, height);
  absl::StrAppend(&svg, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.0f\" y=\"16\" font-weight=\"bold\">Timeline: %.3f ms, "
      "%d events</text>\n", kLeft, (l.t1 - l.t0) / 1e3, trace.events.size()));
  absl::StrAppend(&svg, LanesSvg(l));
  for (const TraceEvent& e : trace.events) absl::StrAppend(&svg, EventBarSvg(e, l));
  absl::StrAppend(&svg, StopMarkersSvg(
                            trace, [&l](double t) { return l.X(t); },
                            [&l](int rank, int stream) { return l.LaneY(rank, stream); },
                            kLane, kLeft + kPlotW / 2));
  absl::StrAppend(&svg, TimeAxisSvg(l));
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace trainc::viz
