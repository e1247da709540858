// CpuDevice's streams, events, errors and plan preparation. The kernels'
// numbers are kernels_test's; whole plans are runtime/exec's tests.
#include "runtime/cpu/cpu_device.h"

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/device/bf16.h"
#include "runtime/device/device.h"

namespace trainc {
namespace {

TEST(CpuDeviceTest, ArenaIsZeroedAlignedAndBoundsChecked) {
  CpuDevice device;
  EXPECT_EQ(device.arena(), nullptr);
  ASSERT_TRUE(device.AllocateArena(1000).ok());
  ASSERT_NE(device.arena(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(device.arena()) % 64, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(device.arena()[i], 0);
  EXPECT_EQ(device.AllocateArena(10).code(),
            absl::StatusCode::kFailedPrecondition);

  const float in[2] = {1.5f, -2.0f};
  float out[2] = {};
  ASSERT_TRUE(device.Upload(992, in, 8).ok());
  ASSERT_TRUE(device.Download(992, out, 8).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(device.Upload(996, in, 8).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(device.Download(-4, out, 4).code(), absl::StatusCode::kOutOfRange);
}

// DownloadFloats (device.h) reads f32 as is and bf16 widened, and refuses
// other dtypes and ranges outside the buffer.
TEST(CpuDeviceTest, DownloadFloatsWidensBf16AndStaysInsideTheBuffer) {
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(256).ok());
  const float f32[3] = {1.5f, -2.0f, 3.25f};
  const uint16_t bf16[3] = {0x3fc0, 0xc000, 0x4050};  // 1.5, -2, 3.25
  ASSERT_TRUE(device.Upload(0, f32, sizeof(f32)).ok());
  ASSERT_TRUE(device.Upload(64, bf16, sizeof(bf16)).ok());
  auto buffer_of = [](const char* name, DType dtype, int64_t offset, int64_t bytes) {
    Buffer b;
    b.name = name;
    b.dtype = dtype;
    b.offset = offset;
    b.bytes = bytes;
    return b;
  };
  const Buffer a = buffer_of("a", DType::kF32, 0, 12);
  const Buffer b = buffer_of("b", DType::kBF16, 64, 6);
  for (const Buffer& buffer : {a, b}) {
    float out[2] = {};
    ASSERT_TRUE(DownloadFloats(device, buffer, 1, 2, out).ok()) << buffer.name;
    EXPECT_EQ(out[0], -2.0f) << buffer.name;
    EXPECT_EQ(out[1], 3.25f) << buffer.name;
    EXPECT_EQ(DownloadFloats(device, buffer, 2, 2, out).code(),
              absl::StatusCode::kOutOfRange) << buffer.name;
  }
  const Buffer labels = buffer_of("labels", DType::kI32, 128, 8);
  float out[2];
  EXPECT_EQ(DownloadFloats(device, labels, 0, 2, out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuDeviceTest, CommStreamRunsInOrderAfterItsWaits) {
  CpuDevice device;
  ASSERT_TRUE(device.ResetEvents(2).ok());
  std::vector<int> order;  // only touched by the comm thread until Sync
  std::atomic<bool> compute_done{false};
  // Comm waits for event 0, which compute records only later.
  ASSERT_TRUE(device.WaitEvent(Stream::kComm, 0).ok());
  ASSERT_TRUE(device
                  .Submit(Stream::kComm,
                          [&] {
                            EXPECT_TRUE(compute_done.load());
                            order.push_back(1);
                            return absl::OkStatus();
                          })
                  .ok());
  ASSERT_TRUE(device
                  .Submit(Stream::kComm,
                          [&] {
                            order.push_back(2);
                            return absl::OkStatus();
                          })
                  .ok());
  ASSERT_TRUE(device.RecordEvent(Stream::kComm, 1).ok());
  absl::SleepFor(absl::Milliseconds(20));  // the comm thread must be parked
  EXPECT_TRUE(order.empty());
  ASSERT_TRUE(device
                  .Submit(Stream::kCompute,
                          [&] {
                            compute_done = true;
                            return absl::OkStatus();
                          })
                  .ok());
  ASSERT_TRUE(device.RecordEvent(Stream::kCompute, 0).ok());
  // Compute now waits for the comm stream's record.
  ASSERT_TRUE(device.WaitEvent(Stream::kCompute, 1).ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  ASSERT_TRUE(device.Synchronize().ok());
  EXPECT_EQ(device.RecordEvent(Stream::kCompute, 2).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CpuDeviceTest, CommWorkSubmittedFromTheCommStreamRunsInPlace) {
  CpuDevice device;
  ASSERT_TRUE(device.ResetEvents(1).ok());
  std::vector<int> order;
  ASSERT_TRUE(device
                  .Submit(Stream::kComm,
                          [&] {
                            order.push_back(1);
                            absl::Status s = device.Submit(Stream::kComm, [&] {
                              order.push_back(2);
                              return absl::OkStatus();
                            });
                            order.push_back(3);
                            return s;
                          })
                  .ok());
  ASSERT_TRUE(device.Synchronize().ok());
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(CpuDeviceTest, CommFailureIsStickyAndWakesWaiters) {
  CpuDevice device;
  ASSERT_TRUE(device.ResetEvents(1).ok());
  ASSERT_TRUE(device
                  .Submit(Stream::kComm,
                          [] { return absl::UnavailableError("peer died"); })
                  .ok());
  // These may be queued behind the failure or refused outright, depending
  // on whether the comm thread has got to it yet; either way they must not
  // run work, and must not leave a waiter hanging.
  bool ran = false;
  device.Submit(Stream::kComm, [&] {
          ran = true;
          return absl::OkStatus();
        })
      .IgnoreError();
  device.RecordEvent(Stream::kComm, 0).IgnoreError();
  // Compute waiting on the failed stream gets the error, not a hang.
  EXPECT_EQ(device.WaitEvent(Stream::kCompute, 0).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(device.Synchronize().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ran);
  EXPECT_EQ(device.Submit(Stream::kCompute, [] { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kUnavailable);
}

// A two-instruction plan: y = linear(x, w, b); h = relu(y).
Plan LinearReluPlan(bool event_between) {
  Plan plan;
  auto add = [&](const char* name, std::vector<int64_t> shape) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = name;
    b.shape = shape;
    b.bytes = 4;
    for (int64_t d : shape) b.bytes *= d;
    b.offset = plan.arena_bytes;
    plan.arena_bytes += (b.bytes + 63) / 64 * 64;
    plan.buffers.push_back(b);
    return b.id;
  };
  const int x = add("x", {2, 3}), w = add("w", {2, 3}), b = add("b", {2}),
            y = add("y", {2, 2}), h = add("h", {2, 2});
  Instruction lin;
  lin.id = 0;
  lin.op = "linear";
  lin.inputs = {x, w, b};
  lin.outputs = {y};
  if (event_between) lin.record_events = {0};
  Instruction relu;
  relu.id = 1;
  relu.op = "relu";
  relu.inputs = {y};
  relu.outputs = {h};
  plan.instructions = {lin, relu};
  plan.num_events = 1;
  return plan;
}

TEST(CpuDeviceTest, LinearThenReluGivesTheSameResultFusedOrNot) {
  for (bool event_between : {false, true}) {
    const Plan plan = LinearReluPlan(event_between);
    CpuDevice device;
    ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
    const float x[6] = {1, 2, 3, -1, -2, -3};
    const float w[6] = {1, 0, 0, 0, 1, 1};
    const float b[2] = {0.5f, -0.5f};
    ASSERT_TRUE(device.Upload(plan.buffers[0].offset, x, sizeof(x)).ok());
    ASSERT_TRUE(device.Upload(plan.buffers[1].offset, w, sizeof(w)).ok());
    ASSERT_TRUE(device.Upload(plan.buffers[2].offset, b, sizeof(b)).ok());
    ASSERT_TRUE(device.Prepare(plan).ok());
    for (const Instruction& instr : plan.instructions) {
      ASSERT_TRUE(device.RunKernel(plan, instr, StepState{}).ok());
    }
    float y[4], h[4];
    ASSERT_TRUE(device.Download(plan.buffers[3].offset, y, sizeof(y)).ok());
    ASSERT_TRUE(device.Download(plan.buffers[4].offset, h, sizeof(h)).ok());
    const float want_y[4] = {1.5f, 4.5f, -0.5f, -5.5f};
    const float want_h[4] = {1.5f, 4.5f, 0.0f, 0.0f};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(y[i], want_y[i]) << i;
      EXPECT_EQ(h[i], want_h[i]) << i;
    }
  }
}

TEST(CpuDeviceTest, PrepareChecksThePlan) {
  Plan plan = LinearReluPlan(false);
  {
    CpuDevice device;
    EXPECT_EQ(device.Prepare(plan).code(),
              absl::StatusCode::kFailedPrecondition);  // no arena yet
  }
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  Plan bad = plan;
  bad.instructions[1].op = "rellu";
  EXPECT_EQ(device.Prepare(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = plan;
  bad.instructions[0].inputs[2] = bad.instructions[0].inputs[0];  // bias [2,3]
  EXPECT_EQ(device.Prepare(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = plan;
  bad.buffers[4].offset = plan.arena_bytes;
  EXPECT_EQ(device.Prepare(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = plan;
  bad.instructions.push_back(bad.instructions[0]);
  bad.instructions[2].id = 2;
  bad.instructions[2].op = "optimizer";
  bad.instructions[2].attrs["bucket"] = 0;  // there are no buckets
  EXPECT_EQ(device.Prepare(bad).code(), absl::StatusCode::kInvalidArgument);
  // An instruction that is not a kernel (the executor's load_batch) is an
  // error from RunKernel, not a call through an empty table entry.
  bad = plan;
  Instruction load;
  load.id = 2;
  load.op = "load_batch";
  bad.instructions.push_back(load);
  ASSERT_TRUE(device.Prepare(bad).ok());
  EXPECT_EQ(device.RunKernel(bad, bad.instructions[2], StepState{}).code(),
            absl::StatusCode::kInvalidArgument);
  // RunKernel refuses a plan it did not prepare.
  ASSERT_TRUE(device.Prepare(plan).ok());
  Plan other = plan;
  EXPECT_EQ(device.RunKernel(other, other.instructions[0], StepState{}).code(),
            absl::StatusCode::kFailedPrecondition);
}

// precision = bf16: a cast rounds to nearest even (ties to the even
// mantissa), a kernel reads bf16 operands widened and rounds what it
// writes, and an accumulating kernel adds to the widened old value.
TEST(CpuDeviceTest, Bf16OperandsAreStagedAndRoundedToNearestEven) {
  Plan plan;
  plan.precision = Precision::kBf16;
  auto add = [&](const char* name, DType dtype) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = name;
    b.kind = BufferKind::kActivation;
    b.dtype = dtype;
    b.shape = {4};
    b.bytes = 4 * DTypeBytes(dtype);
    b.offset = plan.arena_bytes;
    plan.arena_bytes += 64;
    plan.buffers.push_back(b);
    return b.id;
  };
  const int x = add("x", DType::kF32), c = add("c", DType::kBF16), y = add("y", DType::kBF16),
            z = add("z", DType::kF32);
  auto instr = [&](const char* op, std::vector<int> in, int out, bool accumulate) {
    Instruction i;
    i.id = static_cast<int>(plan.instructions.size());
    i.op = op;
    i.inputs = std::move(in);
    i.outputs = {out};
    if (accumulate) i.attrs["accumulate"] = 1;
    plan.instructions.push_back(i);
  };
  instr("cast", {x}, c, false);          // c = bf16(x)
  instr("add", {c, c}, y, false);        // y = bf16(c + c)
  instr("copy_grad", {c}, y, true);      // y = bf16(y + c)
  instr("cast", {y}, z, false);          // z = y
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  // 1 + 2^-8 and 1 + 3 2^-8 lie halfway between bf16 neighbours (2^-7
  // apart): they go to the even one. 1 + 2^-8 + 2^-20 is past halfway.
  const float in[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -3.0f};
  ASSERT_TRUE(device.Upload(plan.buffers[x].offset, in, sizeof(in)).ok());
  ASSERT_TRUE(device.Prepare(plan).ok());
  for (const Instruction& i : plan.instructions) {
    ASSERT_TRUE(device.RunKernel(plan, i, StepState{}).ok()) << i.op;
  }
  const float rounded[4] = {1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -3.0f};
  float out[4];
  ASSERT_TRUE(device.Download(plan.buffers[z].offset, out, sizeof(out)).ok());
  // 3 c: 3 + 3 2^-6 = 3.046875 needs 1 + 2^-6 at exponent 1: exact; 3 (1 +
  // 2^-7) = 3 + 3 2^-7 lies between 3 + 2^-6 and 3 + 2^-5 (bf16 steps of
  // 2^-6 at 2..4): halfway, so even.
  const float want[4] = {3.0f, 3.0f + 3 * 0x1p-6f, 3.0f + 0x1p-5f, -9.0f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i], want[i]) << i << " (c = " << rounded[i] << ")";
  }
}

// Appends a buffer to `plan`'s arena (64-byte aligned); its id.
int AddBuffer(Plan& plan, const char* name, std::vector<int64_t> shape, DType dtype) {
  Buffer b;
  b.id = static_cast<int>(plan.buffers.size());
  b.name = name;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.bytes = DTypeBytes(dtype);
  for (int64_t d : b.shape) b.bytes *= d;
  b.offset = plan.arena_bytes;
  plan.arena_bytes += (b.bytes + 63) / 64 * 64;
  plan.buffers.push_back(b);
  return b.id;
}

// Appends an instruction to `plan`; it, to add attributes to.
Instruction& AddInstruction(Plan& plan, const char* op, std::vector<int> in,
                            std::vector<int> out) {
  Instruction& i = plan.instructions.emplace_back();
  i.id = static_cast<int>(plan.instructions.size()) - 1;
  i.op = op;
  i.inputs = std::move(in);
  i.outputs = std::move(out);
  return i;
}

// precision = bf16, a linear and its weight gradient on bf16 operands
// (small integers: every sum is exact, whatever the order): oneDNN's bf16
// matmul where the CPU has one, reading x, w and dy from the arena as they
// are (less staging), gives the bits of the widened path
// (TRAINC_BF16_GEMM=widened), db summed from the bf16 dy included.
Plan Bf16LinearPlan() {
  Plan plan;
  plan.precision = Precision::kBf16;
  auto add = [&](const char* name, std::vector<int64_t> shape, DType dtype) {
    return AddBuffer(plan, name, std::move(shape), dtype);
  };
  const DType bf16 = DType::kBF16;
  const int x = add("x", {4, 40}, bf16), w = add("w", {24, 40}, bf16), b = add("b", {24}, bf16),
            y = add("y", {4, 24}, bf16), dy = add("dy", {4, 24}, bf16),
            dw = add("dw", {24, 40}, DType::kF32), db = add("db", {24}, DType::kF32);
  auto instr = [&](const char* op, std::vector<int> in, std::vector<int> out) {
    AddInstruction(plan, op, std::move(in), std::move(out));
  };
  instr("linear", {x, w, b}, {y});
  instr("linear_grad_params", {dy, x}, {dw, db});
  return plan;
}

// Runs Bf16LinearPlan on small integers; y, dw and db as bytes.
std::vector<char> RunBf16Linear(const Plan& plan) {
  CpuDevice device;
  EXPECT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  for (int id : {0, 1, 2, 4}) {
    const Buffer& buf = plan.buffers[id];
    std::vector<uint16_t> v(buf.bytes / 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = FloatToBf16(static_cast<float>(i * 7 % 9) - 4);
    EXPECT_TRUE(device.Upload(buf.offset, v.data(), buf.bytes).ok());
  }
  EXPECT_TRUE(device.Prepare(plan).ok());
  for (const Instruction& i : plan.instructions) {
    EXPECT_TRUE(device.RunKernel(plan, i, StepState{}).ok()) << i.op;
  }
  std::vector<char> out;
  for (int id : {3, 5, 6}) {
    const Buffer& buf = plan.buffers[id];
    std::vector<char> bytes(buf.bytes);
    EXPECT_TRUE(device.Download(buf.offset, bytes.data(), buf.bytes).ok());
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

TEST(CpuDeviceTest, Bf16LinearOnOneDnnGivesTheWidenedBits) {
  const Plan plan = Bf16LinearPlan();
  const absl::StatusOr<int64_t> native_staging = CpuBf16StagingBytes(plan);
  const std::vector<char> native = RunBf16Linear(plan);
  setenv("TRAINC_BF16_GEMM", "widened", 1);
  const absl::StatusOr<int64_t> widened_staging = CpuBf16StagingBytes(plan);
  const std::vector<char> widened = RunBf16Linear(plan);
  unsetenv("TRAINC_BF16_GEMM");
  EXPECT_EQ(native, widened);
  ASSERT_TRUE(native_staging.ok() && widened_staging.ok());
  // Widened: the linear's x, w, b and y (y's staging 4 x 24 floats).
  EXPECT_EQ(*widened_staging, 640 + 3840 + 128 + 384);
  if (absl::StartsWith(cpu::Bf16GemmSummary(), "oneDNN matmul")) {
    EXPECT_EQ(*native_staging, 128 + 384);  // b and y only
  } else {
    EXPECT_EQ(*native_staging, *widened_staging);
  }
}

// precision = bf16's attention: where its products run on bf16, q|k|v,
// dy, y and dqkv are read and written as they are, and the planner's
// estimate (CpuBf16StagingBytes) leaves them out as Prepare does; the
// plan then runs (no f32 slot read as bf16).
TEST(CpuDeviceTest, Bf16AttentionStagingEstimateLeavesOutNativeOperands) {
  Plan plan;
  plan.precision = Precision::kBf16;
  auto add = [&](const char* name, std::vector<int64_t> shape, DType dtype) {
    return AddBuffer(plan, name, std::move(shape), dtype);
  };
  const DType bf16 = DType::kBF16, f32 = DType::kF32;
  // B 1, T 8, 2 heads over 1 key/value head of 16: q|k|v 64 wide, y 32.
  const int qkv = add("qkv", {1, 8, 64}, bf16), y = add("y", {1, 8, 32}, bf16),
            lse = add("lse", {1, 2, 8}, f32), dy = add("dy", {1, 8, 32}, bf16),
            dqkv = add("dqkv", {1, 8, 64}, bf16), delta = add("delta", {1, 2, 8}, f32);
  auto instr = [&](const char* op, std::vector<int> in, std::vector<int> out) {
    AddInstruction(plan, op, std::move(in), std::move(out))
        .attrs = {{"heads", 2}, {"kv_heads", 1}};
  };
  instr("attention", {qkv}, {y, lse});
  instr("attention_grad", {dy, qkv, y, lse}, {dqkv, delta});
  const absl::StatusOr<int64_t> native = CpuBf16StagingBytes(plan);
  setenv("TRAINC_BF16_GEMM", "widened", 1);
  const absl::StatusOr<int64_t> widened = CpuBf16StagingBytes(plan);
  unsetenv("TRAINC_BF16_GEMM");
  ASSERT_TRUE(native.ok() && widened.ok()) << native.status() << widened.status();
  // Widened, the backward's (the larger): dy, q|k|v, y and dqkv in f32.
  EXPECT_EQ(*widened, 4 * (256 + 512 + 256 + 512));
  EXPECT_EQ(*native, cpu::Bf16Gemm::Native() ? 0 : *widened);
  CpuDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  std::vector<uint16_t> ones(512, FloatToBf16(0.25f));
  for (int id : {qkv, dy}) {
    ASSERT_TRUE(device.Upload(plan.buffers[id].offset, ones.data(), plan.buffers[id].bytes).ok());
  }
  ASSERT_TRUE(device.Prepare(plan).ok());
  for (const Instruction& i : plan.instructions) {
    ASSERT_TRUE(device.RunKernel(plan, i, StepState{}).ok()) << i.op;
  }
  // Every key alike: y is v's row (0.25), whatever the weights.
  std::vector<uint16_t> out(256);
  ASSERT_TRUE(device.Download(plan.buffers[y].offset, out.data(), plan.buffers[y].bytes).ok());
  for (uint16_t v : out) EXPECT_EQ(Bf16ToFloat(v), 0.25f);
}

}  // namespace
}  // namespace trainc
