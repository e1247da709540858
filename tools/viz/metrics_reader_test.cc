#include "tools/viz/metrics_reader.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc::viz {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLog[] =
    R"({"kind":"run","step":0,"time":1.5,"model":"fashion_mlp","gpus":2,"micro_batch":64,"accumulate":2,"global_batch":256,"loss_terms":1})"
    "\n"
    R"({"kind":"train","step":1,"time":2.0,"epoch":1,"loss":2.3,"lr":0.001,"samples_per_s":1000.0})"
    "\n"
    R"({"kind":"train","step":2,"time":2.5,"epoch":1,"loss":null,"lr":0.001,"samples_per_s":2000.0,"exposed_comm_ms":0.5})"
    "\n"
    R"({"kind":"eval","step":2,"time":3.0,"epoch":1,"examples":10000,"loss":1.5,"accuracy":0.5})"
    "\n"
    R"({"kind":"summary","step":2,"time":3.5,"steps":2,"seconds":1.0,"samples_per_s":512.0})"
    "\n";

TEST(MetricsReaderTest, ReadsEveryKind) {
  auto run = ParseMetricsLog(kLog, "a.metrics.jsonl");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->model, "fashion_mlp");
  EXPECT_EQ(run->config, "gpus=2 micro_batch=64 accumulate=2");
  EXPECT_EQ(run->records, 5);
  EXPECT_THAT(run->train.at("loss").steps, ElementsAre(1));  // null left out
  EXPECT_THAT(run->train.at("lr").values, ElementsAre(0.001, 0.001));
  EXPECT_THAT(run->train.at("exposed_comm_ms").steps, ElementsAre(2));
  EXPECT_EQ(run->train.count("epoch"), 0u);  // descriptive, not a curve
  EXPECT_EQ(run->train.count("time"), 0u);
  EXPECT_THAT(run->eval.at("accuracy").values, ElementsAre(0.5));
  EXPECT_EQ(run->eval.count("examples"), 0u);
  EXPECT_TRUE(run->has_summary);
  EXPECT_EQ(run->summary_samples_per_s, 512.0);
}

TEST(MetricsReaderTest, EachRunRecordNamesItsPlan) {
  auto old = ParseMetricsLog(kLog, "a.jsonl");
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->plans.empty());  // a log from before the record
  const std::string log =
      R"({"kind":"run","step":0,"time":1,"plan":{"hash":"aa","overrides":[["steps","6"]]}})"
      "\n"
      R"({"kind":"run","step":6,"time":2,"plan":{"hash":"bb","overrides":[]}})"
      "\n";
  auto run = ParseMetricsLog(log, "a.jsonl");
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->plans.size(), 2u);  // resumed once
  EXPECT_EQ(run->plans[0].hash, "aa");
  EXPECT_EQ(run->plans[1].hash, "bb");
  auto bad = ParseMetricsLog(R"({"kind":"run","step":0,"time":1,"plan":{"hash":7}})"
                             "\n",
                             "a.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("a.jsonl:1: \"plan\" member \"hash\""));
}

TEST(MetricsReaderTest, AResumedRunKeepsTheLastValueOfAStep) {
  const std::string log =
      R"({"kind":"train","step":1,"time":0,"loss":3.0})" "\n"
      R"({"kind":"train","step":2,"time":0,"loss":2.0})" "\n"
      R"({"kind":"run","step":1,"time":0})" "\n"
      R"({"kind":"train","step":2,"time":0,"loss":2.5})" "\n"
      R"({"kind":"train","step":3,"time":0,"loss":1.0})" "\n";
  auto run = ParseMetricsLog(log, "r.jsonl");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_THAT(run->train.at("loss").steps, ElementsAre(1, 2, 3));
  EXPECT_THAT(run->train.at("loss").values, ElementsAre(3.0, 2.5, 1.0));
}

TEST(MetricsReaderTest, ALastLineCutShortIsSkipped) {
  const std::string log = std::string(kLog) + R"({"kind":"train","step":3,"lo)";
  auto run = ParseMetricsLog(log, "a.jsonl");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->truncated_lines, 1);
  EXPECT_EQ(run->records, 5);
}

TEST(MetricsReaderTest, BadLinesAreErrorsWithTheirLine) {
  const std::string log = std::string(kLog) + "{\"kind\": \"train\",}\n" + kLog;
  auto run = ParseMetricsLog(log, "a.jsonl");
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(std::string(run.status().message()), HasSubstr("a.jsonl:6:"));
  auto trace = ParseMetricsLog("{\"traceEvents\": []}\n", "t.json");
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(std::string(trace.status().message()),
              HasSubstr("t.json:1: not a metrics record"));
  EXPECT_FALSE(ReadMetricsFile("/nonexistent/x.jsonl").ok());
}

// `viz --metrics FOLDER` drew an empty plot: a folder is refused, naming it.
TEST(MetricsReaderTest, AFolderIsNotAMetricsLog) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp");
  auto run = ReadMetricsFile(dir);
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(std::string(run.status().message()), HasSubstr(dir + ": is a directory"));
}

TEST(MetricsReaderTest, LabelsAreDistinct) {
  std::vector<RunMetrics> runs(6);
  runs[0].path = "out/a.metrics.jsonl";
  runs[1].path = "b.jsonl";
  runs[2].path = "ckpt/run7/metrics.jsonl";
  runs[3].path = "x/c.metrics.jsonl";
  runs[3].config = "gpus=1 micro_batch=64 accumulate=4";
  runs[4].path = "y/c.metrics.jsonl";
  runs[4].config = "gpus=2 micro_batch=64 accumulate=2";
  runs[5].path = "z/b.jsonl";
  runs[5].label = "mine";
  LabelRuns(&runs);
  EXPECT_EQ(runs[0].label, "a");
  EXPECT_EQ(runs[1].label, "b");
  EXPECT_EQ(runs[2].label, "run7");
  EXPECT_EQ(runs[3].label, "c (gpus=1 micro_batch=64 accumulate=4)");
  EXPECT_EQ(runs[4].label, "c (gpus=2 micro_batch=64 accumulate=2)");
  EXPECT_EQ(runs[5].label, "mine");

  std::vector<RunMetrics> same(2);
  same[0].path = same[1].path = "m.jsonl";
  LabelRuns(&same);
  EXPECT_EQ(same[0].label, "m #1");
  EXPECT_EQ(same[1].label, "m #2");
}

}  // namespace
}  // namespace trainc::viz
