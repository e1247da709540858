#include "compiler/util/did_you_mean.h"

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(DidYouMeanTest, EditDistance) {
  EXPECT_EQ(EditDistance("relu", "relu"), 0);
  EXPECT_EQ(EditDistance("rleu", "relu"), 1);  // transposition
  EXPECT_EQ(EditDistance("micro_bach", "micro_batch"), 1);
  EXPECT_EQ(EditDistance("", "abc"), 3);
}

TEST(DidYouMeanTest, Suggestions) {
  const std::vector<std::string> ops = {"linear", "relu", "gelu"};
  EXPECT_EQ(ClosestMatch("rleu", ops), "relu");
  EXPECT_EQ(ClosestMatch("softmax", ops), "");
  EXPECT_EQ(SuggestionHint("lineer", ops, "ops"), "did you mean 'linear'?");
  EXPECT_EQ(SuggestionHint("xyz", ops, "ops"), "ops: linear, relu, gelu");
  EXPECT_EQ(ClosestMatch(std::string(1000, 'a'), ops), "");
}

}  // namespace
}  // namespace trainc
