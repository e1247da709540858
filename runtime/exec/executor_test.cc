// The executor on the CPU device, one rank, against a double-precision
// reference of the same MLP step (runtime/exec/test_plans.h).
#include "runtime/exec/executor.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/test_plans.h"
#include "runtime/trace/tracer.h"

namespace trainc {
namespace {

using testing::DownloadMlpParams;
using testing::MakeMlpPlan;
using testing::MlpBatch;
using testing::MlpParams;
using testing::MlpPlanOptions;
using testing::MlpReference;
using testing::RandomBatches;
using testing::RandomMlpParams;
using testing::UploadMlpParams;
using testing::VectorBatchSource;

void ExpectParamsNear(const MlpParams& got, const MlpParams& want,
                      double tol) {
  ASSERT_EQ(got.w.size(), want.w.size());
  for (size_t l = 1; l < got.w.size(); ++l) {
    for (size_t i = 0; i < got.w[l].size(); ++i) {
      ASSERT_NEAR(got.w[l][i], want.w[l][i], tol) << "w" << l << "[" << i << "]";
    }
    for (size_t i = 0; i < got.b[l].size(); ++i) {
      ASSERT_NEAR(got.b[l][i], want.b[l][i], tol) << "b" << l << "[" << i << "]";
    }
  }
}

void ExpectParamsEqual(const MlpParams& a, const MlpParams& b) {
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.b, b.b);
}

// Runs `steps` steps of `options`' plan on one rank and checks every step
// against the reference; returns the final parameters.
MlpParams RunAndCompare(const MlpPlanOptions& options, int steps,
                        ExecutorOptions exec_options = {}) {
  const Plan plan = MakeMlpPlan(options);
  const MlpParams init = RandomMlpParams(options.dims, 7);
  MlpReference reference(options.dims, options.optimizer, init);
  CpuDevice device;
  Executor executor(plan, &device, nullptr, nullptr, exec_options);
  EXPECT_TRUE(executor.Prepare().ok());
  EXPECT_TRUE(UploadMlpParams(plan, init, device).ok());
  for (int step = 1; step <= steps; ++step) {
    const std::vector<MlpBatch> batches = RandomBatches(
        options.dims, options.micro_batch, options.accumulate, 100 + step);
    VectorBatchSource source(batches);
    const StepState state{step, options.optimizer.lr};
    absl::StatusOr<double> loss = executor.RunStep(state, source);
    EXPECT_TRUE(loss.ok()) << loss.status();
    const double want_loss = reference.Step(state, batches);
    EXPECT_NEAR(*loss, want_loss, 1e-5 * std::fabs(want_loss)) << "step " << step;
    absl::StatusOr<MlpParams> params = DownloadMlpParams(plan, device);
    EXPECT_TRUE(params.ok());
    ExpectParamsNear(*params, reference.params(), 2e-6);
  }
  return *DownloadMlpParams(plan, device);
}

TEST(ExecutorTest, AdamWOneBucketMatchesReference) {
  MlpPlanOptions options;
  RunAndCompare(options, 3);
}

TEST(ExecutorTest, AccumulateWithBucketsAndSgdNesterovMatchesReference) {
  MlpPlanOptions options;
  options.accumulate = 3;
  options.layers_per_bucket = 1;
  options.optimizer.kind = "sgd";
  options.optimizer.lr = 0.05;
  options.optimizer.momentum = 0.9;
  options.optimizer.nesterov = true;
  options.optimizer.weight_decay = 0.01;
  RunAndCompare(options, 3);
}

TEST(ExecutorTest, PlainSgdNeedsNoState) {
  MlpPlanOptions options;
  options.optimizer.kind = "sgd";
  options.optimizer.lr = 0.1;
  options.optimizer.momentum = 0;
  options.optimizer.weight_decay = 0;
  RunAndCompare(options, 2);
}

TEST(ExecutorTest, DeterministicAccumulateMatchesReference) {
  MlpPlanOptions options;
  options.accumulate = 3;
  options.layers_per_bucket = 2;
  options.deterministic = true;
  RunAndCompare(options, 2);
}

TEST(ExecutorTest, OverlapOffGivesTheSameBits) {
  MlpPlanOptions options;
  options.accumulate = 2;
  options.layers_per_bucket = 1;
  options.deterministic = true;  // the all-reduces do work on one rank too
  const MlpParams on = RunAndCompare(options, 2, {/*overlap=*/true});
  const MlpParams off = RunAndCompare(options, 2, {/*overlap=*/false});
  ExpectParamsEqual(on, off);
}

TEST(ExecutorTest, TracesEveryInstructionOnItsStream) {
  MlpPlanOptions options;
  options.accumulate = 2;
  options.layers_per_bucket = 1;
  options.deterministic = true;
  const Plan plan = MakeMlpPlan(options);
  CpuDevice device;
  Tracer tracer(/*rank=*/0);
  Executor executor(plan, &device, nullptr, &tracer);
  ASSERT_TRUE(executor.Prepare().ok());
  VectorBatchSource source(RandomBatches(options.dims, 4, 2, 1));
  ASSERT_TRUE(executor.RunStep({1, 1e-3}, source).ok());
  ASSERT_TRUE(executor.RunStep({2, 1e-3}, source).ok());
  const std::vector<TraceSpan> spans = tracer.spans();
  EXPECT_EQ(spans.size(), 2 * plan.instructions.size());
  EXPECT_EQ(tracer.steps_traced(), 2);
  for (const TraceSpan& s : spans) {
    EXPECT_EQ(s.stream, plan.instructions[s.instr].stream);
    EXPECT_LE(s.begin_ns, s.end_ns);
    EXPECT_GE(s.begin_ns, tracer.job_start_ns());
  }
  const std::string json = tracer.EventsJson(plan);
  EXPECT_NE(json.find("\"name\": \"all_reduce bucket 0\", \"cat\": \"comm\""),
            std::string::npos);
  EXPECT_NE(json.find("\"tid\": 1"), std::string::npos);
}

TEST(ExecutorTest, PrepareRejectsUnknownOpsAndBadEvents) {
  MlpPlanOptions options;
  Plan plan = MakeMlpPlan(options);
  plan.instructions[3].op = "softmax_of_doom";
  {
    CpuDevice device;
    Executor executor(plan, &device, nullptr);
    const absl::Status status = executor.Prepare();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("softmax_of_doom"), std::string::npos)
        << status;
  }
  plan = MakeMlpPlan(options);
  plan.instructions[2].wait_events.push_back(plan.num_events);
  {
    CpuDevice device;
    Executor executor(plan, &device, nullptr);
    EXPECT_EQ(executor.Prepare().code(), absl::StatusCode::kInvalidArgument);
  }
  plan = MakeMlpPlan(options);
  plan.world_size = 2;  // and no communicator
  {
    CpuDevice device;
    Executor executor(plan, &device, nullptr);
    EXPECT_EQ(executor.Prepare().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ExecutorTest, BadLabelFailsTheStepWithoutHanging) {
  MlpPlanOptions options;
  options.layers_per_bucket = 1;
  options.deterministic = true;
  options.accumulate = 2;
  const Plan plan = MakeMlpPlan(options);
  CpuDevice device;
  Executor executor(plan, &device, nullptr);
  ASSERT_TRUE(executor.Prepare().ok());
  std::vector<MlpBatch> batches = RandomBatches(options.dims, 4, 2, 3);
  batches[1].label[0] = 99;
  VectorBatchSource source(batches);
  const absl::StatusOr<double> loss = executor.RunStep({1, 1e-3}, source);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainc
