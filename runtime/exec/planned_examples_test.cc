// The executor on plans the real compiler makes from dsl_examples/*.train:
// the MLP (relu, cross_entropy, adamw), the residual MLP (layernorm, gelu,
// add) and the autoencoder (tanh, mse, sgd with nesterov), each with several
// buckets. Ranks are threads meeting over Gloo.
//
// The promise checked: the split of a global batch into gpus x accumulate
// does not change the result, bit for bit in deterministic mode and within
// float rounding otherwise.
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/testing/planned_plans.h"

namespace trainc {
namespace {

using testing::CompileExample;
using testing::DownloadParameters;
using testing::InitParameters;
using testing::SyntheticBatches;

constexpr int kSteps = 2;

Plan Compile(const std::string& example, int gpus, int accumulate,
             bool deterministic, const std::string& precision = "fp32") {
  absl::StatusOr<Plan> plan = CompileExample(
      example, {{"precision", precision},
                {"gpus", absl::StrCat(gpus)},
                {"micro_batch", "4"},
                {"accumulate", absl::StrCat(accumulate)},
                {"global_batch", absl::StrCat(4 * gpus * accumulate)},
                {"deterministic", deterministic ? "true" : "false"},
                {"bucket_mb", "0.2"},  // several buckets
                {"first_bucket_mb", "0"}});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : Plan();
}

struct Outcome {
  std::vector<std::vector<float>> params;  // per rank, all parameters
  double loss = 0;                         // world sum over all steps
};

Outcome Train(const Plan& plan) {
  const int world = static_cast<int>(plan.world_size);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/planned_",
                                       absl::ToUnixNanos(absl::Now()));
  Outcome out;
  out.params.resize(world);
  std::vector<double> losses(world, 0.0);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.rank = rank;
      gloo.world_size = world;
      gloo.file_store_dir = dir;
      auto comm = GlooCommunicator::Create(gloo);
      ASSERT_TRUE(comm.ok()) << comm.status();
      CpuDevice device;
      Executor executor(plan, &device, comm->get());
      ASSERT_TRUE(executor.Prepare().ok());
      ASSERT_TRUE(InitParameters(plan, device).ok());
      for (int64_t step = 1; step <= kSteps; ++step) {
        SyntheticBatches batches(rank, step);
        absl::StatusOr<double> loss =
            executor.RunStep({step, plan.optimizer.lr}, batches);
        ASSERT_TRUE(loss.ok()) << loss.status();
        ASSERT_TRUE(std::isfinite(*loss));
        losses[rank] += *loss;
      }
      absl::StatusOr<std::vector<float>> params = DownloadParameters(plan, device);
      ASSERT_TRUE(params.ok()) << params.status();
      out.params[rank] = *std::move(params);
    });
  }
  for (std::thread& t : threads) t.join();
  for (double l : losses) out.loss += l;
  return out;
}

class PlannedExamplesTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PlannedExamplesTest, DeterministicIsBitExactAcrossSplits) {
  std::vector<std::vector<float>> results;
  for (auto [gpus, acc] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{4, 1}}) {
    SCOPED_TRACE(absl::StrCat(gpus, " gpus x ", acc, " accumulate"));
    const Plan plan = Compile(GetParam(), gpus, acc, /*deterministic=*/true);
    ASSERT_GT(plan.buckets.size(), 1u);
    const Outcome o = Train(plan);
    for (const auto& p : o.params) ASSERT_TRUE(p == o.params[0]);
    results.push_back(o.params[0]);
  }
  EXPECT_TRUE(results[0] == results[1]);
  EXPECT_TRUE(results[0] == results[2]);
}

// precision = bf16 keeps the promise: each micro-batch's forward and
// backward round the same way whatever the split.
TEST_P(PlannedExamplesTest, DeterministicBf16IsBitExactAcrossSplits) {
  std::vector<std::vector<float>> results;
  for (auto [gpus, acc] : {std::pair{1, 4}, std::pair{4, 1}}) {
    const Plan plan = Compile(GetParam(), gpus, acc, /*deterministic=*/true, "bf16");
    ASSERT_EQ(plan.precision, Precision::kBf16);
    results.push_back(Train(plan).params[0]);
  }
  EXPECT_TRUE(results[0] == results[1]);
  // And bf16 is in effect: the weights differ from the f32 run's.
  const Outcome f32 = Train(Compile(GetParam(), 1, 4, /*deterministic=*/true));
  EXPECT_FALSE(f32.params[0] == results[0]);
}

TEST_P(PlannedExamplesTest, SplitsAgreeWithinRounding) {
  const Outcome one = Train(Compile(GetParam(), 1, 2, false));
  const Outcome two = Train(Compile(GetParam(), 2, 1, false));
  ASSERT_EQ(one.params[0].size(), two.params[0].size());
  EXPECT_TRUE(two.params[0] == two.params[1]);
  double worst = 0;
  for (size_t i = 0; i < one.params[0].size(); ++i) {
    worst = std::max(worst,
                     double(std::fabs(one.params[0][i] - two.params[0][i])));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_NEAR(one.loss, two.loss, 1e-5 * one.loss);
}

INSTANTIATE_TEST_SUITE_P(Examples, PlannedExamplesTest,
                         ::testing::Values("fashion_mlp", "residual_mlp",
                                           "autoencoder_mse"));

}  // namespace
}  // namespace trainc
