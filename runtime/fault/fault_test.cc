#include "runtime/fault/fault.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/host_test_device.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

TEST(ParseFault, NothingIsNoFault) {
  absl::StatusOr<Fault> fault = ParseFault("");
  ASSERT_TRUE(fault.ok());
  EXPECT_EQ(fault->kind, Fault::Kind::kNone);
}

TEST(ParseFault, LoaderSleep) {
  absl::StatusOr<Fault> fault = ParseFault("loader_sleep:rank=1:step=5:seconds=600");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_EQ(fault->kind, Fault::Kind::kLoaderSleep);
  EXPECT_EQ(fault->rank, 1);
  EXPECT_EQ(fault->step, 5);
  EXPECT_EQ(fault->seconds, 600);
  // Any order of the keys.
  fault = ParseFault("loader_sleep:seconds=0:step=1:rank=0");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_EQ(fault->step, 1);
}

TEST(ParseFault, LoaderSlow) {
  absl::StatusOr<Fault> fault = ParseFault("loader_slow:rank=2:ms=20");
  ASSERT_TRUE(fault.ok()) << fault.status();
  EXPECT_EQ(fault->kind, Fault::Kind::kLoaderSlow);
  EXPECT_EQ(fault->rank, 2);
  EXPECT_EQ(fault->ms, 20);
  EXPECT_THAT(ParseFault("loader_slow:rank=2").status().message(), HasSubstr("no ms="));
  EXPECT_THAT(ParseFault("loader_slow:rank=2:ms=1:step=3").status().message(),
              HasSubstr("unknown key 'step'"));
}

// Each malformed value is refused, saying what is wrong with it.
TEST(ParseFault, RefusesMalformedValues) {
  const std::pair<const char*, const char*> cases[] = {
      {"loader_nap:rank=1:step=5:seconds=6", "unknown fault 'loader_nap'"},
      {"loader_sleep:rank=1:step=5", "no seconds="},
      {"loader_sleep:rank=1:step=0:seconds=6", "step=0 is not a whole number in [1,"},
      {"loader_sleep:rank=-1:step=5:seconds=6", "rank=-1 is not a whole number"},
      {"loader_sleep:rank=1:step=5:seconds=6s", "seconds=6s is not a whole number"},
      {"loader_sleep:rank=1:rank=2:step=5:seconds=6", "'rank' is given twice"},
      {"loader_sleep:rank=1:step=5:seconds=6:speed=2", "unknown key 'speed'"},
      {"loader_sleep:rank1:step=5:seconds=6", "'rank1' is not key=value"},
  };
  for (const auto& [spec, why] : cases) {
    absl::StatusOr<Fault> fault = ParseFault(spec);
    ASSERT_FALSE(fault.ok()) << spec;
    EXPECT_EQ(fault.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(fault.status().message(), HasSubstr(why)) << spec;
    EXPECT_THAT(fault.status().message(), HasSubstr("expected loader_sleep:")) << spec;
  }
}

TEST(FaultFromEnvironment, NamesTheVariable) {
  ::setenv(kFaultEnv, "loader_sleep:rank=x", 1);
  absl::StatusOr<Fault> fault = FaultFromEnvironment();
  ::unsetenv(kFaultEnv);
  ASSERT_FALSE(fault.ok());
  EXPECT_THAT(fault.status().message(), HasSubstr("TRAINC_FAULT: fault 'loader_sleep:rank=x'"));
  fault = FaultFromEnvironment();
  ASSERT_TRUE(fault.ok());
  EXPECT_EQ(fault->kind, Fault::Kind::kNone);
}

class CountingSource : public BatchSource {
 public:
  absl::Status Fill(int, const Plan&, Device&) override {
    ++fills;
    return absl::OkStatus();
  }
  int fills = 0;
};

// The source says so and sleeps once, at its step, then serves as before.
TEST(SleepingBatchSource, SleepsOnceAtItsStep) {
  CountingSource inner;
  Fault fault;
  fault.kind = Fault::Kind::kLoaderSleep;
  fault.rank = 1;
  fault.step = 2;
  std::ostringstream log;
  SleepingBatchSource source(&inner, fault, log);
  HostTestDevice device;
  const Plan plan;
  for (int64_t step = 1; step <= 3; ++step) {
    source.SetStep(step);
    for (int micro = 0; micro < 2; ++micro) ASSERT_TRUE(source.Fill(micro, plan, device).ok());
    EXPECT_EQ(log.str().empty(), step < 2) << step;
  }
  EXPECT_EQ(inner.fills, 6);
  EXPECT_EQ(log.str(),
            "train: fault injection (TRAINC_FAULT): rank 1 sleeps 0 s in load_batch at step 2\n");
}

}  // namespace
}  // namespace trainc
