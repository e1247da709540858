// Data parallelism end to end on the CPU: N ranks (threads here, processes in
// real runs), each with its CpuDevice, GlooCommunicator and Executor.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/testing/test_plans.h"
#include "runtime/trace/tracer.h"

namespace trainc {
namespace {

using testing::DownloadMlpParams;
using testing::MakeMlpPlan;
using testing::MlpBatch;
using testing::MlpParams;
using testing::MlpPlanOptions;
using testing::RandomBatches;
using testing::RandomMlpParams;
using testing::UploadMlpParams;
using testing::VectorBatchSource;

struct RankResult {
  MlpParams params;
  double loss = 0;  // summed over steps
  std::vector<TraceSpan> spans;
  std::string trace_part;
};

// Trains `steps` steps of `options` on options.world_size ranks. Step s uses
// global micro-batches RandomBatches(seed 100 + s); rank r runs global
// micro-batches r * accumulate .. (r + 1) * accumulate - 1.
std::vector<RankResult> Train(const MlpPlanOptions& options, int steps,
                              ExecutorOptions exec_options = {},
                              bool trace = false) {
  const int world = static_cast<int>(options.world_size);
  const Plan plan = MakeMlpPlan(options);
  const MlpParams init = RandomMlpParams(options.dims, 11);
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/exec_", absl::ToUnixNanos(absl::Now()));
  const int64_t job_start = TraceClockNs();
  std::vector<RankResult> results(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions gloo;
      gloo.rank = rank;
      gloo.world_size = world;
      gloo.file_store_dir = dir;
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(gloo);
      ASSERT_TRUE(comm.ok()) << comm.status();
      CpuDevice device;
      Tracer tracer(rank, job_start);
      Executor executor(plan, &device, comm->get(), trace ? &tracer : nullptr,
                        exec_options);
      ASSERT_TRUE(executor.Prepare().ok());
      ASSERT_TRUE(UploadMlpParams(plan, init, device).ok());
      for (int step = 1; step <= steps; ++step) {
        std::vector<MlpBatch> global =
            RandomBatches(options.dims, options.micro_batch,
                          world * options.accumulate, 100 + step);
        std::vector<MlpBatch> mine(
            global.begin() + rank * options.accumulate,
            global.begin() + (rank + 1) * options.accumulate);
        VectorBatchSource source(std::move(mine));
        absl::StatusOr<double> loss =
            executor.RunStep({step, options.optimizer.lr}, source);
        ASSERT_TRUE(loss.ok()) << loss.status();
        results[rank].loss += *loss;
      }
      absl::StatusOr<MlpParams> params = DownloadMlpParams(plan, device);
      ASSERT_TRUE(params.ok());
      results[rank].params = *params;
      results[rank].spans = tracer.spans();
      results[rank].trace_part = tracer.EventsJson(plan);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

double MaxAbsDiff(const MlpParams& a, const MlpParams& b) {
  double worst = 0;
  for (size_t l = 1; l < a.w.size(); ++l) {
    for (size_t i = 0; i < a.w[l].size(); ++i) {
      worst = std::max(worst, double(std::fabs(a.w[l][i] - b.w[l][i])));
    }
    for (size_t i = 0; i < a.b[l].size(); ++i) {
      worst = std::max(worst, double(std::fabs(a.b[l][i] - b.b[l][i])));
    }
  }
  return worst;
}

bool SameBits(const MlpParams& a, const MlpParams& b) {
  return a.w == b.w && a.b == b.b;
}

TEST(ExecutorGlooTest, TwoRanksMatchOneRankWithAccumulateTwo) {
  MlpPlanOptions two;
  two.world_size = 2;
  two.layers_per_bucket = 1;
  const std::vector<RankResult> dp = Train(two, 3);
  ASSERT_EQ(dp.size(), 2u);
  EXPECT_TRUE(SameBits(dp[0].params, dp[1].params));

  MlpPlanOptions one = two;
  one.world_size = 1;
  one.accumulate = 2;
  const std::vector<RankResult> acc = Train(one, 3);
  EXPECT_LT(MaxAbsDiff(dp[0].params, acc[0].params), 1e-6);
  EXPECT_NEAR(dp[0].loss + dp[1].loss, acc[0].loss, 1e-5 * acc[0].loss);
}

TEST(ExecutorGlooTest, DeterministicModeIsBitExactAcrossSplits) {
  MlpPlanOptions base;
  base.layers_per_bucket = 2;
  base.deterministic = true;
  base.micro_batch = 3;
  MlpPlanOptions split;
  // 4 micro-batches per step as 1x4, 2x2 and 4x1 (gpus x accumulate).
  std::vector<MlpParams> results;
  for (auto [world, acc] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{4, 1}}) {
    split = base;
    split.world_size = world;
    split.accumulate = acc;
    const std::vector<RankResult> r = Train(split, 2);
    for (const RankResult& rank : r) {
      EXPECT_TRUE(SameBits(rank.params, r[0].params)) << world << "x" << acc;
    }
    results.push_back(r[0].params);
  }
  EXPECT_TRUE(SameBits(results[0], results[1]));
  EXPECT_TRUE(SameBits(results[0], results[2]));
}

// The first all-reduce against the end of the last backward instruction,
// on every rank.
struct OverlapTimes {
  int64_t first_all_reduce_begin = INT64_MAX;
  int64_t last_backward_end = 0;
};
OverlapTimes Times(const Plan& plan, const std::vector<TraceSpan>& spans,
                   int64_t step) {
  OverlapTimes t;
  for (const TraceSpan& s : spans) {
    if (s.step != step) continue;
    const Instruction& instr = plan.instructions[s.instr];
    if (instr.op == "all_reduce") {
      t.first_all_reduce_begin = std::min(t.first_all_reduce_begin, s.begin_ns);
    } else if (instr.phase == Phase::kBackward) {
      t.last_backward_end = std::max(t.last_backward_end, s.end_ns);
    }
  }
  return t;
}

TEST(ExecutorGlooTest, AllReduceOverlapsBackwardOnlyWhenAllowed) {
  MlpPlanOptions options;
  // Two ranks' compute threads already fill this machine's two cores, so a
  // comm thread gets one only when the scheduler preempts a compute thread:
  // after bucket 0 is ready the backward must outlast that latency (a few
  // ms), hence layers far bigger than the default model's.
  options.dims = {1024, 1024, 1024, 10};
  options.micro_batch = 128;
  options.world_size = 2;
  options.layers_per_bucket = 1;  // three buckets
  const Plan plan = MakeMlpPlan(options);
  // On a loaded machine a comm thread may miss a step's whole backward:
  // overlap must show on some step of each rank, never with it off.
  const int steps = 6;

  const std::vector<RankResult> on = Train(options, steps, {true}, true);
  for (const RankResult& r : on) {
    int overlapped = 0;
    for (int step = 1; step <= steps; ++step) {
      const OverlapTimes t = Times(plan, r.spans, step);
      overlapped += t.first_all_reduce_begin < t.last_backward_end;
    }
    EXPECT_GE(overlapped, 1);
  }
  const std::vector<RankResult> off = Train(options, steps, {false}, true);
  for (const RankResult& r : off) {
    for (int step = 1; step <= steps; ++step) {
      const OverlapTimes t = Times(plan, r.spans, step);
      EXPECT_GE(t.first_all_reduce_begin, t.last_backward_end) << "step " << step;
    }
  }
  EXPECT_TRUE(SameBits(on[0].params, off[0].params));

  // Rank 0 merges both ranks' parts into one Chrome trace.
  const std::string path = ::testing::TempDir() + "/trace.json";
  ASSERT_TRUE(MergeTraceParts(plan, {on[0].trace_part, on[1].trace_part}, steps,
                              path)
                  .ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_EQ(json.rfind("{\"traceEvents\": [", 0), 0u);
  EXPECT_NE(json.find("\"pid\": 1, \"tid\": 1"), std::string::npos);
  EXPECT_NE(json.find(absl::StrCat("\"steps_traced\": ", steps)), std::string::npos);
  EXPECT_NE(json.find("\"world_size\": 2"), std::string::npos);
}

}  // namespace
}  // namespace trainc
