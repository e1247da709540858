#include "runtime/train/handshake.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RankFingerprint Base() {
  RankFingerprint f;
  f.fields = {{"micro_batch", 16}, {"accumulate", 2}, {"plan", 111},
              {"samples", 60000}, {"data", 222},      {"weights", 333},
              {"step", 0}};
  return f;
}

RankFingerprint With(RankFingerprint f, const std::string& name, uint64_t v) {
  for (auto& field : f.fields) {
    if (field.first == name) field.second = v;
  }
  return f;
}

TEST(Handshake, EqualRanksAgree) {
  EXPECT_TRUE(CompareFingerprints({Base(), Base(), Base()}).ok());
}

TEST(Handshake, AnotherMicroBatchIsNamedWithRankZerosValue) {
  RankFingerprint other = With(With(With(Base(), "micro_batch", 8), "accumulate", 4), "plan", 9);
  const absl::Status s = CompareFingerprints({Base(), other});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("rank 1: micro_batch 8 (rank 0: 16), accumulate 4 (rank 0: 2)"));
  // The numbers explain the plan's difference: it is not listed again.
  EXPECT_THAT(s.message(), Not(HasSubstr("another compiled plan")));
}

TEST(Handshake, HashesAreNamedNotPrinted) {
  const absl::Status s = CompareFingerprints(
      {Base(), With(Base(), "plan", 5), With(Base(), "data", 7), With(Base(), "weights", 8)});
  EXPECT_THAT(s.message(), HasSubstr("rank 1: another compiled plan\n"));
  EXPECT_THAT(s.message(), HasSubstr("rank 2: other training data\n"));
  EXPECT_THAT(s.message(), HasSubstr("rank 3: other initial weights"));
  EXPECT_THAT(s.message(), Not(HasSubstr("222")));
}

TEST(Handshake, OnlyTheRanksThatDifferAreListed) {
  const absl::Status s =
      CompareFingerprints({Base(), Base(), With(Base(), "step", 400), Base()});
  EXPECT_THAT(s.message(), HasSubstr("rank 2: step 400 (rank 0: 0)"));
  EXPECT_THAT(s.message(), Not(HasSubstr("rank 1")));
  EXPECT_THAT(s.message(), Not(HasSubstr("rank 3")));
}

}  // namespace
}  // namespace trainc
