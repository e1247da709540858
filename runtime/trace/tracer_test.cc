#include "runtime/trace/tracer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/plan/plan_io.h"
#include "compiler/util/fnv.h"
#include "gtest/gtest.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

Plan TwoInstructionPlan() {
  Plan plan;
  plan.model = "tiny \"mlp\"";
  plan.world_size = 2;
  Instruction lin;
  lin.id = 0;
  lin.op = "linear";
  lin.label = "h1 = linear";
  lin.phase = Phase::kForward;
  Instruction ar;
  ar.id = 1;
  ar.op = "all_reduce";
  ar.stream = Stream::kComm;
  ar.phase = Phase::kComm;
  ar.micro_step = 1;
  ar.attrs["bucket"] = 0;
  plan.instructions = {lin, ar};
  Bucket bucket;
  bucket.bytes = 5160;
  plan.buckets = {bucket};
  return plan;
}

TEST(TracerTest, EventsFollowTheTraceFormat) {
  const Plan plan = TwoInstructionPlan();
  Tracer tracer(/*rank=*/1, /*job_start_ns=*/1'000'000);
  tracer.Add({0, 3, 0, Stream::kCompute, 1'012'500, 1'052'600});
  tracer.Add({1, 3, 1, Stream::kComm, 1'080'000, 1'175'200});
  EXPECT_EQ(tracer.steps_traced(), 1);
  const std::string json = tracer.EventsJson(plan);
  EXPECT_NE(json.find("{\"name\": \"h1 = linear\", \"cat\": \"forward\", "
                      "\"ph\": \"X\", \"ts\": 12.500, \"dur\": 40.100, "
                      "\"pid\": 1, \"tid\": 0, \"args\": {\"instr\": 0, "
                      "\"step\": 3, \"micro\": 0, \"op\": \"linear\"}}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("{\"name\": \"all_reduce bucket 0\", \"cat\": \"comm\", "
                      "\"ph\": \"X\", \"ts\": 80.000, \"dur\": 95.200, "
                      "\"pid\": 1, \"tid\": 1, \"args\": {\"instr\": 1, "
                      "\"step\": 3, \"micro\": 1, \"op\": \"all_reduce\", "
                      "\"bucket\": 0, \"bytes\": 5160}}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"thread_name\""), std::string::npos);
}

TEST(TracerTest, MergeWritesOneFileWithMetadata) {
  const Plan plan = TwoInstructionPlan();
  Tracer r0(0, 0), r1(1, 0);
  r0.Add({0, 1, 0, Stream::kCompute, 10, 20});
  const std::string path = ::testing::TempDir() + "/merged.json";
  ASSERT_TRUE(
      MergeTraceParts(plan, {r0.EventsJson(plan), r1.EventsJson(plan)}, 1, path)
          .ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_EQ(json.rfind("{\"traceEvents\": [", 0), 0u);
  EXPECT_NE(json.find("\"plan_model\": \"tiny \\\"mlp\\\"\""), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"plan_instructions\": 2"), std::string::npos);
  EXPECT_NE(json.find("\"pid\": 1"), std::string::npos);
  // The file is strict JSON (what tools/viz reads) and the quoted model name
  // round-trips.
  auto doc = ParseJson(json);
  ASSERT_TRUE(doc.ok()) << doc.status() << "\n" << json;
  ASSERT_NE(doc->Find("metadata"), nullptr);
  EXPECT_EQ(doc->Find("metadata")->Find("plan_model")->string_value(),
            plan.model);
  EXPECT_EQ(MergeTraceParts(plan, {"{}"}, 1, path).code(),
            absl::StatusCode::kInvalidArgument);
}

// The plan that ran, for tools/viz to draw it (plan_identity.h).
TEST(TracerTest, MergeRecordsThePlanThatRan) {
  const Plan plan = TwoInstructionPlan();
  PlanIdentity id = IdentifyPlan(plan, "m.train", {{"steps", "6"}});
  const std::string path = ::testing::TempDir() + "/identified.json";
  ASSERT_TRUE(MergeTraceParts(plan, {"[]"}, 0, path, nullptr, &id).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto doc = ParseJson(text.str());
  ASSERT_TRUE(doc.ok()) << doc.status() << "\n" << text.str();
  const JsonValue* recorded = doc->Find("metadata")->Find("plan");
  ASSERT_NE(recorded, nullptr) << text.str();
  absl::StatusOr<PlanIdentity> back = PlanIdentityFromJson(*recorded);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hash, HashHex(PlanHash(plan)));
  EXPECT_EQ(back->overrides, id.overrides);
}

// A stopped job's file: one instant event per rank where it was, and why
// in the metadata; still strict JSON.
TEST(TracerTest, AStoppedJobRecordsWhereEachRankWas) {
  const Plan plan = TwoInstructionPlan();
  TraceStop stop;
  stop.reason = "rank 1 sent no heartbeat";
  stop.written_by = 0;
  TracePosition p;
  p.rank = 1;
  p.step = 4;
  p.instr = 0;
  p.instructions = 2;
  p.label = "forward \"h1 = linear\"";
  p.state = "running forward \"h1 = linear\"";
  p.seconds = 15.5;
  p.behind = true;
  p.where = "step 4, forward \"h1 = linear\" (instruction 0 of 2) for 15.5 s";
  p.since_us = 12.5;
  stop.positions = {p};
  const std::string path = ::testing::TempDir() + "/stopped.json";
  ASSERT_TRUE(MergeTraceParts(plan, {"[]"}, 0, path, &stop).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_NE(json.find("{\"name\": \"rank 1: stopped here (behind)\", \"cat\": \"position\", "
                      "\"ph\": \"i\", \"s\": \"t\", \"ts\": 12.500, \"pid\": 1, \"tid\": 0, "
                      "\"args\": {\"step\": 4, \"instr\": 0, \"instructions\": 2, "
                      "\"label\": \"forward \\\"h1 = linear\\\"\", "),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"stopped\": {\"reason\": \"rank 1 sent no heartbeat\", "
                      "\"written_by\": 0, \"behind\": 1, \"ranks\": 1}"),
            std::string::npos)
      << json;
  EXPECT_TRUE(ParseJson(json).ok()) << json;
}

}  // namespace
}  // namespace trainc
