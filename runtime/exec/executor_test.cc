// The executor against a double-precision reference of the same MLP step
// (runtime/exec/testing/test_plans.h), on the CPU device and on AsyncTestDevice,
// whose streams run asynchronously with real events: there a missing event
// wait gives wrong numbers or a span out of stream order, as it would on a
// GPU. A rank of a larger world is played with MirrorCommunicator (every
// rank holds the same micro-batches).
#include "runtime/exec/executor.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/testing/async_test_device.h"
#include "runtime/exec/testing/test_plans.h"
#include "runtime/trace/tracer.h"

namespace trainc {
namespace {

using testing::AsyncTestDevice;
using testing::AsyncTestDeviceOptions;
using testing::MirrorCommunicator;

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

enum class DeviceKind { kCpu, kAsync };

std::string KindName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return info.param == DeviceKind::kCpu ? "Cpu" : "Async";
}

// How long each mirrored collective takes: work that does not wait for one
// reads its input unreduced.
constexpr absl::Duration kCommLatency = absl::Milliseconds(10);

struct RunSetup {
  ExecutorOptions exec;
  DeviceKind device = DeviceKind::kCpu;
  AsyncTestDeviceOptions async;
  Tracer* tracer = nullptr;
};

// Runs `steps` steps of `options`' plan on one rank and checks every step
// against the reference; returns the final parameters. With world_size > 1
// the rank plays rank 0 of a world whose ranks all hold its micro-batches,
// so the reference sees world_size copies of them.
MlpParams RunAndCompare(const MlpPlanOptions& options, int steps,
                        const RunSetup& setup = {}) {
  const Plan plan = MakeMlpPlan(options);
  const int world = static_cast<int>(options.world_size);
  const MlpParams init = RandomMlpParams(options.dims, 7);
  MlpReference reference(options.dims, options.optimizer, init);
  std::unique_ptr<Device> device;
  AsyncTestDevice* async = nullptr;
  if (setup.device == DeviceKind::kAsync) {
    auto owned = std::make_unique<AsyncTestDevice>(setup.async);
    async = owned.get();
    device = std::move(owned);
  } else {
    device = std::make_unique<CpuDevice>();
  }
  std::unique_ptr<MirrorCommunicator> comm;
  if (world > 1) {
    comm = std::make_unique<MirrorCommunicator>(world, kCommLatency, async);
  }
  Executor executor(plan, device.get(), comm.get(), setup.tracer, setup.exec);
  const absl::Status prepared = executor.Prepare();
  if (!prepared.ok()) {
    ADD_FAILURE() << prepared;
    return {};
  }
  EXPECT_TRUE(UploadMlpParams(plan, init, *device).ok());
  for (int step = 1; step <= steps; ++step) {
    const std::vector<MlpBatch> batches = RandomBatches(
        options.dims, options.micro_batch, options.accumulate, 100 + step);
    std::vector<MlpBatch> global;
    for (int r = 0; r < world; ++r) {
      global.insert(global.end(), batches.begin(), batches.end());
    }
    VectorBatchSource source(batches);
    const StepState state{step, options.optimizer.lr};
    absl::StatusOr<double> loss = executor.RunStep(state, source);
    if (!loss.ok()) {
      ADD_FAILURE() << "step " << step << ": " << loss.status();
      return {};
    }
    const double want_loss = reference.Step(state, global);
    EXPECT_NEAR(*loss * world, want_loss, 1e-5 * std::fabs(want_loss))
        << "step " << step;
    absl::StatusOr<MlpParams> params = DownloadMlpParams(plan, *device);
    if (!params.ok()) {
      ADD_FAILURE() << params.status();
      return {};
    }
    ExpectParamsNear(*params, reference.params(), 2e-6);
    if (::testing::Test::HasFatalFailure()) return {};
  }
  if (async != nullptr) {
    EXPECT_THAT(async->violations(), ::testing::IsEmpty());
  }
  return *DownloadMlpParams(plan, *device);
}

// The reference tests, on the CPU device and on the asynchronous one.
class ExecutorOnDeviceTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  RunSetup Setup(ExecutorOptions exec = {}) const {
    RunSetup setup;
    setup.exec = exec;
    setup.device = GetParam();
    return setup;
  }
};

INSTANTIATE_TEST_SUITE_P(Devices, ExecutorOnDeviceTest,
                         ::testing::Values(DeviceKind::kCpu,
                                           DeviceKind::kAsync),
                         KindName);

TEST_P(ExecutorOnDeviceTest, AdamWOneBucketMatchesReference) {
  MlpPlanOptions options;
  RunAndCompare(options, 3, Setup());
}

TEST_P(ExecutorOnDeviceTest, AccumulateWithBucketsAndSgdNesterovMatchesReference) {
  MlpPlanOptions options;
  options.accumulate = 3;
  options.layers_per_bucket = 1;
  options.optimizer.kind = OptimizerKind::kSgd;
  options.optimizer.lr = 0.05;
  options.optimizer.momentum = 0.9;
  options.optimizer.nesterov = true;
  options.optimizer.weight_decay = 0.01;
  RunAndCompare(options, 3, Setup());
}

TEST_P(ExecutorOnDeviceTest, PlainSgdNeedsNoState) {
  MlpPlanOptions options;
  options.optimizer.kind = OptimizerKind::kSgd;
  options.optimizer.lr = 0.1;
  options.optimizer.momentum = 0;
  options.optimizer.weight_decay = 0;
  RunAndCompare(options, 2, Setup());
}

TEST_P(ExecutorOnDeviceTest, DeterministicAccumulateMatchesReference) {
  MlpPlanOptions options;
  options.accumulate = 3;
  options.layers_per_bucket = 2;
  options.deterministic = true;
  RunAndCompare(options, 2, Setup());
}

// Bucket all-reduces that do work (and take time): each must wait for its
// bucket's last gradient, each optimizer for its all-reduce.
TEST_P(ExecutorOnDeviceTest, WorldOfTwoWithBucketsMatchesReference) {
  MlpPlanOptions options;
  options.world_size = 2;
  options.accumulate = 2;
  options.layers_per_bucket = 1;
  RunAndCompare(options, 3, Setup());
}

// The deterministic all-reduce: all-gather of every slot, then an ordered
// sum, both on the comm stream.
TEST_P(ExecutorOnDeviceTest, DeterministicWorldOfTwoMatchesReference) {
  MlpPlanOptions options;
  options.world_size = 2;
  options.accumulate = 2;
  options.layers_per_bucket = 2;
  options.deterministic = true;
  RunAndCompare(options, 3, Setup());
}

TEST_P(ExecutorOnDeviceTest, OverlapOffGivesTheSameBits) {
  MlpPlanOptions options;
  options.accumulate = 2;
  options.layers_per_bucket = 1;
  options.deterministic = true;  // the all-reduces do work on one rank too
  const MlpParams on = RunAndCompare(options, 2, Setup({/*overlap=*/true}));
  const MlpParams off = RunAndCompare(options, 2, Setup({/*overlap=*/false}));
  ExpectParamsEqual(on, off);
}

TEST_P(ExecutorOnDeviceTest, OverlapOffWorldOfTwoMatchesReference) {
  MlpPlanOptions options;
  options.world_size = 2;
  options.accumulate = 2;
  options.layers_per_bucket = 1;
  const MlpParams on = RunAndCompare(options, 2, Setup({/*overlap=*/true}));
  const MlpParams off = RunAndCompare(options, 2, Setup({/*overlap=*/false}));
  ExpectParamsEqual(on, off);
}

TEST_P(ExecutorOnDeviceTest, BadLabelFailsTheStepWithoutHanging) {
  MlpPlanOptions options;
  options.layers_per_bucket = 1;
  options.deterministic = true;
  options.accumulate = 2;
  const Plan plan = MakeMlpPlan(options);
  std::unique_ptr<Device> device;
  if (GetParam() == DeviceKind::kAsync) {
    device = std::make_unique<AsyncTestDevice>();
  } else {
    device = std::make_unique<CpuDevice>();
  }
  Executor executor(plan, device.get(), nullptr);
  ASSERT_TRUE(executor.Prepare().ok());
  std::vector<MlpBatch> batches = RandomBatches(options.dims, 4, 2, 3);
  batches[1].label[0] = 99;
  VectorBatchSource source(batches);
  const absl::StatusOr<double> loss = executor.RunStep({1, 1e-3}, source);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument)
      << loss.status();
}

// Where each instruction actually ran on its stream (AsyncTestDevice times
// work on the stream, like CUDA events), checked against the plan: every
// instruction that waits on an event began after the instruction that
// records it ended; with overlap off, no all-reduce began before the last
// backward instruction of its step ended (the executor's hold). Returns how
// many event waits were checked.
int ExpectStreamOrder(const Plan& plan, const std::vector<TraceSpan>& spans,
                      bool overlap) {
  std::map<std::pair<int64_t, int>, TraceSpan> by_step_instr;
  std::map<int64_t, int64_t> last_backward_end;
  for (const TraceSpan& s : spans) {
    by_step_instr[{s.step, s.instr}] = s;
    if (plan.instructions[s.instr].phase == Phase::kBackward) {
      int64_t& end = last_backward_end[s.step];
      end = std::max(end, s.end_ns);
    }
  }
  std::map<int, int> recorder;  // event -> instruction (once per step)
  for (const Instruction& instr : plan.instructions) {
    for (int e : instr.record_events) recorder[e] = instr.id;
  }
  int checked = 0;
  for (const TraceSpan& s : spans) {
    const Instruction& waiter = plan.instructions[s.instr];
    if (waiter.op == "load_batch") continue;  // timed on the host
    for (int e : waiter.wait_events) {
      auto r = by_step_instr.find({s.step, recorder.at(e)});
      if (r == by_step_instr.end()) continue;  // the recorder did no work
      const Instruction& rec = plan.instructions[r->second.instr];
      EXPECT_GE(s.begin_ns, r->second.end_ns)
          << "step " << s.step << ": \"" << waiter.label << "\" began "
          << (r->second.end_ns - s.begin_ns) / 1000 << " us before \""
          << rec.label << "\" (which records event " << e
          << " it waits for) ended";
      ++checked;
    }
    if (!overlap && waiter.op == "all_reduce") {
      EXPECT_GE(s.begin_ns, last_backward_end[s.step])
          << "step " << s.step << ": with overlap off, \"" << waiter.label
          << "\" began " << (last_backward_end[s.step] - s.begin_ns) / 1000
          << " us before the backward pass ended";
    }
  }
  return checked;
}

struct OrderCase {
  std::string name;
  int64_t world_size;
  bool deterministic;
  bool overlap;
};

class ExecutorStreamOrderTest : public ::testing::TestWithParam<OrderCase> {};

INSTANTIATE_TEST_SUITE_P(
    Plans, ExecutorStreamOrderTest,
    ::testing::Values(OrderCase{"TwoRanks", 2, false, true},
                      OrderCase{"TwoRanksOverlapOff", 2, false, false},
                      OrderCase{"TwoRanksDeterministic", 2, true, true},
                      OrderCase{"TwoRanksDeterministicOverlapOff", 2, true,
                                false},
                      OrderCase{"OneRankDeterministicOverlapOff", 1, true,
                                false}),
    [](const ::testing::TestParamInfo<OrderCase>& info) {
      return info.param.name;
    });

TEST_P(ExecutorStreamOrderTest, EveryWaitHeldOnTheStreams) {
  const OrderCase& c = GetParam();
  MlpPlanOptions options;
  options.world_size = c.world_size;
  options.accumulate = 2;
  options.layers_per_bucket = 1;  // three buckets
  options.deterministic = c.deterministic;
  const Plan plan = MakeMlpPlan(options);
  Tracer tracer(/*rank=*/0);
  RunSetup setup;
  setup.device = DeviceKind::kAsync;
  setup.exec.overlap = c.overlap;
  setup.tracer = &tracer;
  RunAndCompare(options, 2, setup);
  const std::vector<TraceSpan> spans = tracer.spans();
  ASSERT_FALSE(spans.empty());
  // Per step: three all-reduces wait for their gradients, three optimizers
  // for their all-reduces.
  EXPECT_EQ(ExpectStreamOrder(plan, spans, c.overlap), 2 * 6);
}

// On the asynchronous device the comm stream really runs beside compute:
// with overlap on, the first bucket's all-reduce starts while the backward
// pass is still running (5 ms per kernel leaves it tens of ms to start).
TEST(ExecutorAsyncTest, AllReduceOverlapsTheBackwardPass) {
  MlpPlanOptions options;
  options.world_size = 2;
  options.layers_per_bucket = 1;
  const Plan plan = MakeMlpPlan(options);
  Tracer tracer(/*rank=*/0);
  RunSetup setup;
  setup.device = DeviceKind::kAsync;
  setup.async.compute_latency = absl::Milliseconds(5);
  setup.tracer = &tracer;
  RunAndCompare(options, 1, setup);
  int64_t first_all_reduce = INT64_MAX, last_backward = 0;
  for (const TraceSpan& s : tracer.spans()) {
    const Instruction& instr = plan.instructions[s.instr];
    if (instr.op == "all_reduce") {
      first_all_reduce = std::min(first_all_reduce, s.begin_ns);
    } else if (instr.phase == Phase::kBackward) {
      last_backward = std::max(last_backward, s.end_ns);
    }
  }
  EXPECT_LT(first_all_reduce, last_backward);
}

// The device itself: kernels complete after Submit returns, a stream that
// does not wait runs ahead of the other, and a wait on an event never
// recorded is an error (on CUDA it would silently order nothing).
TEST(AsyncTestDeviceTest, StreamsRunAsynchronouslyAndEventsOrderThem) {
  AsyncTestDeviceOptions slow;
  slow.compute_latency = absl::Milliseconds(200);
  AsyncTestDevice device(slow);
  ASSERT_TRUE(device.AllocateArena(64).ok());
  ASSERT_TRUE(device.ResetEvents(2).ok());
  const float* arena = reinterpret_cast<const float*>(device.arena());
  const float one = 1.0f;
  ASSERT_TRUE(device.Upload(0, &one, 4).ok());
  EXPECT_EQ(arena[0], 0.0f) << "the upload should still be on its way";
  float early = -1.0f, late = -1.0f;
  ASSERT_TRUE(device.Submit(Stream::kComm, [&] {
    early = arena[0];
    return absl::OkStatus();
  }).ok());
  ASSERT_TRUE(device.RecordEvent(Stream::kCompute, 0).ok());
  ASSERT_TRUE(device.WaitEvent(Stream::kComm, 0).ok());
  ASSERT_TRUE(device.Submit(Stream::kComm, [&] {
    late = arena[0];
    return absl::OkStatus();
  }).ok());
  ASSERT_TRUE(device.Synchronize().ok());
  EXPECT_EQ(early, 0.0f) << "the comm stream did not run ahead of compute";
  EXPECT_EQ(late, 1.0f) << "the wait did not hold the comm stream";
  EXPECT_THAT(device.violations(), ::testing::IsEmpty());

  // Event 1 was never recorded this step.
  const absl::Status unrecorded = device.WaitEvent(Stream::kComm, 1);
  EXPECT_EQ(unrecorded.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(device.violations(), ::testing::SizeIs(1));
  // Kernels are launched from a compute submission only.
  AsyncTestDevice other;
  Plan plan;
  Instruction relu;
  relu.op = "relu";
  EXPECT_FALSE(other.RunKernel(plan, relu, {}).ok());
  EXPECT_THAT(other.violations(), ::testing::SizeIs(1));
  // The mirror communicator is called from the comm stream only.
  AsyncTestDevice third;
  MirrorCommunicator comm(2, absl::ZeroDuration(), &third);
  float x = 1.0f;
  EXPECT_FALSE(comm.AllReduceSum(&x, 1, nullptr).ok());
  ASSERT_TRUE(third.Submit(Stream::kComm, [&] {
    return comm.AllReduceSum(&x, 1, nullptr);
  }).ok());
  ASSERT_TRUE(third.Synchronize().ok());
  EXPECT_EQ(x, 2.0f);
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

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

// Every parameter and optimizer-state byte of `plan`'s arena.
std::vector<float> TrainedState(const Plan& plan, Device& device) {
  std::vector<float> all;
  for (const Buffer& b : plan.buffers) {
    if (b.kind != BufferKind::kParameterSpan && b.kind != BufferKind::kStateSpan) continue;
    std::vector<float> v(b.bytes / 4);
    EXPECT_TRUE(device.Download(b.offset, v.data(), b.bytes).ok());
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// skip_nonfinite (and clipping): a step whose reduced gradient holds a NaN
// leaves the weights and the optimizer state as they were, bit for bit;
// the next finite step trains as usual.
TEST(ExecutorSkipTest, NonFiniteGradientLeavesWeightsAndState) {
  for (const double clip : {0.0, 1.0}) {
    TrainSpec spec = testing::MlpSpec(6, {5}, 3, 1, 4, 1);
    spec.train.skip_nonfinite = clip == 0;
    spec.train.clip_grad_norm = clip;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    CpuDevice device;
    Executor executor(*plan, &device, nullptr, nullptr, {});
    ASSERT_TRUE(executor.Prepare().ok());
    std::vector<float> init;
    for (int id : plan->parameter_buffers) {
      const Buffer& b = plan->buffers[id];
      std::vector<float> v(b.bytes / 4);
      for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>((i * 7 + id) % 11) - 0.5f;
      ASSERT_TRUE(device.Upload(b.offset, v.data(), b.bytes).ok());
    }
    std::vector<MlpBatch> good = RandomBatches({6, 5, 3}, 4, 1, 3);
    VectorBatchSource first(good);
    ASSERT_TRUE(executor.RunStep(StepState{1, 1e-2}, first).ok());
    const std::vector<float> before = TrainedState(*plan, device);

    std::vector<MlpBatch> bad = good;
    bad[0].x[5] = std::numeric_limits<float>::quiet_NaN();
    VectorBatchSource poisoned(bad);
    ASSERT_TRUE(executor.RunStep(StepState{2, 1e-2}, poisoned).ok());
    const std::vector<float> after = TrainedState(*plan, device);
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      ASSERT_EQ(before[i], after[i]) << "clip " << clip << ": value " << i << " changed";
    }
    VectorBatchSource again(good);
    ASSERT_TRUE(executor.RunStep(StepState{3, 1e-2}, again).ok());
    const std::vector<float> trained = TrainedState(*plan, device);
    EXPECT_NE(trained, before) << "clip " << clip;
    for (float v : trained) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace trainc
