// ResolveKernels' fusion of a linear and the activation after it: the
// fused kernel writes the activation's output while it still reads the
// linear's operands, so it fuses only when those bytes are apart.
#include "runtime/device/kernel_args.h"

#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

Buffer Make(int id, const char* name, BufferKind kind, std::vector<int64_t> shape,
            int64_t offset) {
  Buffer b;
  b.id = id;
  b.name = name;
  b.kind = kind;
  b.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  b.bytes = n * 4;
  b.offset = offset;
  return b;
}

// h = relu(linear(x, W, b)) with h at `h_offset` (b lies at 256).
Plan LinearRelu(int64_t h_offset) {
  Plan plan;
  plan.micro_batch = 2;
  plan.buffers = {Make(0, "x", BufferKind::kInput, {2, 4}, 0),
                  Make(1, "W", BufferKind::kParameter, {3, 4}, 64),
                  Make(2, "b", BufferKind::kParameter, {3}, 256),
                  Make(3, "y", BufferKind::kActivation, {2, 3}, 320),
                  Make(4, "h", BufferKind::kActivation, {2, 3}, h_offset)};
  Instruction linear;
  linear.id = 0;
  linear.op = "linear";
  linear.inputs = {0, 1, 2};
  linear.outputs = {3};
  Instruction relu;
  relu.id = 1;
  relu.op = "relu";
  relu.inputs = {3};
  relu.outputs = {4};
  plan.instructions = {linear, relu};
  plan.arena_bytes = 512;
  return plan;
}

TEST(KernelArgs, FusesALinearAndItsActivationWhenTheirBytesAreApart) {
  std::vector<char> arena(512);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(LinearRelu(/*h_offset=*/384), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)[0].act, Activation::kRelu);
  EXPECT_EQ((*k)[1].op, KernelOp::kFused);
}

TEST(KernelArgs, DoesNotFuseWhenTheActivationReusesAnOperandsBytes) {
  // h over the bias (its last reader is the linear: ZeRO-3's gathered
  // bias): fused, the kernel would overwrite b while it still reads it.
  std::vector<char> arena(512);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(LinearRelu(/*h_offset=*/256), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)[0].act, Activation::kNone);
  EXPECT_EQ((*k)[1].op, KernelOp::kRelu);
}

}  // namespace
}  // namespace trainc
