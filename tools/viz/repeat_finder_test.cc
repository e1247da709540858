#include "tools/viz/repeat_finder.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace trainc::viz {
namespace {

TEST(RepeatFinderTest, FindsPeriodicRunBetweenUniqueEnds) {
  // in, [lin, relu] x 4, head
  std::vector<std::string> sig = {"in", "lin", "relu", "lin", "relu",
                                  "lin", "relu", "lin", "relu", "head"};
  auto blocks = FindRepeatedBlocks(sig, {}, 3);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].start, 1);
  EXPECT_EQ(blocks[0].period, 2);
  EXPECT_EQ(blocks[0].repeats, 4);
}

TEST(RepeatFinderTest, TooFewRepeatsStayExpanded) {
  std::vector<std::string> sig = {"a", "b", "a", "b", "c"};
  EXPECT_TRUE(FindRepeatedBlocks(sig, {}, 3).empty());
  EXPECT_EQ(FindRepeatedBlocks(sig, {}, 2).size(), 1u);
}

TEST(RepeatFinderTest, BlocksStartOnStatementBoundaries) {
  // Layer h1 differs (its linear reads the input); h2..h4 are identical.
  // Without statements the greedy search would start at h1's relu.
  std::vector<std::string> sig = {"lin784", "relu", "lin", "relu",
                                  "lin",    "relu", "lin", "relu"};
  std::vector<std::string> stmt = {"h1", "h1", "h2", "h2",
                                   "h3", "h3", "h4", "h4"};
  auto unaligned = FindRepeatedBlocks(sig, {}, 3);
  ASSERT_EQ(unaligned.size(), 1u);
  EXPECT_EQ(unaligned[0].start, 1);
  auto blocks = FindRepeatedBlocks(sig, stmt, 3);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].start, 2);
  EXPECT_EQ(blocks[0].period, 2);
  EXPECT_EQ(blocks[0].repeats, 3);
}

TEST(RepeatFinderTest, PrefersLargestCoverage) {
  std::vector<std::string> sig(12, "x");
  auto blocks = FindRepeatedBlocks(sig, {}, 3);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(blocks[0].period, 1);
  EXPECT_EQ(blocks[0].repeats, 12);
}

}  // namespace
}  // namespace trainc::viz
