// bucket_mb = auto: the planner's search over bucket sizes.
#include "compiler/planner/bucket_search.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/planner/bucketing.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/cost/simulator.h"
#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

TrainSpec Spec(const std::string& file, const Overrides& overrides) {
  FrontendResult result = CompileFile(file, overrides);
  EXPECT_TRUE(result.spec.has_value()) << FormatDiagnostics(result.diagnostics, result.source);
  return *result.spec;
}

double PredictedStepUs(const Plan& plan, const cost::MachineProfile& profile) {
  return cost::SimulateStep(plan, profile).value().step_us;
}

TEST(BucketCandidates, DoubleUpToOneBucketAndIncludeTheFixedSizes) {
  const std::vector<BucketSizes> c = BucketCandidates(3 * kBytesPerMb);
  std::vector<double> sizes;
  for (const BucketSizes& s : c) {
    if (s.first_bucket_mb == 0) sizes.push_back(s.bucket_mb);
    if (s.first_bucket_mb > 0) {
      EXPECT_GE(s.first_bucket_mb, 0.0625);
    }
  }
  EXPECT_EQ(sizes, (std::vector<double>{0.25, 0.5, 1, 2, 4, 25, 100}));
}

TEST(BestCandidate, LeastStepThenFewestBuckets) {
  std::vector<CandidateCost> c(3);
  c[0].step_us = 10, c[0].buckets = 5;
  c[1].step_us = 9, c[1].buckets = 7;
  c[2].step_us = 9, c[2].buckets = 3;
  EXPECT_EQ(BestCandidate(c), 2u);
  c[2].step_us = 9.5;
  EXPECT_EQ(BestCandidate(c), 1u);
}

// auto is never predicted slower than any fixed size it tried, on the
// profile it was costed on, and the summary says why.
TEST(AutoBuckets, NeverWorseThanAFixedSizeAndExplained) {
  const cost::MachineProfile h100 = cost::LoadMachineProfile("h100_nvlink_ib").value();
  for (const char* gpus : {"2", "64"}) {
    SCOPED_TRACE(gpus);
    TrainSpec spec =
        Spec("dsl_examples/fashion_mlp.train", {{"gpus", gpus}, {"bucket_mb", "auto"}});
    ASSERT_TRUE(spec.train.bucket_mb_auto);
    PlanOptions options;
    options.machine = &h100;
    const Plan plan = BuildPlan(spec, options).value();
    const double best = PredictedStepUs(plan, h100);
    int64_t grad_bytes = 0;
    for (const Bucket& b : plan.buckets) grad_bytes += b.bytes;
    for (const BucketSizes& sizes : BucketCandidates(grad_bytes)) {
      TrainSpec fixed = spec;
      fixed.train.bucket_mb_auto = false;
      fixed.train.bucket_mb = sizes.bucket_mb;
      fixed.train.first_bucket_mb = sizes.first_bucket_mb;
      EXPECT_LE(best, PredictedStepUs(BuildPlan(fixed).value(), h100) * (1 + 1e-9))
          << sizes.bucket_mb << " first " << sizes.first_bucket_mb;
    }
    EXPECT_THAT(PlanSummary(plan),
                HasSubstr(absl::StrCat("bucket_mb auto on h100_nvlink_ib x ", gpus, " ranks: ")));
    EXPECT_THAT(plan.bucket_choice, HasSubstr("fixed sizes: 1 MB"));
    EXPECT_THAT(plan.bucket_choice, HasSubstr("25 MB"));
    EXPECT_THAT(plan.bucket_choice, HasSubstr("100 MB"));
  }
}

TEST(AutoBuckets, Gpt2SmallAtLeastAsFastAsOneTwentyFiveAndHundredMb) {
  const cost::MachineProfile h100 = cost::LoadMachineProfile("h100_nvlink_ib").value();
  TrainSpec spec = Spec("dsl_examples/gpt2_small.train", {{"gpus", "64"}, {"bucket_mb", "auto"}});
  PlanOptions options;
  options.machine = &h100;
  const Plan plan = BuildPlan(spec, options).value();
  const double best = PredictedStepUs(plan, h100);
  for (double mb : {1.0, 25.0, 100.0}) {
    TrainSpec fixed = spec;
    fixed.train.bucket_mb_auto = false;
    fixed.train.bucket_mb = mb;
    EXPECT_LE(best, PredictedStepUs(BuildPlan(fixed).value(), h100) * (1 + 1e-9)) << mb;
  }
}

TEST(AutoBuckets, TheProfileComesFromTheToolThenTheFileThenTheDevice) {
  TrainSpec spec = Spec("dsl_examples/fashion_mlp.train", {{"bucket_mb", "auto"}});
  EXPECT_THAT(BuildPlan(spec).value().bucket_choice, HasSubstr("on cpu_loopback x 2"));
  PlanOptions options;
  options.default_machine = "a100_nvlink";
  EXPECT_THAT(BuildPlan(spec, options).value().bucket_choice, HasSubstr("on a100_nvlink x 2"));
  spec.train.machine = "h100_nvlink_ib";
  EXPECT_THAT(BuildPlan(spec, options).value().bucket_choice, HasSubstr("on h100_nvlink_ib"));
  const cost::MachineProfile a100 = cost::LoadMachineProfile("a100_nvlink").value();
  options.machine = &a100;
  EXPECT_THAT(BuildPlan(spec, options).value().bucket_choice, HasSubstr("on a100_nvlink"));
  spec.train.machine = "/no/such.profile";
  options.machine = nullptr;
  absl::StatusOr<Plan> bad = BuildPlan(spec, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("/no/such.profile"));
}

TEST(AutoBuckets, ANumberKeepsTheFixedSizeAndNoReason) {
  const Plan plan = BuildPlan(Spec("dsl_examples/fashion_mlp.train", {})).value();
  EXPECT_TRUE(plan.bucket_choice.empty());
  EXPECT_DOUBLE_EQ(plan.bucket_mb, 0.1);
}

}  // namespace
}  // namespace trainc
