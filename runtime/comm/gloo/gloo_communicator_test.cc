// GlooCommunicator with N ranks as N threads of this process, each with its
// own Gloo context, meeting through a FileStore in the test's temp folder.
#include "runtime/comm/gloo/gloo_communicator.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/comm/testing/collective_checks.h"
#include "runtime/store/store_protocol.h"
#include "runtime/store/store_server.h"

namespace trainc {
namespace {

std::string FreshDir(const std::string& name) {
  static int counter = 0;
  return absl::StrCat(::testing::TempDir(), "/gloo_", name, "_", counter++,
                      "_", absl::ToUnixNanos(absl::Now()));
}

// Runs body(comm) on `world` threads, one rank each.
void RunRanks(int world, const std::function<void(GlooCommunicator&)>& body) {
  const std::string dir = FreshDir(absl::StrCat("w", world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = world;
      options.file_store_dir = dir;
      options.timeout = absl::Seconds(20);
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), rank);
      EXPECT_EQ((*comm)->world_size(), world);
      body(**comm);
      // Leave together, as the trainer does: a rank tearing its pairs down
      // while a peer still finishes the last collective fails that peer.
      EXPECT_TRUE((*comm)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, AllReduceAllGatherBroadcastBarrier) {
  const int world = GetParam();
  RunRanks(world, [world](GlooCommunicator& comm) {
    const int r = comm.rank();
    // Sizes around Gloo's segmenting, and an odd one.
    for (int64_t count : {1, 7, 1000, 300001}) {
      std::vector<float> data(count);
      for (int64_t i = 0; i < count; ++i) data[i] = r * 1000.0f + i % 97;
      ASSERT_TRUE(comm.AllReduceSum(data.data(), count, nullptr).ok());
      for (int64_t i = 0; i < count; ++i) {
        const float want = 1000.0f * world * (world - 1) / 2 + world * (i % 97);
        ASSERT_EQ(data[i], want) << "count " << count << " i " << i;
      }
    }
    const int64_t count = 5;
    std::vector<float> in(count), out(count * world, -1.0f);
    for (int64_t i = 0; i < count; ++i) in[i] = r * 10.0f + i;
    ASSERT_TRUE(comm.AllGather(in.data(), out.data(), count, nullptr).ok());
    for (int q = 0; q < world; ++q) {
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[q * count + i], q * 10.0f + i);
      }
    }
    const int root = world - 1;
    std::vector<float> b(count, static_cast<float>(r));
    ASSERT_TRUE(comm.Broadcast(b.data(), count, root, nullptr).ok());
    for (float v : b) ASSERT_EQ(v, static_cast<float>(root));
    EXPECT_FALSE(comm.Broadcast(b.data(), count, world, nullptr).ok());
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

// ZeRO-1's pair: a bucket reduce-scattered in place (each rank's segment
// becomes the sum of that segment), then the segments all-gathered in place.
// Twice on the same buffer (the cached algorithm); small buckets go over the
// sync pairs, the largest over the async ones.
TEST_P(GlooCollectivesTest, ReduceScatterThenInPlaceAllGather) {
  RunRanks(GetParam(), [](GlooCommunicator& comm) {
    for (int64_t count : {16, 1000, 1 << 20}) {
      EXPECT_EQ(testing::CheckReduceScatterThenAllGather(comm, count, /*rounds=*/2), "");
    }
  });
}

// grad_comm = bf16: values are rounded to bf16 before they travel (1 +
// 2^-10 arrives as 1), and sums of small integers are exact in bf16, so
// every result is known exactly. A bucket over one ring piece included.
TEST_P(GlooCollectivesTest, Bf16AllReduceAndReduceScatter) {
  RunRanks(GetParam(), [](GlooCommunicator& comm) {
    for (int64_t count : {int64_t{5}, (int64_t{1} << 20) + 3}) {
      EXPECT_EQ(testing::CheckBf16Collectives(comm, count), "");
    }
  });
}

// A bucket larger than the communicator's 4 MiB ring piece (2^20 floats) is
// reduced piece by piece: 3,000,000 floats are two whole pieces and a
// partial one. Every element differs from its neighbours and from rank to
// rank, so a piece reduced twice, never, or at the wrong offset shows.
// (Values stay below 2^24: every sum is exact.)
TEST_P(GlooCollectivesTest, BucketLargerThanOnePieceIsReducedOnceEverywhere) {
  const int world = GetParam();
  RunRanks(world, [world](GlooCommunicator& comm) {
    const int r = comm.rank();
    constexpr int64_t kCount = 3000000;
    constexpr int64_t kPeriod = 65521;  // prime: no piece boundary aliases
    auto value = [](int rank, int64_t i) {
      return static_cast<float>(i % kPeriod + 65536 * rank);
    };
    std::vector<float> data(kCount);
    for (int64_t i = 0; i < kCount; ++i) data[i] = value(r, i);
    // Twice: the second call reuses the cached rings of the first.
    for (int round = 0; round < 2; ++round) {
      std::vector<float> bucket = data;
      ASSERT_TRUE(comm.AllReduceSum(bucket.data(), kCount, nullptr).ok());
      int64_t wrong = 0, first_wrong = -1;
      for (int64_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int q = 0; q < world; ++q) want += value(q, i);
        if (bucket[i] != want) {
          if (wrong++ == 0) first_wrong = i;
        }
      }
      ASSERT_EQ(wrong, 0) << "rank " << r << " round " << round << ": "
                          << wrong << " of " << kCount
                          << " elements wrong, the first at " << first_wrong
                          << " (piece " << first_wrong / (int64_t{1} << 20)
                          << ")";
    }
  });
}
// Every rank must end with the same bits (replicas that add in different
// orders drift apart): sums of values of very different magnitudes, where
// the order of the additions shows in the rounding, fp32 and bf16, with
// counts from one float to more than one ring piece.
TEST_P(GlooCollectivesTest, AllReduceGivesEveryRankTheSameBits) {
  const int world = GetParam();
  for (bool bf16 : {false, true}) {
    for (int64_t count : {1, 1000, 1100000}) {
      SCOPED_TRACE(absl::StrCat(bf16 ? "bf16 " : "fp32 ", count));
      std::vector<std::vector<float>> results(world);
      RunRanks(world, [&](GlooCommunicator& comm) {
        const int r = comm.rank();
        std::vector<float>& data = results[r];
        data.resize(count);
        const float scale[4] = {1.0f, 3e-4f, -1.0f, 7e-3f};
        for (int64_t i = 0; i < count; ++i) {
          data[i] = scale[(r + i) % 4] * (1.0f + 0.37f * static_cast<float>(i % 13));
        }
        absl::Status status = bf16 ? comm.AllReduceSumBf16(data.data(), count, nullptr)
                                   : comm.AllReduceSum(data.data(), count, nullptr);
        ASSERT_TRUE(status.ok()) << status;
      });
      for (int r = 1; r < world; ++r) {
        ASSERT_TRUE(results[r] == results[0]) << "rank " << r << " differs from rank 0";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCollectivesTest,
                         ::testing::Values(1, 2, 3, 4));

TEST(GlooCommunicatorTest, MissingPeerIsAnErrorNotAHang) {
  GlooOptions options;
  options.rank = 0;
  options.world_size = 2;  // rank 1 never comes
  options.file_store_dir = FreshDir("alone");
  options.timeout = absl::Seconds(1);
  // A hang is Bazel's test timeout; returning at all, with the rendezvous
  // timeout's error (not another one), is what this checks.
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  // Which rank is missing, from where, not Gloo's "Wait timeout for key(s)".
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::HasSubstr(absl::StrCat("rank 1 of 2 did not join job ",
                                                options.store_prefix, " within 1s")));
}

// A rank stopped part way through the rendezvous: it joined the first of
// the communicator's contexts (here by hand, through Gloo itself) and never
// the second. Gloo's error names the key "trainc_ring/1"; the message must
// still name rank 1, which the launcher reads to blame it.
TEST(GlooCommunicatorTest, PeerMissingFromALaterContextIsNamed) {
  GlooOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.file_store_dir = FreshDir("half");
  options.timeout = absl::Seconds(1);
  std::filesystem::create_directories(options.file_store_dir);
  absl::Notification rank0_returned;  // until then rank 1 keeps its pairs open
  std::thread half_joined([&] {
    gloo::rendezvous::FileStore base(options.file_store_dir);
    gloo::rendezvous::PrefixStore store(options.store_prefix, base);
    auto context = std::make_shared<gloo::rendezvous::Context>(1, 2);
    context->setTimeout(std::chrono::seconds(20));
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    context->connectFullMesh(store, device);
    rank0_returned.WaitForNotification();
  });
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm = GlooCommunicator::Create(options);
  rank0_returned.Notify();
  half_joined.join();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::HasSubstr("trainc_ring/1"));  // what Gloo gave up on
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::StartsWith("rank 1 of 2 did not join job trainc within 1s"));
}

// Every rank missing is named, not only the first key Gloo waited for.
TEST(GlooCommunicatorTest, EveryMissingPeerIsNamed) {
  GlooOptions options;
  options.rank = 0;
  options.world_size = 4;  // ranks 1, 2 and 3 never come
  options.file_store_dir = FreshDir("three_missing");
  options.timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm = GlooCommunicator::Create(options);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::StartsWith("ranks 1, 2, 3 of 4 did not join job trainc within 1s"));
}

// A loopback port nothing listens on (for a moment).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

GlooOptions JobStoreOptions(int rank, int world, int port, absl::Duration timeout) {
  GlooOptions options;
  options.rank = rank;
  options.world_size = world;
  options.store_host = "127.0.0.1";
  options.store_port = port;
  options.store_key = store::JobKey("secret", "job");
  options.store_origin = "MASTER_ADDR:MASTER_PORT";
  options.timeout = timeout;
  return options;
}

// The ranks meet through the job's store that rank 0 serves, and reduce.
TEST(GlooCommunicatorTest, RanksMeetThroughTheJobStore) {
  const int world = 3, port = FreePort();
  std::vector<std::thread> threads;
  for (int rank = world - 1; rank >= 0; --rank) {  // rank 0 last: the others retry
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
          GlooCommunicator::Create(JobStoreOptions(rank, world, port, absl::Seconds(20)));
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data = {static_cast<float>(rank + 1)};
      ASSERT_TRUE((*comm)->AllReduceSum(data.data(), 1, nullptr).ok());
      EXPECT_EQ(data[0], 6.0f);
      EXPECT_TRUE((*comm)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(GlooCommunicatorTest, RanksMissingFromTheJobStoreAreNamed) {
  const int port = FreePort();
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Create(JobStoreOptions(0, 3, port, absl::Seconds(1)));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::StartsWith(absl::StrCat(
                  "ranks 1, 2 of 3 did not join job trainc within 1s (the job's store at "
                  "127.0.0.1:", port, ", MASTER_ADDR:MASTER_PORT)")));
}

// Rank 0 gives up first (the shorter timeout); rank 1, still waiting, asks
// rank 0's store who is missing when its own timeout passes: rank 0 serves
// on until its peers leave (at most another timeout of its own).
TEST(GlooCommunicatorTest, RankZeroServesUntilThePeersHaveNamedTheMissingRank) {
  const int port = FreePort();
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> rank1 = absl::UnknownError("not run");
  std::thread second([&] {  // first: it waits for rank 0's store to come up
    rank1 = GlooCommunicator::Create(JobStoreOptions(1, 3, port, absl::Milliseconds(2500)));
  });
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> rank0 =
      GlooCommunicator::Create(JobStoreOptions(0, 3, port, absl::Seconds(2)));
  second.join();
  for (const auto* comm : {&rank0, &rank1}) {
    ASSERT_FALSE(comm->ok());
    EXPECT_THAT(std::string(comm->status().message()),
                ::testing::HasSubstr("rank 2 of 3 did not join job trainc"));
  }
}

// A rank of another secret is refused at the store; rank 0 says so when
// the rank it waited for never came.
TEST(GlooCommunicatorTest, AStrangerIsRefusedAndRankZeroSaysSo) {
  const int port = FreePort();
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> rank0 = absl::UnknownError("not run");
  std::thread first([&] {
    rank0 = GlooCommunicator::Create(JobStoreOptions(0, 2, port, absl::Seconds(3)));
  });
  GlooOptions stranger = JobStoreOptions(1, 2, port, absl::Seconds(3));
  stranger.store_key = store::JobKey("another secret", "job");
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> rank1 = GlooCommunicator::Create(stranger);
  first.join();
  ASSERT_FALSE(rank1.ok());
  EXPECT_EQ(rank1.status().code(), absl::StatusCode::kPermissionDenied) << rank1.status();
  EXPECT_THAT(std::string(rank1.status().message()),
              ::testing::HasSubstr(absl::StrCat("the job's store at 127.0.0.1:", port,
                                                " refused rank 1")));
  ASSERT_FALSE(rank0.ok());
  EXPECT_THAT(std::string(rank0.status().message()),
              ::testing::HasSubstr("rank 1 of 2 did not join"));
  EXPECT_THAT(std::string(rank0.status().message()),
              ::testing::HasSubstr("the job's store refused 1 connection(s) whose token"));
}

TEST(GlooCommunicatorTest, APortInUseIsNamedByRankZero) {
  // Another job's store holds the port.
  StoreServerOptions held;
  held.key = store::JobKey("other", "job");
  absl::StatusOr<std::unique_ptr<StoreServer>> other = StoreServer::Start(held);
  ASSERT_TRUE(other.ok()) << other.status();
  const int port = (*other)->port();
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Create(JobStoreOptions(0, 2, port, absl::Seconds(1)));
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(std::string(comm.status().message()),
              ::testing::HasSubstr(absl::StrCat("gloo: rank 0 cannot serve the job's store on "
                                                "127.0.0.1:", port, ": Address already in use")));
  EXPECT_THAT(std::string(comm.status().message()), ::testing::HasSubstr("TRAINC_STORE_PORT"));
  // Rank 1 of this job finds the other job's store, and tells it nothing.
  comm = GlooCommunicator::Create(JobStoreOptions(1, 2, port, absl::Seconds(1)));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kPermissionDenied) << comm.status();
}

// A peer that dies between collectives (a killed rank) makes the next
// collective an error here. Gloo writes to its sockets with writev(), so
// without Create's SIGPIPE guard the write to the dead peer would kill this
// process silently instead. The peer is this test binary run afresh (a
// forked copy of this process would inherit Gloo's state without its
// threads): DISABLED_DeadPeer below, which joins as rank 1, waits for a
// byte on the pipe this test holds, and exits.
constexpr char kDeadPeerDirEnv[] = "TRAINC_TEST_DEAD_PEER_DIR";
constexpr char kDeadPeerFdEnv[] = "TRAINC_TEST_DEAD_PEER_FD";

TEST(GlooCommunicatorTest, DISABLED_DeadPeer) {
  const char* dir = std::getenv(kDeadPeerDirEnv);
  const char* fd = std::getenv(kDeadPeerFdEnv);
  if (dir == nullptr || fd == nullptr) GTEST_SKIP() << "run by DeadPeerIsAnErrorNotADeath";
  GlooOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.file_store_dir = dir;
  options.timeout = absl::Seconds(10);
  const bool ok = GlooCommunicator::Create(options).ok();
  char byte;
  const bool told = ::read(std::atoi(fd), &byte, 1) == 1;
  ::_exit(ok && told ? 0 : 1);
}

// Starts DISABLED_DeadPeer as rank 1 of a fresh job and joins it as rank
// 0; the peer exits as soon as this returns (its pipe is closed).
absl::StatusOr<std::unique_ptr<GlooCommunicator>> JoinDyingPeer(int* peer_status) {
  const std::string dir = FreshDir("dead_peer");
  int joined[2];
  if (::pipe(joined) != 0) return absl::InternalError("pipe");
  const pid_t child = ::fork();
  if (child < 0) return absl::InternalError("fork");
  if (child == 0) {
    ::close(joined[1]);
    ::setenv(kDeadPeerDirEnv, dir.c_str(), 1);
    ::setenv(kDeadPeerFdEnv, std::to_string(joined[0]).c_str(), 1);
    ::execl("/proc/self/exe", "gloo_communicator_test",
            "--gtest_filter=GlooCommunicatorTest.DISABLED_DeadPeer",
            "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(joined[0]);
  GlooOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.file_store_dir = dir;
  options.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Create(options);
  (void)!::write(joined[1], "j", 1);  // rank 1 dies once rank 0 has joined
  ::close(joined[1]);
  if (::waitpid(child, peer_status, 0) != child) return absl::InternalError("waitpid");
  return comm;
}

TEST(GlooCommunicatorTest, DeadPeerIsAnErrorNotADeath) {
  // What is checked is the collective after the peer's death, not the
  // rendezvous: two processes started together here were seen to lose
  // their handshake now and then (Gloo: "Connection closed by peer"), so a
  // failed join is tried again with a new job, after a pause that grows:
  // the failures come in bursts (three in 125 ms once, on a busy machine).
  int status = 0;
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm = JoinDyingPeer(&status);
  for (int attempt = 1; attempt < 6 && !comm.ok(); ++attempt) {
    absl::SleepFor(absl::Milliseconds(200) * attempt);
    comm = JoinDyingPeer(&status);
  }
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  std::vector<float> data(1 << 20, 1.0f);
  absl::Status result;
  for (int i = 0; i < 5 && result.ok(); ++i) {
    result = (*comm)->AllReduceSum(data.data(), data.size(), nullptr);
  }
  EXPECT_FALSE(result.ok());
}

TEST(GlooCommunicatorTest, RejectsBadRanks) {
  GlooOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_EQ(GlooCommunicator::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  EXPECT_EQ(GlooCommunicator::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // no rendezvous folder
}

}  // namespace
}  // namespace trainc
