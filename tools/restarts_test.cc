#include "tools/restarts.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/checkpoint.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;

TEST(WithResumeTest, ReplacesResumeAndInitFrom) {
  EXPECT_THAT(WithResume({"train", "m.train", "--resume", "old", "--gpus", "2",
                          "--init-from=w.safetensors", "--resume=x", "--steps", "9"},
                         "ckpt/step-00000010.safetensors"),
              ElementsAre("train", "--resume", "ckpt/step-00000010.safetensors", "m.train",
                          "--gpus", "2", "--steps", "9"));
  // After "--" everything is positional, kept as it is.
  EXPECT_THAT(WithResume({"train", "--", "--resume"}, "c"),
              ElementsAre("train", "--resume", "c", "--", "--resume"));
}

TEST(WithWorldTest, ReplacesTheRankCountAndKeepsTheGlobalBatch) {
  EXPECT_THAT(WithWorld({"train", "m.train", "--gpus", "4", "--accumulate=2", "--micro_batch",
                         "8", "--global_batch", "64"},
                        3, 96),
              ElementsAre("train", "--gpus", "3", "--global_batch", "96", "m.train",
                          "--micro_batch", "8"));
}

TEST(SmallerWorldTest, TheLargestCountThatSplitsTheBatchEvenly) {
  EXPECT_EQ(SmallerWorld(4, 1, 256, 64), 2);  // 3 ranks would split 256 unevenly
  EXPECT_EQ(SmallerWorld(2, 1, 256, 64), 1);
  EXPECT_EQ(SmallerWorld(4, 3, 256, 64), 0);  // no count in [3, 4)
  EXPECT_EQ(SmallerWorld(1, 1, 256, 64), 0);
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

TEST(NewestCheckpointSinceTest, OnlyWholeCheckpointsOfThisRun) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ckpt");
  std::filesystem::create_directories(dir);
  const auto now = std::filesystem::file_time_type::clock::now();
  // An older run's checkpoint, at a higher step: not this run's.
  const std::string old = CheckpointPath(dir, 400);
  Touch(old);
  Touch(TrainingStatePath(old));
  for (const std::string& p : {old, TrainingStatePath(old)}) {
    std::filesystem::last_write_time(p, now - std::chrono::hours(1));
  }
  EXPECT_EQ(NewestCheckpointSince(dir, now), "");
  const std::string ours = CheckpointPath(dir, 20);
  Touch(ours);
  Touch(TrainingStatePath(ours));
  // Step 30's weights without their training state: not whole.
  Touch(CheckpointPath(dir, 30));
  EXPECT_EQ(NewestCheckpointSince(dir, now), ours);
  EXPECT_EQ(NewestCheckpointSince("", now), "");
  EXPECT_EQ(NewestCheckpointSince(dir + "/missing", now), "");
}

TEST(FailureCauseTest, SaysHowTheRankEnded) {
  RankFailure f;
  f.signal = SIGKILL;
  EXPECT_EQ(FailureCause(f), "died of signal 9 (Killed)");
  f.signal = 0;
  f.exit_code = 3;
  EXPECT_EQ(FailureCause(f), "exited with status 3");
}

}  // namespace
}  // namespace trainc
