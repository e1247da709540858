// Bf16Matmuls against the staging path it replaces: the f32 GEMM
// (RunF32) on the widened operands. Both form every product exactly in f32
// (bf16 x bf16 fits) and sum in f32, in orders of their own, so:
// - on small integers every partial sum is exact too: the bits must match;
// - on random values the two differ by at most the rounding of two f32
//   sums, 2 k 2^-24 sum |a_i b_i| per element;
// - the bf16 kernel gives one shape the same bits wherever its operands
//   lie (deterministic mode's requirement).
// Without a oneDNN bf16 kernel (ONEDNN_MAX_CPU_ISA=AVX2) nothing is chosen
// and the comparisons are skipped.
#include "runtime/cpu/bf16_matmul.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/device/bf16.h"

namespace trainc::cpu {
namespace {

bool HasBf16Kernel() { return absl::StartsWith(Bf16GemmSummary(), "oneDNN matmul, "); }

// A linear instruction over bf16 a (x[0]) and b (x[1]) into f32 y.
KernelArgs Args(KernelOp op, int64_t rows, int64_t in, int64_t out, const uint16_t* a,
                const uint16_t* b, float* y, bool accumulate) {
  KernelArgs k;
  k.op = op;
  k.linear.rows = rows, k.linear.in = in, k.linear.out = out;
  k.accumulate = accumulate;
  k.x[0] = reinterpret_cast<const float*>(a);
  k.x[1] = reinterpret_cast<const float*>(b);
  k.y[0] = y;
  k.num_bf16 = 2;
  k.bf16[0].bf16 = const_cast<uint16_t*>(a);
  k.bf16[1].bf16 = const_cast<uint16_t*>(b);
  return k;
}

// The product on the bf16 kernel; false when Choose took none.
bool RunBf16(const KernelArgs& k) {
  std::vector<KernelArgs> kernels = {k};
  Bf16Matmuls matmuls;
  matmuls.Choose(kernels);
  const bool chosen = kernels[0].bf16[0].native && kernels[0].bf16[1].native;
  EXPECT_EQ(chosen, kernels[0].bf16[0].native || kernels[0].bf16[1].native);
  EXPECT_TRUE(matmuls.Bind(kernels).ok());
  EXPECT_EQ(matmuls.Runs(0), chosen);
  if (chosen) {
    EXPECT_TRUE(matmuls.Run(0).ok());
  }
  return chosen;
}

// The staging path: the f32 GEMM on the widened operands.
void RunStaged(KernelArgs k, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  std::vector<float> wa(a.size()), wb(b.size());
  WidenBf16(a.data(), a.size(), wa.data());
  WidenBf16(b.data(), b.size(), wb.data());
  k.x[0] = wa.data();
  k.x[1] = wb.data();
  RunF32(LinearGemmOf(k));
}

struct Case {
  KernelOp op;
  bool accumulate;
};
const Case kCases[] = {{KernelOp::kLinear, false},          {KernelOp::kLinearRelu, false},
                       {KernelOp::kLinearGradInput, false}, {KernelOp::kLinearGradInput, true},
                       {KernelOp::kLinearGradParams, false}, {KernelOp::kLinearGradParams, true}};

// Elements of a (x or dy) and b (w or x), and of the product.
struct Sizes {
  int64_t a, b, c;
};
Sizes SizesOf(KernelOp op, int64_t rows, int64_t in, int64_t out) {
  if (op == KernelOp::kLinearGradParams) return {rows * out, rows * in, out * in};
  if (op == KernelOp::kLinearGradInput) return {rows * out, out * in, rows * in};
  return {rows * in, out * in, rows * out};
}

template <typename Draw>
std::vector<uint16_t> Bf16Values(int64_t n, Draw draw) {
  std::vector<uint16_t> v(n);
  for (uint16_t& e : v) e = FloatToBf16(draw());
  return v;
}

// Runs `c` on the bf16 kernel and staged, on small integers (the bits
// must match) or normal values (within the bound above); *ran: whether a
// bf16 kernel was chosen.
void Compare(const Case& c, int64_t rows, int64_t in, int64_t out, std::mt19937& rng,
             bool integers, bool* ran) {
  std::uniform_int_distribution<int> small(-8, 8);
  std::normal_distribution<float> normal;
  auto draw = [&] { return integers ? static_cast<float>(small(rng)) : normal(rng); };
  const Sizes n = SizesOf(c.op, rows, in, out);
  const std::vector<uint16_t> a = Bf16Values(n.a, draw), b = Bf16Values(n.b, draw);
  std::vector<float> got(n.c), want(n.c), mag(n.c, 0.0f);
  for (int64_t i = 0; i < n.c; ++i) got[i] = want[i] = integers ? small(rng) : normal(rng);
  const KernelArgs k = Args(c.op, rows, in, out, a.data(), b.data(), got.data(), c.accumulate);
  *ran = RunBf16(k);
  if (!*ran) return;
  KernelArgs staged = k;
  staged.y[0] = want.data();
  RunStaged(staged, a, b);
  if (integers) {
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n.c * sizeof(float)), 0)
        << "op " << static_cast<int>(c.op) << " accumulate " << c.accumulate << " shape "
        << rows << "x" << in << "x" << out;
    return;
  }
  // sum |a_i b_i| per element: the same product on |a|, |b|.
  std::vector<uint16_t> abs_a = a, abs_b = b;
  for (uint16_t& e : abs_a) e &= 0x7fff;
  for (uint16_t& e : abs_b) e &= 0x7fff;
  staged.y[0] = mag.data();
  staged.accumulate = false;
  RunStaged(staged, abs_a, abs_b);
  const GemmCall g = LinearGemmOf(k);
  for (int64_t i = 0; i < n.c; ++i) {
    const double bound = 2.0 * (g.k + 1) * std::ldexp(1.0, -24) * (mag[i] + std::fabs(want[i]));
    ASSERT_LE(std::fabs(got[i] - want[i]), bound)
        << "element " << i << " op " << static_cast<int>(c.op) << " accumulate "
        << c.accumulate << " shape " << rows << "x" << in << "x" << out;
  }
}

// rows, in, out: odd sizes, and the default MLP's layers and a GPT's.
constexpr int64_t kShapes[][3] = {
    {37, 70, 129}, {64, 784, 256}, {64, 256, 128}, {64, 128, 10}, {64, 768, 384}};

// Every case on every shape; false when no bf16 kernel ran.
bool CompareAll(bool integers, unsigned seed) {
  std::mt19937 rng(seed);
  for (const auto& shape : kShapes) {
    for (const Case& c : kCases) {
      bool ran = false;
      Compare(c, shape[0], shape[1], shape[2], rng, integers, &ran);
      if (!ran) return false;
    }
  }
  return true;
}

TEST(Bf16MatmulTest, SameBitsAsTheStagedGemmWhereEverySumIsExact) {
  if (!CompareAll(/*integers=*/true, 1)) GTEST_SKIP() << Bf16GemmSummary();
}

TEST(Bf16MatmulTest, WithinTwoF32SumsOfTheStagedGemm) {
  if (!CompareAll(/*integers=*/false, 2)) GTEST_SKIP() << Bf16GemmSummary();
}

// Deterministic mode runs the same product shapes on every split: a shape
// must give the same bits wherever its operands lie in the arena (another
// plan, another rank), prepared anew. (Rows do depend on the row count:
// oneDNN picks its K blocking and, below a few rows, its kernel by shape,
// as dnnl_sgemm does for f32.)
TEST(Bf16MatmulTest, SameBitsForAShapeWhereverItsOperandsLie) {
  if (!HasBf16Kernel()) GTEST_SKIP() << Bf16GemmSummary();
  constexpr int64_t kIn = 3072, kOut = 96;  // K beyond one block
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  auto draw = [&] { return normal(rng); };
  // Room for every operand: x or dy as a, w or x as w.
  const std::vector<uint16_t> a = Bf16Values(256 * kIn, draw), w = Bf16Values(256 * kIn, draw);
  for (KernelOp op : {KernelOp::kLinear, KernelOp::kLinearGradInput,
                      KernelOp::kLinearGradParams}) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{100}, int64_t{256}}) {
      const Sizes n = SizesOf(op, rows, kIn, kOut);
      std::vector<float> first(n.c);
      ASSERT_TRUE(RunBf16(Args(op, rows, kIn, kOut, a.data(), w.data(), first.data(), false)));
      for (int shift : {1, 5}) {  // operands 2 and 10 bytes further on
        std::vector<uint16_t> a2(a.begin(), a.begin() + n.a), w2(w.begin(), w.begin() + n.b);
        a2.insert(a2.begin(), shift, 0);
        w2.insert(w2.begin(), shift, 0);
        std::vector<float> again(n.c + shift);
        RunBf16(Args(op, rows, kIn, kOut, a2.data() + shift, w2.data() + shift,
                     again.data() + shift, false));
        EXPECT_EQ(std::memcmp(again.data() + shift, first.data(), n.c * sizeof(float)), 0)
            << "op " << static_cast<int>(op) << " rows " << rows << " shift " << shift;
      }
    }
  }
}

TEST(Bf16MatmulTest, OnlyBf16PairsAreChosen) {
  std::vector<uint16_t> a(4 * 8), b(8 * 8);
  std::vector<float> y(4 * 8);
  KernelArgs k = Args(KernelOp::kLinear, 4, 8, 8, a.data(), b.data(), y.data(), false);
  k.num_bf16 = 1;  // w is f32: staged, the f32 GEMM
  EXPECT_FALSE(RunBf16(k));
  EXPECT_EQ(RunBf16(Args(KernelOp::kLinear, 4, 8, 8, a.data(), b.data(), y.data(), false)),
            HasBf16Kernel());
}

TEST(Bf16MatmulTest, SummaryNamesTheKernelOrTheFallback) {
  const std::string s = Bf16GemmSummary();
  if (HasBf16Kernel()) {
    EXPECT_TRUE(absl::StrContains(s, "bf16")) << s;
    EXPECT_FALSE(absl::StrContains(s, "ref")) << s;
  } else {
    EXPECT_TRUE(absl::StartsWith(s, "widened to f32 (oneDNN ")) << s;
  }
}

}  // namespace
}  // namespace trainc::cpu
