#include "tools/viz/trace_reader.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/plan/plan_io.h"
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

}  // namespace
}  // namespace trainc::viz
