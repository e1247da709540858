#include "tools/viz/timeline.h"

#include <algorithm>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/viz/trace_reader.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;

// Rank 0, two steps whose answers are worked out by hand:
//   step 0: compute busy [0,40) u [50,60); backward [10,40) u [50,60) = 40;
//           all-reduce [30,55) u [55,80) = 50, of which [30,40) and
//           [50,60) overlap compute: hidden 20, exposed 30; bucket 1 last.
//   step 1: the same shifted by 100 but all-reduces [130,150) u [150,170):
//           all-reduce 40, hidden 20, exposed 20; bucket 1 last.
// Rank 1: one step, backward only, no communication.
constexpr char kTrace[] = R"({"traceEvents": [
 {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "compute"}},
 {"name": "h1 = linear", "cat": "forward", "ph": "X", "ts": 0, "dur": 10, "pid": 0, "tid": 0, "args": {"instr": 0, "step": 0, "micro": 0, "op": "linear"}},
 {"name": "b1", "cat": "backward", "ph": "X", "ts": 10, "dur": 30, "pid": 0, "tid": 0, "args": {"instr": 1, "step": 0, "micro": 0, "op": "linear_grad_params"}},
 {"name": "b2", "cat": "backward", "ph": "X", "ts": 50, "dur": 10, "pid": 0, "tid": 0, "args": {"instr": 2, "step": 0, "micro": 0, "op": "linear_grad_params"}},
 {"name": "ar0", "cat": "comm", "ph": "X", "ts": 30, "dur": 25, "pid": 0, "tid": 1, "args": {"instr": 3, "step": 0, "micro": 0, "op": "all_reduce", "bucket": 0, "bytes": 64}},
 {"name": "ar1", "cat": "comm", "ph": "X", "ts": 55, "dur": 25, "pid": 0, "tid": 1, "args": {"instr": 4, "step": 0, "micro": 0, "op": "all_reduce", "bucket": 1, "bytes": 64}},
 {"name": "h1 = linear", "cat": "forward", "ph": "X", "ts": 100, "dur": 10, "pid": 0, "tid": 0, "args": {"instr": 0, "step": 1, "micro": 0, "op": "linear"}},
 {"name": "b1", "cat": "backward", "ph": "X", "ts": 110, "dur": 30, "pid": 0, "tid": 0, "args": {"instr": 1, "step": 1, "micro": 0, "op": "linear_grad_params"}},
 {"name": "b2", "cat": "backward", "ph": "X", "ts": 150, "dur": 10, "pid": 0, "tid": 0, "args": {"instr": 2, "step": 1, "micro": 0, "op": "linear_grad_params"}},
 {"name": "ar0", "cat": "comm", "ph": "X", "ts": 130, "dur": 20, "pid": 0, "tid": 1, "args": {"instr": 3, "step": 1, "micro": 0, "op": "all_reduce", "bucket": 0, "bytes": 64}},
 {"name": "ar1", "cat": "comm", "ph": "X", "ts": 150, "dur": 20, "pid": 0, "tid": 1, "args": {"instr": 4, "step": 1, "micro": 0, "op": "all_reduce", "bucket": 1, "bytes": 64}},
 {"name": "b1", "cat": "backward", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 0, "args": {"instr": 1, "step": 0, "micro": 0, "op": "linear_grad_params"}}
]})";

// kTrace stopped: rank 0 waits in bucket 0's all-reduce, rank 1 is behind
// in a backward instruction (instant events of cat "position").
std::string StoppedTrace() {
  std::string t = kTrace;
  t.replace(t.rfind("]}"), 2, R"json(,
 {"name": "rank 0: stopped here", "cat": "position", "ph": "i", "s": "t", "ts": 170, "pid": 0, "tid": 1, "args": {"step": 1, "instr": 3, "instructions": 5, "label": "all-reduce of bucket 0", "state": "in all-reduce of bucket 0", "seconds": 15.0, "behind": false, "where": "step 1, in all-reduce of bucket 0 (instruction 3 of 5) for 15.0 s"}},
 {"name": "rank 1: stopped here (behind)", "cat": "position", "ph": "i", "s": "t", "ts": 150, "pid": 1, "tid": 0, "args": {"step": 1, "instr": 1, "instructions": 5, "label": "backward \"b1\"", "state": "running backward \"b1\"", "seconds": 15.0, "behind": true, "where": "step 1, backward \"b1\" (instruction 1 of 5) for 15.0 s"}}
], "metadata": {"stopped": {"reason": "rank 1 sent no heartbeat", "behind": 1}}})json");
  return t;
}

TEST(TimelineTest, AStoppedJobHasAMarkerPerRankWhereItStopped) {
  auto trace = ParseTrace(StoppedTrace(), "stopped");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->positions.size(), 2u);
  EXPECT_EQ(trace->events.size(), 11u);  // the bars are all still there
  const std::string svg = RenderTimelineSvg(*trace);
  EXPECT_THAT(svg, HasSubstr("<g class=\"stop-marker\" data-rank=\"0\">"));
  EXPECT_THAT(svg, HasSubstr("<g class=\"stop-marker behind\" data-rank=\"1\">"));
  EXPECT_THAT(svg, HasSubstr(">rank 0: stopped here</text>"));
  EXPECT_THAT(svg, HasSubstr(">rank 1: stopped here (behind)</text>"));
  // The tooltip is the table's line; the behind rank's marker is red.
  EXPECT_THAT(svg, HasSubstr("<title>rank 1: step 1, backward &quot;b1&quot; (instruction 1 of 5)"));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#d62728\""));
  // Without positions, no marker.
  auto plain = ParseTrace(kTrace, "synthetic");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(RenderTimelineSvg(*plain), ::testing::Not(HasSubstr("stop-marker")));
}

TEST(TimelineTest, OverlapNumbersMatchHandComputedAnswers) {
  auto trace = ParseTrace(kTrace, "synthetic");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->events.size(), 11u);  // the "M" event is skipped
  auto overlap = ComputeOverlap(*trace);
  ASSERT_EQ(overlap.size(), 2u);
  const RankOverlap& r0 = overlap[0];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r0.steps, 2);
  EXPECT_DOUBLE_EQ(r0.step_us, (80 + 70) / 2.0);
  EXPECT_DOUBLE_EQ(r0.backward_us, 40);
  EXPECT_DOUBLE_EQ(r0.all_reduce_us, (50 + 40) / 2.0);
  EXPECT_DOUBLE_EQ(r0.hidden_us, 20);
  EXPECT_DOUBLE_EQ(r0.exposed_us, (30 + 20) / 2.0);
  EXPECT_EQ(r0.last_bucket, 1);
  EXPECT_NEAR(r0.hidden_fraction(), 20 / 45.0, 1e-12);
  const RankOverlap& r1 = overlap[1];
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(r1.steps, 1);
  EXPECT_DOUBLE_EQ(r1.backward_us, 10);
  EXPECT_DOUBLE_EQ(r1.all_reduce_us, 0);
  EXPECT_EQ(r1.last_bucket, -1);
}

TEST(TimelineTest, TableHasOneRowPerRank) {
  auto trace = ParseTrace(kTrace, "synthetic");
  ASSERT_TRUE(trace.ok());
  std::string table = FormatOverlapTable(ComputeOverlap(*trace));
  EXPECT_THAT(table, HasSubstr("exposed(ms)"));
  EXPECT_THAT(table, HasSubstr("last bucket"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
}

TEST(TimelineTest, SvgHasABarPerEventAndBothLanesPerRank) {
  auto trace = ParseTrace(kTrace, "synthetic");
  ASSERT_TRUE(trace.ok());
  std::string svg = RenderTimelineSvg(*trace);
  auto count = [&](const std::string& needle) {
    int n = 0;
    for (size_t p = svg.find(needle); p != std::string::npos;
         p = svg.find(needle, p + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("class=\"bar op\""), 7);
  EXPECT_EQ(count("class=\"bar allreduce\""), 4);
  EXPECT_THAT(svg, HasSubstr("rank 0 compute"));
  EXPECT_THAT(svg, HasSubstr("rank 1 comm"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

}  // namespace
}  // namespace trainc::viz
