#include "runtime/trace/plan_identity.h"

#include <fstream>
#include <string>

#include "compiler/plan/plan_io.h"
#include "compiler/util/fnv.h"
#include "gtest/gtest.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

Plan SmallPlan() {
  Plan plan;
  plan.model = "m";
  plan.source = "a/m.train";
  plan.world_size = 2;
  plan.micro_batch = 16;
  plan.accumulate = 1;
  plan.global_batch = 32;
  plan.steps = 1000;
  Buffer w;
  w.name = "w";
  w.shape = {3, 4};
  w.bytes = 48;
  plan.buffers = {w};
  plan.parameter_buffers = {0};
  return plan;
}

std::string Setting(const NamedValues& settings, const std::string& name) {
  for (const auto& [n, v] : settings) {
    if (n == name) return v;
  }
  return "(none)";
}

TEST(PlanIdentityTest, TheHashIsThePlansAsHexAndTheTextHashIsFnv1a) {
  Plan a = SmallPlan();
  Plan b = a;
  b.source = "elsewhere/m.train";
  EXPECT_EQ(IdentifyPlan(a, "", {}).hash, HashHex(PlanHash(b)));  // compiler/plan/plan_io.h
  EXPECT_EQ(IdentifyPlan(a, "", {}).hash.size(), 16u);
  b.micro_batch = 4;
  EXPECT_NE(IdentifyPlan(a, "", {}).hash, IdentifyPlan(b, "", {}).hash);
  // FNV-1a's published value: the same on every machine.
  EXPECT_EQ(TextHash(""), "cbf29ce484222325");
  EXPECT_EQ(TextHash("a"), "af63dc4c8601ec8c");
}

TEST(PlanIdentityTest, SettingsNameTheBatchArithmeticAndTheModelSize) {
  const NamedValues s = PlanSettings(SmallPlan());
  EXPECT_EQ(Setting(s, "model"), "m");
  EXPECT_EQ(Setting(s, "gpus"), "2");
  EXPECT_EQ(Setting(s, "micro_batch"), "16");
  EXPECT_EQ(Setting(s, "global_batch"), "32");
  EXPECT_EQ(Setting(s, "steps"), "1000");
  EXPECT_EQ(Setting(s, "parameters"), "12");
}

TEST(PlanIdentityTest, JsonRoundTrips) {
  PlanIdentity id = IdentifyPlan(SmallPlan(), "plan.txt",
                                 {{"micro_batch", "4"}, {"checkpoint_dir", "my \"dir\""}});
  id.device = "cpu";
  id.overlap = false;
  EXPECT_EQ(id.source_hash, "");  // a plan file: its hash is the plan's
  absl::StatusOr<JsonValue> v = ParseJson(PlanIdentityJson(id));
  ASSERT_TRUE(v.ok()) << v.status() << PlanIdentityJson(id);
  absl::StatusOr<PlanIdentity> back = PlanIdentityFromJson(*v);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->hash, id.hash);
  EXPECT_EQ(back->source, "plan.txt");
  EXPECT_EQ(back->overrides, id.overrides);
  EXPECT_EQ(back->device, "cpu");
  EXPECT_FALSE(back->overlap);
  EXPECT_EQ(back->settings, id.settings);
  EXPECT_EQ(OverridesText(id.overrides), "--micro_batch 4 --checkpoint_dir \"my \\\"dir\\\"\"");

  absl::StatusOr<JsonValue> bad = ParseJson("{\"hash\": \"ab\", \"overrides\": [[\"steps\", 6]]}");
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(PlanIdentityFromJson(*bad).status().message().find("overrides"), std::string::npos);
}

TEST(PlanIdentityTest, ATrainFileIsHashedAsItsText) {
  const std::string path = ::testing::TempDir() + "/m.train";
  std::ofstream(path) << "model m {}\n";
  const PlanIdentity id = IdentifyPlan(SmallPlan(), path, {});
  EXPECT_EQ(id.source_hash, TextHash("model m {}\n"));
}

TEST(PlanIdentityTest, DifferencesNameTheSettingAndBothValues) {
  Plan b = SmallPlan();
  b.micro_batch = 4;
  b.global_batch = 8;
  EXPECT_EQ(SettingDifferences(PlanSettings(b), "the run", PlanSettings(SmallPlan()), "m.train"),
            (std::vector<std::string>{"micro_batch: 4 in the run, 16 in m.train",
                                      "global_batch: 8 in the run, 32 in m.train"}));
}

}  // namespace
}  // namespace trainc
