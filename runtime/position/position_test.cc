#include "runtime/position/position.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/position/testing/two_instruction_plan.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

Plan TwoInstructionPlan() {
  return testing::TwoInstructionPlan("linear", "h1 = linear", Phase::kForward);
}

// Two ranks publish into one folder; the table reads both, with labels,
// and names the one behind.
TEST(PositionBoard, TheTableSaysWhereEachRankIsAndWhoIsBehind) {
  const std::string dir = ::testing::TempDir() + "/positions";
  std::filesystem::create_directories(dir);
  ::setenv(kPositionDirEnv, dir.c_str(), 1);
  auto zero = PositionBoard::ForRank(0);
  auto one = PositionBoard::ForRank(1);
  ASSERT_TRUE(zero.ok() && one.ok());
  const Plan plan = TwoInstructionPlan();
  (*zero)->SetLabels(plan);
  (*one)->SetLabels(plan);
  (*zero)->Stage(RankStage::kStep, 4);
  (*one)->Stage(RankStage::kStep, 4);
  (*zero)->Compute(4, 0);
  (*zero)->CommBegin(1);  // rank 0 waits in the all-reduce
  (*one)->Compute(3, 0);  // rank 1 is a step behind
  const std::string table = PositionTable(dir, 2);
  EXPECT_THAT(table, HasSubstr("rank 0: step 4, in all-reduce of bucket 0 (instruction 1 of 2)"))
      << table;
  EXPECT_THAT(table, HasSubstr("rank 1: step 3, forward \"h1 = linear\" (instruction 0 of 2) for"))
      << table;
  EXPECT_THAT(table, HasSubstr("(instruction 0 of 2) for 0.0 s  <- behind")) << table;
  EXPECT_THAT((*one)->Where(), HasSubstr("step 3, forward \"h1 = linear\""));
  // The launcher's own verdict wins; the same positions, no one behind.
  EXPECT_THAT(PositionTable(dir, 2, 0), HasSubstr("of bucket 0 (instruction 1 of 2) for"));
  (*one)->Compute(4, 0);
  (*zero)->CommEnd();
  EXPECT_THAT(PositionTable(dir, 2), ::testing::Not(HasSubstr("behind")));
  ::unsetenv(kPositionDirEnv);
}

// A rank whose pulse stopped is the one behind, even when its position
// ties with the others' (both in the same collective).
TEST(PositionBoard, AFrozenPulseMarksTheRankBehind) {
  const std::string dir = ::testing::TempDir() + "/pulse";
  std::filesystem::create_directories(dir);
  auto zero = PositionBoard::ForRank(0, dir);
  auto one = PositionBoard::ForRank(1, dir);
  ASSERT_TRUE(zero.ok() && one.ok());
  for (auto* b : {&*zero, &*one}) {
    (*b)->SetLabels(TwoInstructionPlan());
    (*b)->Stage(RankStage::kStep, 2);
    (*b)->Compute(2, 0);
    (*b)->CommBegin(1);
  }
  EXPECT_THAT(PositionTable(dir, 2), ::testing::Not(HasSubstr("behind")));  // a tie
  (*one)->StartPulse();
  (*zero)->StartPulse();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  one->reset();  // rank 1's pulse stops (its record stays in the folder)
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_THAT(PositionTable(dir, 2), HasSubstr("rank 1: step 2, in all-reduce"));
  EXPECT_THAT(PositionTable(dir, 2), HasSubstr("<- behind"));
  const std::string table = PositionTable(dir, 2);
  EXPECT_LT(table.find("rank 1"), table.find("<- behind")) << table;
}

// The judged positions carry what the table prints, field by field (the
// trace records them): a rank in a collective, one behind in the data
// phase.
TEST(JudgePositions, EachRanksStepInstructionStateAndWhoIsBehind) {
  ::unsetenv(kPositionDirEnv);
  auto zero = PositionBoard::ForRank(0);
  auto one = PositionBoard::ForRank(1);
  ASSERT_TRUE(zero.ok() && one.ok());
  for (auto* b : {&*zero, &*one}) {
    (*b)->SetLabels(TwoInstructionPlan());
    (*b)->Stage(RankStage::kStep, 5);
  }
  (*zero)->Compute(5, 0);
  (*zero)->CommBegin(1);
  (*one)->Compute(5, -1);  // nothing issued yet in step 5
  const std::vector<RankPosition> p =
      JudgePositions({(*zero)->Sample(0), (*one)->Sample(1)});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].rank, 0);
  EXPECT_EQ(p[0].step, 5);
  EXPECT_EQ(p[0].instruction, 1);
  EXPECT_EQ(p[0].instructions, 2);
  EXPECT_EQ(p[0].label, "all-reduce of bucket 0");
  EXPECT_EQ(p[0].state, "in all-reduce of bucket 0");
  EXPECT_TRUE(p[0].in_collective);
  EXPECT_FALSE(p[0].behind);
  EXPECT_GE(p[0].seconds, 0);
  EXPECT_THAT(p[0].where, HasSubstr("step 5, in all-reduce of bucket 0 (instruction 1 of 2) for"));
  EXPECT_EQ(p[1].rank, 1);
  EXPECT_TRUE(p[1].behind);
  EXPECT_FALSE(p[1].in_collective);
  EXPECT_EQ(FormatPositionTable(p).find("where each rank was:\n  rank 0: step 5, in "), 0u);
  EXPECT_THAT(FormatPositionTable(p), HasSubstr("  <- behind\n"));
  // The caller's verdict wins.
  EXPECT_TRUE(JudgePositions({(*zero)->Sample(0), (*one)->Sample(1)}, 0)[0].behind);
  EXPECT_EQ(FormatPositionTable({}), "");
}

// A rank a whole step behind is behind even when its instruction index is
// later than the others': progress is ordered by step first, then by
// instruction. (Ordered by instruction first, rank 1 at instruction 50
// would look ahead of ranks 0 and 2 at instruction 10, and the tie between
// those two would name no one.)
TEST(JudgePositions, AWholeStepBehindAtALaterInstructionIsBehind) {
  std::vector<std::string> labels;
  for (int i = 0; i < 60; ++i) labels.push_back("forward \"h" + std::to_string(i) + " = linear\"");
  auto sample = [&](int rank, int64_t step, int64_t instruction) {
    PositionSample s;
    s.rank = rank;
    s.stage = static_cast<int64_t>(RankStage::kStep);
    s.step = step;
    s.compute_instr = instruction;
    s.labels = labels;
    return s;
  };
  const std::vector<RankPosition> three =
      JudgePositions({sample(0, 4, 10), sample(1, 3, 50), sample(2, 4, 10)});
  ASSERT_EQ(three.size(), 3u);
  EXPECT_FALSE(three[0].behind);
  EXPECT_TRUE(three[1].behind);
  EXPECT_FALSE(three[2].behind);
  EXPECT_THAT(FormatPositionTable(three),
              HasSubstr("rank 1: step 3, forward \"h50 = linear\" (instruction 50 of 60) for "
                        "0.0 s  <- behind"))
      << FormatPositionTable(three);
  // Two ranks: the same verdict, whichever rank is listed first.
  const std::vector<RankPosition> two = JudgePositions({sample(0, 4, 10), sample(1, 3, 50)});
  EXPECT_FALSE(two[0].behind);
  EXPECT_TRUE(two[1].behind);
  const std::vector<RankPosition> first = JudgePositions({sample(0, 3, 50), sample(1, 4, 10)});
  EXPECT_TRUE(first[0].behind);
  EXPECT_FALSE(first[1].behind);
}

TEST(StopNote, RoundTripsThroughTheFolder) {
  const std::string dir = ::testing::TempDir() + "/note";
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(ReadStopNote(dir).has_value());
  WriteStopNote(dir, {1, "rank 1 sent no heartbeat for 15s (hung?)\nsecond line"});
  std::optional<StopNote> note = ReadStopNote(dir);
  ASSERT_TRUE(note.has_value());
  EXPECT_EQ(note->behind, 1);
  EXPECT_EQ(note->reason, "rank 1 sent no heartbeat for 15s (hung?)\nsecond line");
}

TEST(PositionBoard, WithoutAFolderItKeepsItsOwnPosition) {
  ::unsetenv(kPositionDirEnv);
  auto board = PositionBoard::ForRank(0);
  ASSERT_TRUE(board.ok());
  EXPECT_EQ((*board)->Where(), "starting (no step yet)");
  (*board)->SetLabels(TwoInstructionPlan());
  (*board)->Stage(RankStage::kStep, 1);
  (*board)->Compute(1, 0);
  EXPECT_THAT((*board)->Where(), HasSubstr("step 1, forward \"h1 = linear\""));
  EXPECT_EQ(PositionTable(::testing::TempDir() + "/none", 2), "");
}

}  // namespace
}  // namespace trainc
