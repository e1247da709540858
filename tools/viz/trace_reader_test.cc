#include "tools/viz/trace_reader.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/plan/plan_io.h"
#include "runtime/trace/tracer.h"
#include "tools/viz/file_util.h"
#include "tools/viz/synthetic.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;

class TraceReaderTest : public ::testing::Test {
 protected:
  Plan plan_ = MakeSyntheticPlan({});
  std::string json_ = MakeSyntheticTrace(plan_, 2);
};

TEST_F(TraceReaderTest, SyntheticPlanIsValid) {
  EXPECT_TRUE(ValidatePlan(plan_).ok()) << ValidatePlan(plan_);
}

TEST_F(TraceReaderTest, ReadsEventsAndMetadata) {
  auto trace = ParseTrace(json_, "t.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events.size(),
            plan_.instructions.size() * 2 * plan_.world_size);
  EXPECT_EQ(trace->plan_model, plan_.model);
  EXPECT_EQ(trace->plan_instructions,
            static_cast<int64_t>(plan_.instructions.size()));
  EXPECT_EQ(trace->steps_traced, 2);
  bool saw_all_reduce = false;
  for (const TraceEvent& e : trace->events) {
    if (e.op == "all_reduce") {
      saw_all_reduce = true;
      EXPECT_EQ(e.stream, 1);
      EXPECT_GE(e.bucket, 0);
      EXPECT_GT(e.bytes, 0);
    }
  }
  EXPECT_TRUE(saw_all_reduce);
  EXPECT_TRUE(CheckTraceMatchesPlan(*trace, plan_).ok());
}

TEST_F(TraceReaderTest, ReadsThePlanThatRan) {
  auto none = ParseTrace(json_, "t.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->plan.has_value());  // a trace from before the record
  const std::string meta = "\"metadata\": {";
  std::string with = json_;
  ASSERT_NE(with.find(meta), std::string::npos);
  with.insert(with.find(meta) + meta.size(),
              "\"plan\": {\"hash\": \"0123456789abcdef\", \"overrides\": [[\"steps\", \"6\"]]}, ");
  auto trace = ParseTrace(with, "t.json");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE(trace->plan.has_value());
  EXPECT_EQ(trace->plan->hash, "0123456789abcdef");
  EXPECT_EQ(trace->plan->overrides, (NamedValues{{"steps", "6"}}));
  with.replace(with.find("\"6\"]]"), 3, "6");
  auto bad = ParseTrace(with, "t.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("t.json: metadata \"plan\" member \"overrides\""));
}

TEST_F(TraceReaderTest, MalformedJsonNamesFileLineAndColumn) {
  auto trace = ParseTrace("{\"traceEvents\": [\n  {\"ph\": \"X\",}\n]}", "t.json");
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(std::string(trace.status().message()),
              HasSubstr("t.json:2:14: syntax error while parsing object key"));
}

TEST_F(TraceReaderTest, MissingFieldsAreErrors) {
  EXPECT_FALSE(ParseTrace("[]", "t").ok());
  EXPECT_FALSE(ParseTrace("{\"events\": []}", "t").ok());
  auto no_args = ParseTrace(
      R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0}]})", "t");
  ASSERT_FALSE(no_args.ok());
  EXPECT_THAT(std::string(no_args.status().message()),
              HasSubstr("traceEvents[0]: missing \"args\""));
  auto bad_tid = ParseTrace(
      R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 7, "args": {"instr": 0, "step": 0}}]})",
      "t");
  EXPECT_FALSE(bad_tid.ok());
}

TEST_F(TraceReaderTest, MissingFileIsNotFound) {
  auto trace = ReadTraceFile("/nonexistent/trace.json");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TraceReaderTest, RejectsTraceOfAnotherModel) {
  auto trace = ParseTrace(
      absl::StrReplaceAll(json_, {{"\"plan_model\": \"synthetic_mlp\"",
                                   "\"plan_model\": \"other\""}}),
      "t");
  ASSERT_TRUE(trace.ok());
  absl::Status s = CheckTraceMatchesPlan(*trace, plan_);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model \"other\""));
}

TEST_F(TraceReaderTest, RejectsOutOfRangeOrMismatchedInstructions) {
  auto trace = ParseTrace(json_, "t");
  ASSERT_TRUE(trace.ok());
  Trace t = *trace;
  t.plan_instructions = -1;
  t.events[3].instr = static_cast<int>(plan_.instructions.size());
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("out of range"));

  t = *trace;
  t.events[1].op = "gelu";
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("op \"gelu\""));

  t = *trace;
  t.events[1].stream = 1;
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("compute stream"));

  t = *trace;
  t.events[1].rank = 5;
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("rank 5"));

  t = *trace;
  t.plan_instructions = 3;
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("3 instructions"));
}

// A stopped job's trace as the trainer writes it (runtime/trace) reads back
// with every field of each rank's position and the reason.
TEST_F(TraceReaderTest, StoppedJobPositionsRoundTrip) {
  int all_reduce = -1;
  for (const Instruction& in : plan_.instructions) {
    if (in.op == "all_reduce" && all_reduce < 0) all_reduce = in.id;
  }
  ASSERT_GE(all_reduce, 0);
  TraceStop stop;
  stop.reason = "rank 1 sent no heartbeat for 15s (hung?); stopping the other 1 rank(s)";
  stop.written_by = 0;
  TracePosition waiting;
  waiting.rank = 0;
  waiting.step = 7;
  waiting.instr = all_reduce;
  waiting.instructions = static_cast<int64_t>(plan_.instructions.size());
  waiting.label = "all-reduce of bucket 0";
  waiting.state = "in all-reduce of bucket 0";
  waiting.in_collective = true;
  waiting.seconds = 15.25;
  waiting.where = "step 7, in all-reduce of bucket 0 (instruction 9 of 20) for 15.2 s";
  waiting.since_us = 1200.5;
  TracePosition behind = waiting;
  behind.rank = 1;
  behind.instr = 0;
  behind.label = "data \"load_batch micro 0\"";
  behind.state = "running data \"load_batch micro 0\"";
  behind.in_collective = false;
  behind.behind = true;
  behind.where = "step 7, data \"load_batch micro 0\" (instruction 0 of 20) for 15.2 s";
  stop.positions = {waiting, behind};
  const std::string path = ::testing::TempDir() + "/stopped.json";
  ASSERT_TRUE(MergeTraceParts(plan_, {"[]"}, 2, path, &stop).ok());

  absl::StatusOr<Trace> trace = ReadTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->stop_reason, stop.reason);
  ASSERT_EQ(trace->positions.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const TracePosition& want = stop.positions[r];
    const StopPosition& got = trace->positions[r];
    EXPECT_EQ(got.rank, want.rank);
    EXPECT_EQ(got.stream, want.in_collective ? 1 : 0);
    EXPECT_DOUBLE_EQ(got.ts_us, want.since_us);
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.instr, want.instr);
    EXPECT_EQ(got.instructions, want.instructions);
    EXPECT_EQ(got.label, want.label);
    EXPECT_EQ(got.state, want.state);
    EXPECT_DOUBLE_EQ(got.seconds, want.seconds);
    EXPECT_EQ(got.behind, want.behind);
    EXPECT_EQ(got.where, want.where);
  }
  EXPECT_TRUE(CheckTraceMatchesPlan(*trace, plan_).ok());
  Trace t = *trace;
  t.positions[1].rank = 5;
  EXPECT_THAT(std::string(CheckTraceMatchesPlan(t, plan_).message()),
              HasSubstr("position of rank 5"));
  // A trace of a run that did not stop has neither.
  absl::StatusOr<Trace> plain = ParseTrace(json_, "t");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->positions.empty());
  EXPECT_TRUE(plain->stop_reason.empty());
}

}  // namespace
}  // namespace trainc::viz
