// Runs under mpirun (mpi_communicator_test.sh): every rank runs every test,
// and each checks exact sums over the job's ranks.
#include "runtime/comm/mpi/mpi_communicator.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/comm/testing/collective_checks.h"

namespace trainc {
namespace {

MpiCommunicator& Comm() {
  static MpiCommunicator* comm = [] {
    auto c = MpiCommunicator::Create();
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return *comm;
}

// Distinct per rank and element; integers, so float sums are exact.
float Value(int rank, int64_t i) { return static_cast<float>((i * 13 + rank * 5) % 101 + rank); }
float Sum(int world, int64_t i) {
  float s = 0;
  for (int q = 0; q < world; ++q) s += Value(q, i);
  return s;
}

// "" when data[i] == want(i) for i in [begin, end), else the first
// mismatch. Checks never stop a test early: a rank that left a test while
// its peers went on to the next collective would hang the job.
template <typename Want>
std::string Mismatch(const std::vector<float>& data, int64_t begin, int64_t end, Want want) {
  for (int64_t i = begin; i < end; ++i) {
    if (data[i] != want(i)) {
      return "i " + std::to_string(i) + ": " + std::to_string(data[i]) + " != " +
             std::to_string(want(i));
    }
  }
  return "";
}

TEST(MpiCommunicatorTest, AllReduceSum) {
  MpiCommunicator& comm = Comm();
  ASSERT_GE(comm.world_size(), 2) << "run under mpirun -np 2 or more";
  for (int64_t count : {int64_t{1}, int64_t{1000}, int64_t{3'000'001}}) {
    std::vector<float> data(count);
    for (int64_t i = 0; i < count; ++i) data[i] = Value(comm.rank(), i);
    EXPECT_TRUE(comm.AllReduceSum(data.data(), count, nullptr).ok());
    EXPECT_EQ(Mismatch(data, 0, count, [&](int64_t i) { return Sum(comm.world_size(), i); }), "")
        << "count " << count;
  }
}

// ZeRO's pair: each rank's segment summed, then gathered in place.
TEST(MpiCommunicatorTest, ReduceScatterThenInPlaceAllGather) {
  for (int64_t count : {int64_t{1}, int64_t{12345}}) {
    EXPECT_EQ(testing::CheckReduceScatterThenAllGather(Comm(), count), "");
  }
}

TEST(MpiCommunicatorTest, AllGatherFromASeparateBuffer) {
  MpiCommunicator& comm = Comm();
  const int world = comm.world_size(), r = comm.rank();
  std::vector<float> in = {static_cast<float>(r), static_cast<float>(10 * r)};
  std::vector<float> out(2 * world, -1);
  EXPECT_TRUE(comm.AllGather(in.data(), out.data(), 2, nullptr).ok());
  for (int q = 0; q < world; ++q) {
    EXPECT_EQ(out[2 * q], q);
    EXPECT_EQ(out[2 * q + 1], 10 * q);
  }
}

TEST(MpiCommunicatorTest, BroadcastAndBarrier) {
  MpiCommunicator& comm = Comm();
  const int root = comm.world_size() - 1;
  std::vector<float> data(777);
  for (int64_t i = 0; i < 777; ++i) data[i] = Value(comm.rank(), i);
  EXPECT_TRUE(comm.Broadcast(data.data(), 777, root, nullptr).ok());
  EXPECT_EQ(Mismatch(data, 0, 777, [root](int64_t i) { return Value(root, i); }), "");
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_FALSE(comm.Broadcast(data.data(), 1, comm.world_size(), nullptr).ok());
}

// bf16 gradients: exact small-integer sums (1/1024 lost to the rounding).
TEST(MpiCommunicatorTest, Bf16AllReduceAndReduceScatter) {
  for (int64_t count : {int64_t{5}, (int64_t{1} << 20) + 3}) {
    EXPECT_EQ(testing::CheckBf16Collectives(Comm(), count), "");
  }
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  // A failed rank leaves MPI unfinalised: its peers may be in a collective.
  if (result != 0) trainc::SkipMpiFinalizeAtExit();
  return result;
}
