// The executor's step-capture protocol (device.h), checked on the CPU, and
// on a GPU where there is one.
//
// GraphDevice (graph_test_device.h) wraps a CpuDevice and implements
// capture the way a CUDA graph behaves: between BeginCapture and EndCapture
// nothing runs, every call is recorded (an upload records a copy from an
// input slot of its own), reads and Synchronize fail; Replay(state)
// re-issues the recording, with the replay's StepState standing in for the
// device-side step scalars. A captured run must then give exactly the bits
// of an eager run, and the executor must fall back, with the same bits,
// where capturing fails.
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/testing/graph_test_device.h"
#include "runtime/exec/testing/planned_plans.h"
#include "runtime/exec/testing/test_plans.h"
#include "runtime/trace/tracer.h"
#include "compiler/ops/kernel_families.h"

namespace trainc {
namespace {

using testing::DownloadMlpParams;
using testing::GraphDevice;
using testing::MakeMlpPlan;
using testing::MlpBatch;
using testing::MlpParams;
using testing::MlpPlanOptions;
using testing::RandomBatches;
using testing::RandomMlpParams;
using testing::UploadMlpParams;
using testing::VectorBatchSource;

// Gloo's collectives are host calls, so a GraphDevice's recording replays
// them faithfully: this lets the multi-rank protocol run on the CPU.
class ReplayableComm : public Communicator {
 public:
  explicit ReplayableComm(Communicator* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  absl::Status AllReduceSum(float* data, int64_t count, void* s) override {
    return inner_->AllReduceSum(data, count, s);
  }
  absl::Status ReduceScatterSum(float* data, int64_t count, void* s) override {
    return inner_->ReduceScatterSum(data, count, s);
  }
  absl::Status AllGather(const float* in, float* out, int64_t count,
                         void* s) override {
    return inner_->AllGather(in, out, count, s);
  }
  absl::Status Broadcast(float* data, int64_t count, int root,
                         void* s) override {
    return inner_->Broadcast(data, count, root, s);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  bool SupportsCapture() const override { return true; }

 private:
  Communicator* inner_;
};

// One rank whose collectives are no-ops, counting the replays it is asked
// to watch and failing Health() from `fail_after` watches on, as NCCL's
// watchdog does when a replayed collective passes its bound.
class WatchedComm : public Communicator {
 public:
  explicit WatchedComm(int fail_after) : fail_after_(fail_after) {}
  std::string name() const override { return "watched"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllReduceSum(float*, int64_t, void*) override { return absl::OkStatus(); }
  absl::Status ReduceScatterSum(float*, int64_t, void*) override { return absl::OkStatus(); }
  absl::Status AllGather(const float*, float*, int64_t, void*) override {
    return absl::OkStatus();
  }
  absl::Status Broadcast(float*, int64_t, int, void*) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  bool SupportsCapture() const override { return true; }
  absl::Status WatchStream(void*) override {
    ++watched;
    return absl::OkStatus();
  }
  absl::Status Health() override {
    if (watched < fail_after_) return absl::OkStatus();
    return absl::UnavailableError("watched: a collective did not finish; communicator aborted");
  }
  int watched = 0;

 private:
  const int fail_after_;
};

struct Outcome {
  MlpParams params;
  std::vector<double> losses;         // per step
  std::vector<float> eval_logits;     // RunForward after step 3
  CaptureInfo capture;
};

// Steps 1..steps with a learning rate that changes every step; an
// evaluation forward pass (eager, with other data) between steps 3 and 4.
// feed_ahead: each RunStep is given the next step's source.
Outcome Train(const MlpPlanOptions& options, Device& device, int steps,
          Communicator* comm = nullptr, int rank = 0,
          Tracer* trace_step_2 = nullptr, ExecutorOptions exec = {},
          bool feed_ahead = true) {
  const Plan plan = MakeMlpPlan(options);
  Executor executor(plan, &device, comm, nullptr, exec);
  Outcome run;
  absl::Status status = executor.Prepare();
  EXPECT_TRUE(status.ok()) << status;
  status = UploadMlpParams(plan, RandomMlpParams(options.dims, 3), device);
  EXPECT_TRUE(status.ok()) << status;
  const int64_t world = options.world_size, acc = options.accumulate;
  std::vector<VectorBatchSource> sources;
  for (int step = 1; step <= steps; ++step) {
    const std::vector<MlpBatch> global = RandomBatches(
        options.dims, options.micro_batch, world * acc, 200 + step);
    sources.emplace_back(std::vector<MlpBatch>(global.begin() + rank * acc,
                                               global.begin() + (rank + 1) * acc));
  }
  for (int step = 1; step <= steps; ++step) {
    VectorBatchSource& source = sources[step - 1];
    BatchSource* next = feed_ahead && step < steps ? &sources[step] : nullptr;
    executor.set_tracer(step == 2 ? trace_step_2 : nullptr);
    const StepState state{step, options.optimizer.lr / step};
    absl::StatusOr<double> loss = executor.RunStep(state, source, next);
    EXPECT_TRUE(loss.ok()) << loss.status();
    run.losses.push_back(loss.ok() ? *loss : -1);
    if (step == 3) {
      VectorBatchSource eval(RandomBatches(options.dims, options.micro_batch,
                                           1, 999));
      status = executor.RunForward(eval);
      EXPECT_TRUE(status.ok()) << status;
      // The last linear's output: the logits of the eval batch.
      const Buffer* logits = nullptr;
      for (const Instruction& instr : plan.instructions) {
        if (instr.op == "cross_entropy" && instr.micro_step == 0) {
          logits = &plan.buffers[instr.inputs[0]];
        }
      }
      EXPECT_NE(logits, nullptr);
      run.eval_logits.resize(logits->bytes / 4);
      EXPECT_TRUE(device
                      .Download(logits->offset, run.eval_logits.data(),
                                logits->bytes)
                      .ok());
    }
  }
  run.params = *DownloadMlpParams(plan, device);
  run.capture = executor.capture();
  return run;
}

void ExpectSameRun(const Outcome& a, const Outcome& b) {
  EXPECT_EQ(a.params.w, b.params.w);
  EXPECT_EQ(a.params.b, b.params.b);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.eval_logits, b.eval_logits);
}

MlpPlanOptions Options() {
  MlpPlanOptions options;
  options.accumulate = 3;
  options.layers_per_bucket = 1;
  return options;
}

// A replayed step's collectives have no host call: the executor asks the
// communicator to watch each replay, and a step after which it reports a
// failure (NCCL aborted a stuck graph) fails instead of passing as done.
TEST(ExecutorCaptureTest, ReplayedCollectivesAreWatched) {
  GraphDevice device;
  WatchedComm comm(/*fail_after=*/3);
  const Plan plan = MakeMlpPlan(Options());
  Executor executor(plan, &device, &comm);
  ASSERT_TRUE(executor.Prepare().ok());
  ASSERT_TRUE(UploadMlpParams(plan, RandomMlpParams(Options().dims, 3), device).ok());
  std::vector<absl::Status> steps;
  for (int step = 1; step <= 4; ++step) {
    VectorBatchSource source(RandomBatches(Options().dims, Options().micro_batch,
                                           Options().accumulate, 300 + step));
    steps.push_back(executor.RunStep({step, 1e-3}, source).status());
  }
  // Step 1 eager (nothing to watch), 2 captured and replayed, 3 and 4
  // replayed: watched 3 times; the third watch's failure fails step 4.
  EXPECT_EQ(comm.watched, 3);
  EXPECT_TRUE(steps[0].ok() && steps[1].ok()) << steps[0] << steps[1];
  EXPECT_TRUE(steps[2].ok()) << steps[2];
  EXPECT_FALSE(steps[3].ok());
  EXPECT_NE(steps[3].message().find("communicator aborted"), std::string::npos) << steps[3];
}

TEST(ExecutorCaptureTest, CpuDeviceRunsEagerlyAndSaysWhy) {
  CpuDevice device;
  const Outcome run = Train(Options(), device, 3);
  EXPECT_EQ(run.capture.captured_step, -1);
  EXPECT_EQ(run.capture.replayed_steps, 0);
  EXPECT_NE(run.capture.unavailable.find("cpu device has no step capture"),
            std::string::npos)
      << run.capture.unavailable;
}

TEST(ExecutorCaptureTest, ReplayedStepsGiveTheEagerBits) {
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "fast");
    MlpPlanOptions options = Options();
    options.deterministic = deterministic;
    CpuDevice eager_device;
    const Outcome eager = Train(options, eager_device, 6);
    GraphDevice graph_device;
    const Outcome graph = Train(options, graph_device, 6);
    ExpectSameRun(eager, graph);
    // Step 1 warms up, step 2 is captured (and run by a replay), 3..6 replay.
    EXPECT_TRUE(graph.capture.unavailable.empty()) << graph.capture.unavailable;
    EXPECT_TRUE(graph.capture.failure.empty()) << graph.capture.failure;
    EXPECT_EQ(graph.capture.captured_step, 2);
    EXPECT_EQ(graph.capture.replayed_steps, 5);
    EXPECT_EQ(graph_device.captures, 1);
    EXPECT_EQ(graph_device.replays, 5);
  }
}

// The next step's batches are fed while this replay is still running:
// between a replay and the Synchronize that ends its step. Evaluation's
// uploads between steps 3 and 4 go to the arena, not into the held inputs.
TEST(ExecutorCaptureTest, NextBatchesAreFedWhileTheStepRuns) {
  CpuDevice eager_device;
  const Outcome eager = Train(Options(), eager_device, 6);
  for (bool feed_ahead : {true, false}) {
    SCOPED_TRACE(feed_ahead ? "fed ahead" : "fed before each replay");
    GraphDevice device;
    const Outcome run = Train(Options(), device, 6, nullptr, 0, nullptr, {}, feed_ahead);
    ExpectSameRun(eager, run);
    EXPECT_EQ(device.replays, 5);
    // Every replay but the captured one needs a feed. Fed ahead, each
    // follows the replay before it at once; otherwise it follows a sync.
    int feeds = 0;
    for (size_t i = 0; i < device.log.size(); ++i) {
      if (device.log[i] != "feed") continue;
      ++feeds;
      ASSERT_GT(i, 0u);
      EXPECT_EQ(device.log[i - 1], feed_ahead ? "replay" : "sync")
          << "feed " << feeds << ": " << absl::StrJoin(device.log, " ");
    }
    EXPECT_EQ(feeds, 4) << absl::StrJoin(device.log, " ");
  }
}

// A source other than the one announced is read again; a traced (eager)
// step between replays reads its own batches and feeds the next.
TEST(ExecutorCaptureTest, InputsFedAheadAreUsedOnlyByTheirSource) {
  const Plan plan = MakeMlpPlan(Options());
  auto batches = [](int seed) {
    return VectorBatchSource(RandomBatches(Options().dims, Options().micro_batch,
                                           Options().accumulate, seed));
  };
  enum Mode { kNoFeed, kWrongSource, kTracedStep4 };
  auto run = [&](Device& device, Mode mode) {
    Executor executor(plan, &device, nullptr);
    EXPECT_TRUE(executor.Prepare().ok());
    EXPECT_TRUE(UploadMlpParams(plan, RandomMlpParams(Options().dims, 3), device).ok());
    Tracer tracer(0);
    VectorBatchSource wrong = batches(77);
    std::vector<VectorBatchSource> sources;
    for (int step = 1; step <= 6; ++step) sources.push_back(batches(400 + step));
    for (int step = 1; step <= 6; ++step) {
      BatchSource* next = mode == kWrongSource ? &wrong
                          : mode == kTracedStep4 && step < 6 ? &sources[step]
                                                             : nullptr;
      executor.set_tracer(mode == kTracedStep4 && step == 4 ? &tracer : nullptr);
      absl::StatusOr<double> loss = executor.RunStep({step, 1e-3}, sources[step - 1], next);
      EXPECT_TRUE(loss.ok()) << loss.status();
    }
    return *DownloadMlpParams(plan, device);
  };
  CpuDevice eager_device;
  const MlpParams eager = run(eager_device, kNoFeed);
  for (Mode mode : {kWrongSource, kTracedStep4}) {
    SCOPED_TRACE(mode == kWrongSource ? "another source announced" : "step 4 traced");
    GraphDevice device;
    const MlpParams params = run(device, mode);
    EXPECT_EQ(eager.w, params.w);
    EXPECT_EQ(eager.b, params.b);
  }
}

TEST(ExecutorCaptureTest, TracedStepsRunEagerly) {
  GraphDevice device;
  Tracer tracer(0);
  const Outcome run = Train(Options(), device, 4, nullptr, 0, &tracer);
  // Step 2 is traced, so step 3 is the one captured.
  EXPECT_EQ(run.capture.captured_step, 3);
  EXPECT_EQ(run.capture.replayed_steps, 2);
  EXPECT_EQ(tracer.steps_traced(), 1);
  CpuDevice eager_device;
  ExpectSameRun(Train(Options(), eager_device, 4), run);
}

TEST(ExecutorCaptureTest, FailedCaptureFallsBackWithTheSameBits) {
  CpuDevice eager_device;
  const Outcome eager = Train(Options(), eager_device, 4);
  for (int fail_after : {0, 1, 7, 30}) {
    SCOPED_TRACE(absl::StrCat("fail after ", fail_after, " recorded calls"));
    GraphDevice device(fail_after);
    const Outcome run = Train(Options(), device, 4);
    ExpectSameRun(eager, run);
    EXPECT_EQ(run.capture.captured_step, -1);
    EXPECT_EQ(run.capture.replayed_steps, 0);
    EXPECT_NE(run.capture.failure.find("cannot be captured"),
              std::string::npos)
        << run.capture.failure;
    EXPECT_EQ(device.captures, 1);  // tried once, then eager for good
  }
}

TEST(ExecutorCaptureTest, OffByOption) {
  GraphDevice device;
  const Plan plan = MakeMlpPlan(Options());
  ExecutorOptions off;
  off.capture = false;
  Executor executor(plan, &device, nullptr, nullptr, off);
  ASSERT_TRUE(executor.Prepare().ok());
  EXPECT_NE(executor.capture().unavailable.find("off"), std::string::npos);
}

enum class Ranks {
  kEager,       // CpuDevice
  kGraph,       // GraphDevice, its recording replays the Gloo calls
  kGraphGloo,   // GraphDevice, but Gloo says it cannot be captured
};

// Runs body(rank, its Gloo communicator) on two ranks, threads of this
// process meeting over Gloo; returns when both are done.
void OnTwoRanks(const std::function<void(int rank, Communicator* gloo)>& body) {
  static int job = 0;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/capture_", job++, "_",
                                       absl::ToUnixNanos(absl::Now()));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.rank = rank;
      gloo.world_size = 2;
      gloo.file_store_dir = dir;
      auto comm = GlooCommunicator::Create(gloo);
      ASSERT_TRUE(comm.ok()) << comm.status();
      body(rank, comm->get());
    });
  }
  for (std::thread& t : threads) t.join();
}

// Five steps on two ranks over Gloo; capture fails on `fail_rank`, if any.
std::vector<Outcome> TrainTwoRanks(const MlpPlanOptions& options, Ranks mode,
                                   int fail_rank = -1) {
  std::vector<Outcome> runs(2);
  OnTwoRanks([&](int rank, Communicator* gloo) {
    ReplayableComm replayable(gloo);
    GraphDevice graph(rank == fail_rank ? 5 : -1);
    CpuDevice cpu;
    Device& device = mode == Ranks::kEager ? static_cast<Device&>(cpu) : graph;
    Communicator* used = mode == Ranks::kGraph ? &replayable : gloo;
    runs[rank] = Train(options, device, 5, used, rank);
  });
  return runs;
}

// Both ranks capture: the replayed all-reduces (and the deterministic
// all-gathers) must still meet and give the eager bits.
TEST(ExecutorCaptureTest, TwoRanksReplayTheirCollectives) {
  for (bool deterministic : {false, true}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "fast");
    MlpPlanOptions options = Options();
    options.world_size = 2;
    options.deterministic = deterministic;
    const std::vector<Outcome> eager = TrainTwoRanks(options, Ranks::kEager);
    const std::vector<Outcome> graph = TrainTwoRanks(options, Ranks::kGraph);
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      ExpectSameRun(eager[rank], graph[rank]);
      EXPECT_EQ(graph[rank].capture.replayed_steps, 4);
    }
    EXPECT_EQ(graph[0].params.w, graph[1].params.w);
  }
}

// Capturing is collective: when one rank cannot capture, no rank replays
// (NCCL requires every rank or none to run a collective from a graph).
TEST(ExecutorCaptureTest, OneRankFailingToCaptureMakesEveryRankEager) {
  MlpPlanOptions options = Options();
  options.world_size = 2;
  const std::vector<Outcome> eager = TrainTwoRanks(options, Ranks::kEager);
  const std::vector<Outcome> graph =
      TrainTwoRanks(options, Ranks::kGraph, /*fail_rank=*/1);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    ExpectSameRun(eager[rank], graph[rank]);
    EXPECT_EQ(graph[rank].capture.replayed_steps, 0);
    EXPECT_EQ(graph[rank].capture.captured_step, -1);
  }
  EXPECT_NE(graph[0].capture.failure.find("another rank"), std::string::npos)
      << graph[0].capture.failure;
  EXPECT_NE(graph[1].capture.failure.find("cannot be captured"),
            std::string::npos)
      << graph[1].capture.failure;
}

// Gloo itself says its collectives cannot be captured.
TEST(ExecutorCaptureTest, UncapturableCommunicatorRunsEagerly) {
  MlpPlanOptions options = Options();
  options.world_size = 2;
  const std::vector<Outcome> runs = TrainTwoRanks(options, Ranks::kGraphGloo);
  EXPECT_EQ(runs[0].capture.replayed_steps, 0);
  EXPECT_NE(runs[0].capture.unavailable.find("gloo"), std::string::npos)
      << runs[0].capture.unavailable;
}

// ZeRO-1 with zero_gather = next_forward opens every step with all-gathers
// on the comm stream, before any compute work: the captured step must hold
// them (a CUDA capture must fork the comm stream at its start for that),
// and evaluation between replays must see whole parameters.
TEST(ExecutorCaptureTest, NextForwardGathersAreReplayedWithTheStep) {
  absl::StatusOr<Plan> compiled = testing::CompileExample(
      "fashion_mlp", {{"gpus", "2"}, {"micro_batch", "4"}, {"accumulate", "2"},
                      {"global_batch", "16"}, {"zero", "1"},
                      {"zero_gather", "next_forward"}, {"deterministic", "true"},
                      {"bucket_mb", "0.2"}, {"first_bucket_mb", "0"}});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const Plan& plan = *compiled;
  ASSERT_GT(plan.buckets.size(), 1u);
  struct Run {
    std::vector<float> params, eval_logits;
    CaptureInfo capture;
  };
  auto train = [&plan](bool graph_mode) {
    std::vector<Run> runs(2);
    OnTwoRanks([&](int rank, Communicator* gloo) {
      ReplayableComm replayable(gloo);
      GraphDevice graph;
      CpuDevice cpu;
      Device& device = graph_mode ? static_cast<Device&>(graph) : cpu;
      Executor executor(plan, &device, graph_mode ? &replayable : gloo);
      ASSERT_TRUE(executor.Prepare().ok());
      ASSERT_TRUE(testing::InitParameters(plan, device).ok());
      Run& run = runs[rank];
      for (int64_t step = 1; step <= 6; ++step) {
        testing::SyntheticBatches batches(rank, step);
        absl::StatusOr<double> loss =
            executor.RunStep({step, plan.optimizer.lr / step}, batches);
        ASSERT_TRUE(loss.ok()) << loss.status();
        if (step == 4) {  // after a replayed step
          ASSERT_TRUE(executor.GatherParameters().ok());
          testing::SyntheticBatches eval(rank, 999);
          ASSERT_TRUE(executor.RunForward(eval).ok());
          const Buffer* logits = nullptr;
          for (const Instruction& instr : plan.instructions) {
            if (IsCrossEntropy(KernelOpOfInstruction(instr.op))) logits = &plan.buffers[instr.inputs[0]];
          }
          ASSERT_NE(logits, nullptr);
          run.eval_logits.resize(logits->bytes / 4);
          ASSERT_TRUE(
              device.Download(logits->offset, run.eval_logits.data(), logits->bytes).ok());
        }
      }
      ASSERT_TRUE(executor.GatherParameters().ok());
      absl::StatusOr<std::vector<float>> params = testing::DownloadParameters(plan, device);
      ASSERT_TRUE(params.ok()) << params.status();
      run.params = *std::move(params);
      run.capture = executor.capture();
    });
    return runs;
  };
  const std::vector<Run> eager = train(false);
  const std::vector<Run> graph = train(true);
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_GE(graph[rank].capture.replayed_steps, 3);
    EXPECT_TRUE(graph[rank].params == eager[rank].params);
    EXPECT_TRUE(graph[rank].eval_logits == eager[rank].eval_logits);
  }
  EXPECT_TRUE(eager[0].params == eager[1].params);
}

// The real thing: a CUDA graph of the whole step (both streams) replayed on
// a GPU gives the bits of launching the same kernels one by one, with an
// evaluation between replays and a learning rate that changes every step.
TEST(ExecutorCaptureTest, CudaGraphReplayGivesTheEagerBits) {
  if (CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA GPU: CudaDeviceCount() == 0";
  }
  for (bool overlap : {true, false}) {
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE(absl::StrCat(overlap ? "overlap" : "no overlap", ", ",
                                deterministic ? "deterministic" : "fast"));
      MlpPlanOptions options = Options();
      options.deterministic = deterministic;
      ExecutorOptions eager_options, graph_options;
      eager_options.overlap = graph_options.overlap = overlap;
      eager_options.capture = false;
      auto eager_device = CreateCudaDevice(0);
      auto graph_device = CreateCudaDevice(0);
      ASSERT_TRUE(eager_device.ok()) << eager_device.status();
      ASSERT_TRUE(graph_device.ok()) << graph_device.status();
      const Outcome eager = Train(options, **eager_device, 6, nullptr, 0,
                                  nullptr, eager_options);
      const Outcome graph = Train(options, **graph_device, 6, nullptr, 0,
                                  nullptr, graph_options);
      EXPECT_TRUE(graph.capture.failure.empty()) << graph.capture.failure;
      EXPECT_EQ(graph.capture.replayed_steps, 5);
      ExpectSameRun(eager, graph);
    }
  }
}

}  // namespace
}  // namespace trainc
