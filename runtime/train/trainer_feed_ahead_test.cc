// The trainer's half of feed-ahead, without a GPU: the real training loop
// (TrainRank) on a device that captures and replays steps on the CPU as a
// CUDA graph would (runtime/exec/testing/graph_test_device.h), so that from the
// captured step on every step is one replay whose batch was fed while the
// step before it ran (Executor::RunStep's `next`).
//
// The data says which step it belongs to: a byte text whose window i
// starts with byte 32 + i, shuffled per epoch by the run's sampler. The
// device reads the token ids each training kernel sees, and the test
// asserts that every step, eager or replayed, computed on exactly its own
// windows (BatchPlanner's for its epoch and place in it), over two epoch
// boundaries and around evaluations between steps; and that from the
// first replay on, each step's batch was fed during the step before it,
// once (after that step's replay, before its synchronisation).
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "compiler/frontend/frontend.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"
#include "runtime/data/dataset.h"
#include "runtime/data/sampler.h"
#include "runtime/exec/testing/graph_test_device.h"
#include "runtime/train/trainer.h"

namespace trainc {
namespace {

constexpr int64_t kCtx = 4;
constexpr int64_t kWindows = 40;  // 10 steps of 4 per epoch
constexpr int64_t kSteps = 25;    // two epoch boundaries
constexpr int kFirstByte = 32;    // window i starts with byte 32 + i

constexpr char kModel[] = R"(
model feed_ahead {
  const vocab = 256, ctx = 4, width = 8

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  emb    = embedding(tokens, vocab, width)
  logits = linear(emb, vocab, bias = false)
  loss   = cross_entropy(logits, next)
}

data {
  train   = text("TRAIN")
  eval    = text("EVAL")
  shuffle = true
}

train {
  gpus        = 1
  micro_batch = 2
  accumulate  = 2
  steps       = 25
  optimizer   = sgd(lr = 0.1)
  seed        = 5
}
)";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Window i of the training text: bytes [i*T, i*T + T], the first 32 + i.
std::string TrainingText() {
  std::string text;
  for (int64_t i = 0; i < kWindows; ++i) {
    text += static_cast<char>(kFirstByte + i);
    for (int64_t k = 1; k < kCtx; ++k) text += static_cast<char>('a' + (i * 7 + k) % 20);
  }
  return text + "z";  // the last window's label
}

Plan CompilePlan() {
  const std::string dir = ::testing::TempDir();
  WriteFile(dir + "/train.txt", TrainingText());
  WriteFile(dir + "/eval.txt", "the eval text: a few windows of bytes.");
  const std::string source = absl::StrReplaceAll(
      kModel, {{"TRAIN", dir + "/train.txt"}, {"EVAL", dir + "/eval.txt"}});
  WriteFile(dir + "/feed_ahead.train", source);
  FrontendResult result = CompileFile(dir + "/feed_ahead.train");
  EXPECT_TRUE(result.spec) << FormatDiagnostics(result.diagnostics, result.source);
  absl::StatusOr<Plan> plan = BuildPlan(*result.spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// What the training kernels read: (step, micro-step) -> the windows of
// its token buffer, and any kernel that saw other windows than the first
// of its micro-step.
struct Seen {
  std::map<std::pair<int64_t, int>, std::vector<int64_t>> windows;
  std::vector<std::string> conflicts;
};

// A GraphDevice that leaves its log and replayed steps behind when the
// trainer, which owns it, destroys it at the end of the run.
class KeptGraphDevice : public testing::GraphDevice {
 public:
  KeptGraphDevice(std::unique_ptr<Device> inner, std::vector<std::string>* log,
                  std::vector<int64_t>* replay_steps)
      : GraphDevice(-1, std::move(inner)), kept_log_(log), kept_steps_(replay_steps) {}
  ~KeptGraphDevice() override {
    *kept_log_ = log;
    *kept_steps_ = replay_steps;
  }

 private:
  std::vector<std::string>* kept_log_;
  std::vector<int64_t>* kept_steps_;
};

// Watches every training kernel that reads the token buffer.
void WatchTokens(testing::GraphDevice* device, Seen* seen) {
  device->before_kernel = [device, seen](const Plan& plan, const Instruction& instr,
                                         const StepState& state) {
    if (!state.training) return;  // evaluation
    const Buffer& tokens = plan.buffers[plan.input_buffers[0]];
    bool reads = false;
    for (int id : instr.inputs) reads |= id == tokens.id;
    if (!reads) return;
    std::vector<int64_t> windows;
    const char* arena = device->arena() + tokens.offset;
    for (int64_t b = 0; b < plan.micro_batch; ++b) {
      int32_t first;
      std::memcpy(&first, arena + b * kCtx * sizeof(int32_t), sizeof(first));
      windows.push_back(first - kFirstByte);
    }
    const auto key = std::make_pair(state.step, instr.micro_step);
    auto [it, added] = seen->windows.emplace(key, windows);
    if (!added && it->second != windows) {
      seen->conflicts.push_back(absl::StrCat("step ", state.step, " micro-step ",
                                             instr.micro_step, ": ", instr.label, " read ",
                                             absl::StrJoin(windows, ","), " after ",
                                             absl::StrJoin(it->second, ",")));
    }
  };
}

TEST(TrainerFeedAhead, EveryStepTrainsOnItsOwnBatchFedDuringTheStepBefore) {
  const Plan plan = CompilePlan();
  ASSERT_EQ(plan.global_batch, 4);
  ASSERT_EQ(plan.accumulate, 2);
  const Buffer& tokens = plan.buffers[plan.input_buffers[0]];
  ASSERT_EQ(tokens.kind, BufferKind::kInput);
  ASSERT_EQ(tokens.dtype, DType::kI32);
  absl::StatusOr<Dataset> data = LoadTrainDataset(plan);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), kWindows);
  absl::StatusOr<BatchPlanner> batches = BatchPlanner::ForPlan(plan, data->size());
  ASSERT_TRUE(batches.ok()) << batches.status();
  const int64_t steps_per_epoch = batches->steps_per_epoch();
  ASSERT_EQ(steps_per_epoch, 10);

  Seen seen;
  std::vector<std::string> events;  // the device's log: "replay", "feed", "sync"
  std::vector<int64_t> replayed;    // the step of each replay
  bool wrapped = false;
  TrainOptions options;
  options.device = DeviceKind::kCpu;
  options.eval_every = 3;  // evaluations between steps, besides the epochs' ends
  options.trace_steps = 1;
  options.wrap_device = [&](std::unique_ptr<Device> cpu) -> std::unique_ptr<Device> {
    auto device = std::make_unique<KeptGraphDevice>(std::move(cpu), &events, &replayed);
    WatchTokens(device.get(), &seen);
    wrapped = true;
    return device;
  };
  std::ostringstream log;
  absl::StatusOr<TrainSummary> summary = TrainRank(plan, RankContext(), options, log);
  ASSERT_TRUE(summary.ok()) << summary.status() << "\n" << log.str();
  ASSERT_TRUE(wrapped);
  EXPECT_EQ(summary->final_step, kSteps);
  EXPECT_NE(log.str().find("eval"), std::string::npos) << log.str();

  // Every step computed on its own windows, eager or replayed.
  EXPECT_TRUE(seen.conflicts.empty()) << absl::StrJoin(seen.conflicts, "\n");
  for (int64_t step = 1; step <= kSteps; ++step) {
    const int64_t epoch = (step - 1) / steps_per_epoch, in_epoch = (step - 1) % steps_per_epoch;
    for (int micro = 0; micro < plan.accumulate; ++micro) {
      absl::StatusOr<std::vector<int64_t>> want =
          batches->MicroBatchIndices(epoch, in_epoch, /*rank=*/0, micro);
      ASSERT_TRUE(want.ok()) << want.status();
      const auto it = seen.windows.find({step, micro});
      ASSERT_NE(it, seen.windows.end()) << "step " << step << " micro-step " << micro;
      EXPECT_EQ(it->second, *want) << "step " << step << " (epoch " << epoch + 1 << ", step "
                                   << in_epoch + 1 << " of it), micro-step " << micro;
    }
  }
  // With shuffling, the epochs are other orders of the same windows: a
  // step given another epoch's batch would be seen above.
  EXPECT_NE(*batches->MicroBatchIndices(0, 0, 0, 0), *batches->MicroBatchIndices(1, 0, 0, 0));

  // The steps from the captured one on were replays, one per step in order.
  ASSERT_GE(replayed.size(), static_cast<size_t>(kSteps - 4));
  EXPECT_EQ(summary->replayed_steps, static_cast<int64_t>(replayed.size()));
  for (size_t k = 0; k < replayed.size(); ++k) {
    EXPECT_EQ(replayed[k], kSteps - static_cast<int64_t>(replayed.size()) + 1 + k);
  }
  // Each replay but the last is followed by one input window, opened before
  // the step's own synchronisation (while it runs: fed ahead), and no
  // other window before the next replay: the next replay ran on that batch
  // (the windows its kernels read are checked above).
  std::vector<size_t> at;  // each replay's place in the log
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] == "replay") at.push_back(i);
  }
  ASSERT_EQ(at.size(), replayed.size());
  const std::string all = absl::StrJoin(events, " ");
  for (size_t k = 0; k < at.size(); ++k) {
    const size_t end = k + 1 < at.size() ? at[k + 1] : events.size();
    int feeds = 0;
    for (size_t i = at[k] + 1; i < end; ++i) feeds += events[i] == "feed";
    if (k + 1 == at.size()) {
      EXPECT_EQ(feeds, 0) << "the last step feeds nothing ahead: " << all;
      continue;
    }
    EXPECT_EQ(feeds, 1) << "between the replays of steps " << replayed[k] << " and "
                        << replayed[k + 1] << ": " << all;
    ASSERT_LT(at[k] + 1, events.size());
    EXPECT_EQ(events[at[k] + 1], "feed")
        << "step " << replayed[k + 1] << "'s batch was not fed while step " << replayed[k]
        << " ran: " << all;
  }
}

}  // namespace
}  // namespace trainc
