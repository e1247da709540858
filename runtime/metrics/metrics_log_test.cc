#include "runtime/metrics/metrics_log.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(MetricsLogTest, RecordIsOneJsonObject) {
  MetricsRecord r{"train", 12, 1718000000.25};
  r.info = {{"epoch", int64_t{1}}, {"model", std::string("m\"x")}};
  r.scalars = {{"loss", 0.61}, {"lr", 1e-3}, {"bad", NAN}};
  const std::string line = MetricsRecordJson(r);
  EXPECT_EQ(line,
            "{\"kind\":\"train\",\"step\":12,\"time\":1718000000.25,"
            "\"epoch\":1,\"model\":\"m\\\"x\",\"loss\":0.61,\"lr\":0.001,"
            "\"bad\":null}");
  auto v = ParseJson(line);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->Find("step")->integer_value(), 12);
  EXPECT_TRUE(v->Find("bad")->is_null());
}

TEST(MetricsLogTest, JsonTextIsWrittenAsIs) {
  // The run record's "plan" (runtime/trace/plan_identity.h): an object.
  MetricsRecord r{"run", 0, 0};
  r.info = {{"plan", JsonText{"{\"hash\": \"ab\", \"overrides\": [[\"steps\", \"6\"]]}"}}};
  const std::string line = MetricsRecordJson(r);
  EXPECT_EQ(line,
            "{\"kind\":\"run\",\"step\":0,\"time\":0,"
            "\"plan\":{\"hash\": \"ab\", \"overrides\": [[\"steps\", \"6\"]]}}");
  auto v = ParseJson(line);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->Find("plan")->is_object());
}

TEST(MetricsLogTest, NumbersKeepTheirPrecision) {
  // Scalars: 10 significant digits, which give back every float32 exactly
  // (what TensorBoard keeps); descriptive numbers and times: exact.
  for (double x : {0.1, 1.0 / 3, 2.718281828459045, 1e-300, 185.84063600000002,
                   static_cast<double>(2.3124148845672607f)}) {
    MetricsRecord r{"train", 1, 1795365433.476209};
    r.info = {{"exact", x}};
    r.scalars = {{"x", x}};
    auto v = ParseJson(MetricsRecordJson(r));
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->Find("exact")->number_value(), x);
    EXPECT_EQ(v->Find("time")->number_value(), 1795365433.476209);
    EXPECT_NEAR(v->Find("x")->number_value(), x, 1e-9 * x);
    EXPECT_EQ(static_cast<float>(v->Find("x")->number_value()), static_cast<float>(x));
  }
  MetricsRecord r{"train", 1, 0};
  r.info = {{"epoch", int64_t{2}}};
  r.scalars = {{"lr", 0.0}, {"samples_per_s", 17205.0}, {"step_ms", 185.84063600000002}};
  EXPECT_EQ(MetricsRecordJson(r),
            "{\"kind\":\"train\",\"step\":1,\"time\":0,\"epoch\":2,\"lr\":0.0,"
            "\"samples_per_s\":17205.0,\"step_ms\":185.840636}");
}

TEST(MetricsLogTest, EachLineIsOnDiskOnceWritten) {
  const std::string path = TmpDir() + "/sub/dir/m.metrics.jsonl";
  std::filesystem::remove_all(TmpDir() + "/sub");
  MetricsLogOptions o;
  o.jsonl_path = path;
  auto log = MetricsLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  for (int step = 1; step <= 3; ++step) {
    MetricsRecord r{"train", step, 0};
    r.scalars = {{"loss", 1.0 / step}};
    ASSERT_TRUE((*log)->Write(r).ok());
    // Read while the log is still open: nothing waits in a buffer.
    std::vector<std::string> lines =
        absl::StrSplit(ReadAll(path), '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), static_cast<size_t>(step));
    EXPECT_TRUE(ParseJson(lines.back()).ok()) << lines.back();
  }
  log->reset();

  // A fresh run starts the file again; a resumed one appends.
  o.append = true;
  ASSERT_TRUE((*MetricsLog::Open(o))->Write({"eval", 4, 0}).ok());
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ReadAll(path), '\n', absl::SkipEmpty())).size(), 4u);
  o.append = false;
  ASSERT_TRUE((*MetricsLog::Open(o))->Write({"run", 0, 0}).ok());
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(ReadAll(path), '\n', absl::SkipEmpty())).size(), 1u);
}

TEST(MetricsLogTest, TensorboardGetsTheScalarsOnly) {
  const std::string dir = TmpDir() + "/tb_only";
  std::filesystem::remove_all(dir);
  MetricsLogOptions o;
  o.tensorboard_dir = dir;
  auto log = MetricsLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  const std::string path = (*log)->tensorboard_path();
  ASSERT_FALSE(path.empty());
  const auto size0 = std::filesystem::file_size(path);  // file_version event
  EXPECT_GT(size0, 0u);
  MetricsRecord run{"run", 0, 0};
  run.info = {{"model", std::string("m")}};
  ASSERT_TRUE((*log)->Write(run).ok());
  EXPECT_EQ(std::filesystem::file_size(path), size0);  // no scalars, no event
  MetricsRecord r{"eval", 5, 0};
  r.scalars = {{"loss", 0.5}};
  ASSERT_TRUE((*log)->Write(r).ok());
  const std::string bytes = ReadAll(path);
  EXPECT_NE(bytes.find("eval/loss"), std::string::npos);
}

TEST(MetricsLogTest, DefaultPathIsBesideTheCheckpoint) {
  EXPECT_EQ(DefaultMetricsPath("model.safetensors"), "model.metrics.jsonl");
  EXPECT_EQ(DefaultMetricsPath("out/gpt.safetensors"), "out/gpt.metrics.jsonl");
  EXPECT_EQ(DefaultMetricsPath("out/ckpt"), "out/ckpt.metrics.jsonl");
  EXPECT_EQ(DefaultMetricsPath("ckpts/"), "ckpts/metrics.jsonl");
  EXPECT_EQ(DefaultMetricsPath(TmpDir()), TmpDir() + "/metrics.jsonl");
  EXPECT_EQ(DefaultMetricsPath(""), "");
}

}  // namespace
}  // namespace trainc
