// NcclCommunicator with one rank: all-reduce is the identity, all-gather a
// copy, broadcast a no-op. Multi-rank runs are covered by the trainer's
// end-to-end tests on multi-GPU machines. SKIPs without a GPU.
#include "runtime/comm/nccl/nccl_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define TRAINC_TEST_HAS_CUDA_RUNTIME 1
#endif

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/device/bf16.h"
#include "runtime/cuda/cuda_device.h"

namespace trainc {
namespace {

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    if (CudaDeviceCount() == 0) {                                        \
      GTEST_SKIP() << "no CUDA GPU: CudaDeviceCount() == 0 (no driver " \
                      "or device on this machine)";                      \
    }                                                                    \
  } while (0)

TEST(NcclCommunicatorTest, FailsCleanlyWithoutGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  auto comm = CreateNcclCommunicator(0, 1, 0, std::string(128, '\0'));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnavailable);
}

TEST(NcclCommunicatorTest, RejectsBadIdAndRanks) {
  SKIP_WITHOUT_GPU();
  EXPECT_FALSE(CreateNcclCommunicator(0, 1, 0, "short").ok());
  EXPECT_FALSE(CreateNcclCommunicator(1, 1, 0, std::string(128, '\0')).ok());
}

TEST(NcclCommunicatorTest, SingleRankCollectives) {
  SKIP_WITHOUT_GPU();
  auto device = CreateCudaDevice(0);
  ASSERT_TRUE(device.ok()) << device.status();
  Device& d = **device;
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto made = CreateNcclCommunicator(0, 1, 0, *id);
  ASSERT_TRUE(made.ok()) << made.status();
  Communicator& comm = **made;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);

  const int64_t n = 1000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = 0.5f * i - 7;
  ASSERT_TRUE(d.AllocateArena(2 * n * 4).ok());
  ASSERT_TRUE(d.Upload(0, host.data(), n * 4).ok());
  ASSERT_TRUE(d.ResetEvents(1).ok());
  // The upload is on the compute stream; the collectives on comm.
  ASSERT_TRUE(d.RecordEvent(Stream::kCompute, 0).ok());
  ASSERT_TRUE(d.WaitEvent(Stream::kComm, 0).ok());
  float* a = reinterpret_cast<float*>(d.arena());
  void* stream = d.NativeStream(Stream::kComm);
  ASSERT_TRUE(comm.AllReduceSum(a, n, stream).ok());
  ASSERT_TRUE(comm.Broadcast(a, n, 0, stream).ok());
  ASSERT_TRUE(comm.AllGather(a, a + n, n, stream).ok());
  EXPECT_FALSE(comm.Broadcast(a, n, 1, stream).ok());
  ASSERT_TRUE(d.Synchronize().ok());
  ASSERT_TRUE(comm.Barrier().ok());
  std::vector<float> got(2 * n);
  ASSERT_TRUE(d.Download(0, got.data(), 2 * n * 4).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), host.data(), n * 4));
  EXPECT_EQ(0, std::memcmp(got.data() + n, host.data(), n * 4));

  // ZeRO-1's in-place reduce-scatter and all-gather over one rank: the
  // identity. bf16 gradients: each value rounded to bf16 (nearest even),
  // exactly as runtime/device/bf16.h rounds on the host.
  std::vector<float> odd(n);
  for (int64_t i = 0; i < n; ++i) odd[i] = 1.0f + i / 1000.0f + 1.0f / 3000;
  ASSERT_TRUE(d.Upload(0, odd.data(), n * 4).ok());
  ASSERT_TRUE(d.ResetEvents(1).ok());
  ASSERT_TRUE(d.RecordEvent(Stream::kCompute, 0).ok());
  ASSERT_TRUE(d.WaitEvent(Stream::kComm, 0).ok());
  ASSERT_TRUE(comm.ReduceScatterSum(a, n, stream).ok());
  ASSERT_TRUE(comm.AllGather(a, a, n, stream).ok());
  ASSERT_TRUE(comm.ReduceScatterSumBf16(a + n / 2, n / 2, stream).ok());
  ASSERT_TRUE(comm.AllReduceSumBf16(a, n / 2, stream).ok());
  ASSERT_TRUE(d.Synchronize().ok());
  ASSERT_TRUE(d.Download(0, got.data(), n * 4).ok());
  int64_t rounded = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], Bf16ToFloat(FloatToBf16(odd[i]))) << i;
    rounded += got[i] != odd[i];
  }
  EXPECT_GT(rounded, n * 9 / 10);  // the values lie off bf16's grid
}

#ifdef TRAINC_TEST_HAS_CUDA_RUNTIME
// A replayed CUDA graph's collectives are watched by an event after the
// replay (Communicator::WatchStream). A stream held by a host function
// past the bound (TRAINC_NCCL_TIMEOUT_S=1) stands for a peer that never
// joins: the watchdog aborts the communicator, Health() names the bound,
// and later collectives fail instead of hanging.
TEST(NcclCommunicatorTest, WatchdogAbortsAWatchedStreamPastItsBound) {
  SKIP_WITHOUT_GPU();
  setenv("TRAINC_NCCL_TIMEOUT_S", "1", 1);
  auto device = CreateCudaDevice(0);
  ASSERT_TRUE(device.ok()) << device.status();
  Device& d = **device;
  auto id = NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto made = CreateNcclCommunicator(0, 1, 0, *id);
  unsetenv("TRAINC_NCCL_TIMEOUT_S");
  ASSERT_TRUE(made.ok()) << made.status();
  Communicator& comm = **made;
  ASSERT_TRUE(d.AllocateArena(1024).ok());
  auto* stream = static_cast<cudaStream_t>(d.NativeStream(Stream::kComm));
  static std::atomic<bool> release{false};
  release = false;
  ASSERT_EQ(cudaLaunchHostFunc(
                stream,
                [](void*) {
                  while (!release.load()) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                  }
                },
                nullptr),
            cudaSuccess);
  ASSERT_TRUE(comm.WatchStream(stream).ok());
  EXPECT_TRUE(comm.Health().ok());  // within its bound
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (comm.Health().ok() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  release = true;
  const absl::Status health = comm.Health();
  EXPECT_FALSE(health.ok()) << "no abort within 60 s of a 1 s bound";
  EXPECT_THAT(std::string(health.message()),
              ::testing::HasSubstr("a collective did not finish in 1 s"));
  EXPECT_THAT(std::string(health.message()), ::testing::HasSubstr("communicator aborted"));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  float* a = reinterpret_cast<float*>(d.arena());
  EXPECT_FALSE(comm.AllReduceSum(a, 4, stream).ok());
}
#endif

}  // namespace
}  // namespace trainc
