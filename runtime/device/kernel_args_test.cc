// ResolveKernels: one kernel per instruction (fusion is the plan's), a
// fused linear activation's outputs; and a unit family's resolution
// (compiler/ops/kernel_families.h), group_norm's: its typed sizes from the
// shapes, its refusals naming the instruction; cross_entropy's labels, an
// i32 operand read through its Args; attention's geometry and its
// log-sum-exp, f32 under any precision; a convolution's window and max
// pooling's i32 argmax (compiler/ops/window_family.h).
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

// h = relu(linear(x, W, b)): as two instructions, or (`fused`) as one
// linear_relu writing h alone (`keep_pre`: y and h).
Plan LinearRelu(bool fused, bool keep_pre = false) {
  Plan plan;
  plan.micro_batch = 2;
  plan.buffers = {Make(0, "x", BufferKind::kInput, {2, 4}, 0),
                  Make(1, "W", BufferKind::kParameter, {3, 4}, 64),
                  Make(2, "b", BufferKind::kParameter, {3}, 256),
                  Make(3, "y", BufferKind::kActivation, {2, 3}, 320),
                  Make(4, "h", BufferKind::kActivation, {2, 3}, 384)};
  Instruction linear;
  linear.id = 0;
  linear.op = fused ? "linear_relu" : "linear";
  linear.inputs = {0, 1, 2};
  linear.outputs = !fused ? std::vector<int>{3} : keep_pre ? std::vector<int>{3, 4}
                                                           : std::vector<int>{4};
  plan.instructions = {linear};
  if (!fused) {
    Instruction relu;
    relu.id = 1;
    relu.op = "relu";
    relu.inputs = {3};
    relu.outputs = {4};
    plan.instructions.push_back(relu);
  }
  plan.arena_bytes = 512;
  return plan;
}

// Fusion is the plan's (compiler/graph/fuse_activation.h): a linear and
// the relu after it stay two kernels.
TEST(KernelArgs, ResolvesEachInstructionAsItsOwnKernel) {
  std::vector<char> arena(512);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(LinearRelu(/*fused=*/false), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)[0].op, KernelOp::kLinear);
  EXPECT_EQ((*k)[0].linear.act, Activation::kNone);
  EXPECT_EQ((*k)[0].y[1], nullptr);
  // Its sizes are the linear family's Args alone.
  EXPECT_GT((*k)[0].linear.rows, 0);
  EXPECT_GT((*k)[0].linear.in, 0);
  EXPECT_GT((*k)[0].linear.out, 0);
  EXPECT_EQ((*k)[0].rows, 0);
  EXPECT_EQ((*k)[1].op, KernelOp::kRelu);
}

// linear_relu: the activation in place in y[0] without pre, into y[1]
// with it.
TEST(KernelArgs, ALinearActivationWritesPreOnlyWhenThePlanKeepsIt) {
  std::vector<char> arena(512);
  absl::StatusOr<std::vector<KernelArgs>> alone =
      ResolveKernels(LinearRelu(/*fused=*/true), arena.data(), arena.size(), "test");
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ((*alone)[0].op, KernelOp::kLinearRelu);
  EXPECT_EQ((*alone)[0].linear.act, Activation::kRelu);
  EXPECT_FALSE((*alone)[0].linear.pre_kept);
  EXPECT_EQ((*alone)[0].y[0], reinterpret_cast<float*>(arena.data() + 384));
  EXPECT_EQ((*alone)[0].y[1], nullptr);
  EXPECT_EQ((*alone)[0].linear.rows, 2);
  absl::StatusOr<std::vector<KernelArgs>> kept = ResolveKernels(
      LinearRelu(/*fused=*/true, /*keep_pre=*/true), arena.data(), arena.size(), "test");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ((*kept)[0].y[0], reinterpret_cast<float*>(arena.data() + 320));
  EXPECT_EQ((*kept)[0].y[1], reinterpret_cast<float*>(arena.data() + 384));
  EXPECT_TRUE((*kept)[0].linear.pre_kept);
}

// group_norm of x (`shape`, weight and bias of `channels`) in `groups`.
Plan GroupNorm(std::vector<int64_t> shape, int64_t channels, double groups) {
  Plan plan;
  const int64_t n = shape[0];
  plan.buffers = {Make(0, "x", BufferKind::kActivation, shape, 0),
                  Make(1, "n.weight", BufferKind::kParameter, {channels}, 4096),
                  Make(2, "n.bias", BufferKind::kParameter, {channels}, 4608),
                  Make(3, "y", BufferKind::kActivation, shape, 8192),
                  Make(4, "mean", BufferKind::kActivation, {n, 2}, 12288),
                  Make(5, "rstd", BufferKind::kActivation, {n, 2}, 12800)};
  Instruction gn;
  gn.id = 0;
  gn.op = "group_norm";
  gn.label = "n";
  gn.inputs = {0, 1, 2};
  gn.outputs = {3, 4, 5};
  gn.attrs = {{"groups", groups}, {"eps", 1e-5}};
  plan.instructions = {gn};
  plan.arena_bytes = 16384;
  return plan;
}

TEST(KernelArgs, AUnitFamilyResolvesItsOwnSizes) {
  std::vector<char> arena(16384);
  // An image [N, C, H, W]: channels on axis 1, H W positions after them.
  absl::StatusOr<std::vector<KernelArgs>> image =
      ResolveKernels(GroupNorm({3, 6, 4, 5}, 6, 2), arena.data(), arena.size(), "test");
  ASSERT_TRUE(image.ok()) << image.status();
  const ops::GroupNormFamily::Args& a = (*image)[0].group_norm;
  EXPECT_EQ((*image)[0].op, KernelOp::kGroupNorm);
  EXPECT_EQ(a.n, 3);
  EXPECT_EQ(a.channels, 6);
  EXPECT_EQ(a.groups, 2);
  EXPECT_EQ(a.outer, 1);
  EXPECT_EQ(a.inner, 20);
  EXPECT_FLOAT_EQ(a.eps, 1e-5f);
  // A sequence [N, T, C]: channels last, T positions before them.
  absl::StatusOr<std::vector<KernelArgs>> seq =
      ResolveKernels(GroupNorm({3, 7, 6}, 6, 2), arena.data(), arena.size(), "test");
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ((*seq)[0].group_norm.outer, 7);
  EXPECT_EQ((*seq)[0].group_norm.inner, 1);
  EXPECT_EQ((*seq)[0].group_norm.channels, 6);
}

TEST(KernelArgs, AUnitFamilyRefusesNamingTheInstruction) {
  std::vector<char> arena(16384);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(GroupNorm({3, 6, 4, 5}, 6, 4), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "test: instruction 0 (group_norm \"n\"): attr groups does not divide the channels");
  k = ResolveKernels(GroupNorm({3, 6, 4, 5}, 5, 1), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(), "test: instruction 0 (group_norm \"n\"): weight is not [C]");
}

// cross_entropy_grad of probs [4, 10] with labels of `label_dtype`.
Plan CrossEntropyGrad(DType label_dtype) {
  Plan plan;
  plan.buffers = {Make(0, "probs", BufferKind::kActivation, {4, 10}, 0),
                  Make(1, "labels", BufferKind::kInput, {4}, 256),
                  Make(2, "dlogits", BufferKind::kActivation, {4, 10}, 512)};
  plan.buffers[1].dtype = label_dtype;
  Instruction ce;
  ce.id = 0;
  ce.op = "cross_entropy_grad";
  ce.label = "loss";
  ce.inputs = {0, 1};
  ce.outputs = {2};
  ce.attrs = {{"scale", 0.125}};
  plan.instructions = {ce};
  plan.arena_bytes = 1024;
  return plan;
}

TEST(KernelArgs, AUnitFamilysIdsAreReadThroughItsArgs) {
  std::vector<char> arena(1024);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(CrossEntropyGrad(DType::kI32), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  const ops::CrossEntropyFamily::Args& a = (*k)[0].cross_entropy;
  EXPECT_EQ(a.rows, 4);
  EXPECT_EQ(a.classes, 10);
  EXPECT_EQ(a.loss_scale, 0.125);
  EXPECT_EQ(static_cast<const void*>(a.labels), arena.data() + 256);
  EXPECT_EQ((*k)[0].x[1], nullptr);  // not a float operand
  EXPECT_EQ(static_cast<const void*>((*k)[0].x[0]), arena.data());

  k = ResolveKernels(CrossEntropyGrad(DType::kF32), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "test: instruction 0 (cross_entropy_grad \"loss\"): ids are not i32");
}

// attention(qkv) -> y, lse, with two query heads sharing one key/value
// head of 4 features, rotary positions; qkv and y bf16 (precision = bf16),
// lse of `lse_dtype`.
Plan Attention(DType lse_dtype) {
  Plan plan;
  plan.buffers = {Make(0, "qkv", BufferKind::kActivation, {2, 3, 16}, 0),
                  Make(1, "y", BufferKind::kActivation, {2, 3, 8}, 512),
                  Make(2, "lse", BufferKind::kActivation, {2, 2, 3}, 768)};
  plan.buffers[0].dtype = plan.buffers[1].dtype = DType::kBF16;
  plan.buffers[2].dtype = lse_dtype;
  for (Buffer& b : plan.buffers) b.bytes = b.bytes / 4 * DTypeBytes(b.dtype);
  Instruction attn;
  attn.id = 0;
  attn.op = "attention";
  attn.label = "attn";
  attn.inputs = {0};
  attn.outputs = {1, 2};
  attn.attrs = {{"heads", 2}, {"kv_heads", 1}, {"rope", 1}, {"rope_theta", 500}};
  plan.instructions = {attn};
  plan.arena_bytes = 1024;
  return plan;
}

TEST(KernelArgs, AttentionResolvesItsGeometryAndKeepsLseF32) {
  std::vector<char> arena(1024);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(Attention(DType::kF32), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  const attention::Geometry& g = (*k)[0].attention;
  EXPECT_EQ(g.batch, 2);
  EXPECT_EQ(g.seq, 3);
  EXPECT_EQ(g.heads, 2);
  EXPECT_EQ(g.kv_heads, 1);
  EXPECT_EQ(g.head_dim, 4);
  EXPECT_TRUE(g.rope);
  EXPECT_EQ(g.rope_theta, 500.0f);
  // Its sizes are its Args' alone.
  EXPECT_EQ((*k)[0].rows, 0);

  k = ResolveKernels(Attention(DType::kBF16), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "test: instruction 0 (attention \"attn\"): output 1 (lse) is not f32");
}

// conv2d(x[2, 3, 6, 6], w[4, 3, 3, 3]) -> y[2, 4, 6, 6], workspace: no
// bias, padding 1, `stride`.
Plan Conv2d(double stride) {
  Plan plan;
  plan.micro_batch = 2;
  plan.buffers = {Make(0, "x", BufferKind::kActivation, {2, 3, 6, 6}, 0),
                  Make(1, "w", BufferKind::kParameter, {4, 3, 3, 3}, 896),
                  Make(2, "y", BufferKind::kActivation, {2, 4, 6, 6}, 1344),
                  Make(3, "ws", BufferKind::kWorkspace, {16}, 2496)};
  Instruction conv;
  conv.id = 0;
  conv.op = "conv2d";
  conv.label = "c";
  conv.inputs = {0, 1};
  conv.outputs = {2, 3};
  conv.attrs = {{"stride", stride}, {"padding", 1}};
  plan.instructions = {conv};
  plan.arena_bytes = 2560;
  return plan;
}

TEST(KernelArgs, AConvolutionResolvesItsWindow) {
  std::vector<char> arena(2560);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(Conv2d(1), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  const WindowGeometry& g = (*k)[0].window;
  EXPECT_EQ(g.n, 2);
  EXPECT_EQ(g.c, 3);
  EXPECT_EQ(g.h, 6);
  EXPECT_EQ(g.o, 4);
  EXPECT_EQ(g.kh, 3);
  EXPECT_EQ(g.oh, 6);
  EXPECT_EQ(g.ow, 6);
  EXPECT_EQ(g.padding, 1);
  EXPECT_FALSE(g.has_bias);
  EXPECT_EQ((*k)[0].x[2], nullptr);
  EXPECT_EQ((*k)[0].workspace, arena.data() + 2496);
  EXPECT_EQ((*k)[0].y[1], nullptr);
  EXPECT_EQ((*k)[0].rows, 0);

  k = ResolveKernels(Conv2d(4), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "test: instruction 0 (conv2d \"c\"): the windows do not tile the padded image");
}

// max_pool2d(x[1, 2, 4, 4]) -> y[1, 2, 2, 2], argmax, workspace: 2 x 2
// windows, stride 2; argmax of `argmax_dtype`.
Plan MaxPool(DType argmax_dtype) {
  Plan plan;
  plan.micro_batch = 1;
  plan.buffers = {Make(0, "x", BufferKind::kActivation, {1, 2, 4, 4}, 0),
                  Make(1, "y", BufferKind::kActivation, {1, 2, 2, 2}, 128),
                  Make(2, "argmax", BufferKind::kActivation, {1, 2, 2, 2}, 192),
                  Make(3, "ws", BufferKind::kWorkspace, {16}, 256)};
  plan.buffers[2].dtype = argmax_dtype;
  Instruction pool;
  pool.id = 0;
  pool.op = "max_pool2d";
  pool.label = "p";
  pool.inputs = {0};
  pool.outputs = {1, 2, 3};
  pool.attrs = {{"kernel_h", 2}, {"kernel_w", 2}, {"stride", 2}, {"padding", 0}};
  plan.instructions = {pool};
  plan.arena_bytes = 320;
  return plan;
}

TEST(KernelArgs, MaxPoolingsArgmaxIsI32) {
  std::vector<char> arena(320);
  absl::StatusOr<std::vector<KernelArgs>> k =
      ResolveKernels(MaxPool(DType::kI32), arena.data(), arena.size(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)[0].window.oh, 2);
  EXPECT_EQ((*k)[0].workspace, arena.data() + 256);

  k = ResolveKernels(MaxPool(DType::kF32), arena.data(), arena.size(), "test");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().message(),
            "test: instruction 0 (max_pool2d \"p\"): argmax is not i32 shaped like y");
}

}  // namespace
}  // namespace trainc
