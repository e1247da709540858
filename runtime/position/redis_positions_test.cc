#include "runtime/position/redis_positions.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/position/testing/two_instruction_plan.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

constexpr char kRedis[] = "/usr/bin/redis-server";

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A redis-server of its own on a loopback port, for the test's lifetime.
class RedisPositionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access(kRedis, X_OK) != 0) GTEST_SKIP() << kRedis << " is not installed";
    port_ = FreePort();
    const std::string port = std::to_string(port_);
    server_ = ::fork();
    if (server_ == 0) {
      ::execl(kRedis, kRedis, "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--logfile", "/dev/null", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !Connect(0).ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void TearDown() override {
    if (server_ <= 0) return;
    ::kill(server_, SIGTERM);
    ::waitpid(server_, nullptr, 0);
  }
  absl::StatusOr<std::unique_ptr<RedisPositions>> Connect(int) {
    return RedisPositions::Connect("127.0.0.1", port_, "job-1");
  }
  static Plan TwoInstructionPlan() {
    return testing::TwoInstructionPlan("load_batch", "load_batch micro 0", Phase::kData);
  }
  int port_ = 0;
  pid_t server_ = -1;
};

// Two ranks publish through the server; the table read from it has both,
// with labels; when rank 1's publishing stops (a frozen rank), its alive
// key expires and it is the one behind, though rank 0 is further back.
TEST_F(RedisPositionsTest, TheTableComesFromTheServerAndAFrozenRankIsBehind) {
  ::unsetenv(kPositionDirEnv);
  auto board0 = PositionBoard::ForRank(0);
  auto board1 = PositionBoard::ForRank(1);
  ASSERT_TRUE(board0.ok() && board1.ok());
  for (auto* b : {&*board0, &*board1}) {
    (*b)->SetLabels(TwoInstructionPlan());
    (*b)->Stage(RankStage::kStep, 7);
  }
  (*board0)->Compute(7, 0);
  (*board0)->CommBegin(1);
  (*board1)->Compute(7, 0);
  (*board1)->CommBegin(1);
  auto zero = Connect(0);
  auto one = Connect(1);
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(one.ok()) << one.status();
  (*zero)->StartPublishing(board0->get(), 0);
  (*one)->StartPublishing(board1->get(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  std::vector<RankPosition> p = (*zero)->ReadAll(2);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].step, 7);
  EXPECT_EQ(p[1].label, "all-reduce of bucket 0");
  EXPECT_THAT(p[1].where, HasSubstr("in all-reduce of bucket 0 (instruction 1 of 2) for"));
  EXPECT_THAT(p[1].where, HasSubstr("compute issued up to data \"load_batch micro 0\""));
  EXPECT_FALSE(p[0].behind || p[1].behind);  // a tie, both beating

  one->reset();  // rank 1 freezes: no more publishing
  (*board0)->CommEnd();
  (*board0)->Compute(6, 0);  // rank 0's progress alone would blame rank 0
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  p = (*zero)->ReadAll(2);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_FALSE(p[0].behind);
  EXPECT_TRUE(p[1].behind) << FormatPositionTable(p);
  EXPECT_GE(p[1].seconds, 2.5);  // its age goes on after its last publish
  EXPECT_THAT(FormatPositionTable(p),
              HasSubstr("rank 1: step 7, in all-reduce of bucket 0 (instruction 1 of 2)"));
  // Another job's keys are its own.
  auto other = RedisPositions::Connect("127.0.0.1", port_, "job-2");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE((*other)->ReadAll(2).empty());
}

TEST_F(RedisPositionsTest, AnUnreachableServerIsAnErrorNamingIt) {
  const int closed = FreePort();
  auto none = RedisPositions::Connect("127.0.0.1", closed, "job");
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("cannot reach Redis at 127.0.0.1:" + std::to_string(closed)));
}

}  // namespace
}  // namespace trainc
