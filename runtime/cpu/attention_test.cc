// The CPU's O(T) attention against a naive double-precision attention
// written here from the definition (no blocks, no BLAS, grouped heads by
// repeat_kv, RoPE by rotate_half), its gradient against finite
// differences, and the properties the runtime relies on: causality,
// overwrite vs accumulate, bit-identical results whatever the batch split.
#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/device/bf16.h"

namespace trainc::cpu {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

Vec Random(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

void ExpectNear(const Vec& got, const DVec& want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "at " << i;
  }
}

attention::Geometry Shape(int64_t b, int64_t t, int64_t h, int64_t kv, int64_t d,
                          bool rope) {
  attention::Geometry g;
  g.batch = b;
  g.seq = t;
  g.heads = h;
  g.kv_heads = kv;
  g.head_dim = d;
  g.rope = rope;
  g.rope_theta = 10000.0f;
  return g;
}

// transformers' rotate_half RoPE on one head row of position t, in double,
// with its f32 inv_freq and f32 angles.
std::vector<double> Rope(const attention::Geometry& g, int64_t t, std::vector<double> x) {
  if (!g.rope) return x;
  const int64_t n = g.head_dim / 2;
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const float inv = 1.0f / std::pow(g.rope_theta, float(2 * i) / float(g.head_dim));
    const double a = static_cast<float>(t) * inv;
    out[i] = x[i] * std::cos(a) - x[i + n] * std::sin(a);
    out[i + n] = x[i + n] * std::cos(a) + x[i] * std::sin(a);
  }
  return out;
}

// Naive attention in double: y[B, T, H d] and lse[B, H, T].
void Naive(const attention::Geometry& g, const Vec& qkv, DVec* y, DVec* lse) {
  const int64_t T = g.seq, d = g.head_dim, W = (g.heads + 2 * g.kv_heads) * d;
  y->assign(g.batch * T * g.heads * d, 0.0);
  lse->assign(g.batch * g.heads * T, 0.0);
  auto head = [&](int64_t b, int64_t t, int64_t col, bool rotate) {
    std::vector<double> x(qkv.begin() + (b * T + t) * W + col,
                          qkv.begin() + (b * T + t) * W + col + d);
    return rotate ? Rope(g, t, x) : x;
  };
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.heads; ++h) {
      const int64_t kv = h / (g.heads / g.kv_heads);  // repeat_kv
      for (int64_t i = 0; i < T; ++i) {
        const std::vector<double> q = head(b, i, h * d, true);
        std::vector<double> s(i + 1);
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const std::vector<double> k = head(b, j, (g.heads + kv) * d, true);
          for (int64_t c = 0; c < d; ++c) s[j] += q[c] * k[c] / std::sqrt(double(d));
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
        (*lse)[(b * g.heads + h) * T + i] = m + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) {
          const std::vector<double> v = head(b, j, (g.heads + g.kv_heads + kv) * d, false);
          for (int64_t c = 0; c < d; ++c) {
            (*y)[(b * T + i) * g.heads * d + h * d + c] += std::exp(s[j] - m) / sum * v[c];
          }
        }
      }
    }
  }
}

Vec RunForward(const attention::Geometry& g, const Vec& qkv, Vec* lse = nullptr) {
  Vec y(g.batch * g.seq * g.OutWidth(), std::nanf("")), l(g.batch * g.heads * g.seq);
  Attention(g, qkv.data(), y.data(), l.data());
  if (lse != nullptr) *lse = l;
  return y;
}

// dqkv of loss = sum(w * y), overwriting (or adding to) `dqkv`.
void RunGrad(const attention::Geometry& g, const Vec& qkv, const Vec& w, bool accumulate,
             Vec& dqkv) {
  Vec lse;
  const Vec y = RunForward(g, qkv, &lse);
  Vec delta(lse.size(), std::nanf(""));
  AttentionGrad(g, w.data(), qkv.data(), y.data(), lse.data(), accumulate, dqkv.data(),
                delta.data());
}

struct Case {
  int64_t b, t, h, kv, d;
  bool rope;
};

class AttentionCases : public testing::TestWithParam<Case> {
 protected:
  attention::Geometry G() const {
    const Case& c = GetParam();
    return Shape(c.b, c.t, c.h, c.kv, c.d, c.rope);
  }
};

TEST_P(AttentionCases, ForwardMatchesNaiveAttention) {
  const attention::Geometry g = G();
  // Spread wide enough that softmax rows are far from uniform.
  const Vec qkv = Random(g.batch * g.seq * g.QkvWidth(), 72, -2.0f, 2.0f);
  DVec y_ref, lse_ref;
  Naive(g, qkv, &y_ref, &lse_ref);
  Vec lse;
  ExpectNear(RunForward(g, qkv, &lse), y_ref, 1e-5, 1e-6);
  ExpectNear(lse, lse_ref, 1e-6, 1e-6);
}

// Central differences of sum(w * y) through the naive attention.
TEST_P(AttentionCases, GradientMatchesFiniteDifferences) {
  const attention::Geometry g = G();
  const int64_t n = g.batch * g.seq * g.QkvWidth();
  const Vec qkv = Random(n, 82, -1.5f, 1.5f);
  const Vec w = Random(g.batch * g.seq * g.OutWidth(), 83);
  Vec grad(n, std::nanf(""));  // overwrite must not read it
  RunGrad(g, qkv, w, false, grad);
  auto loss = [&](const Vec& x) {
    DVec y, lse;
    Naive(g, x, &y, &lse);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += w[i] * y[i];
    return s;
  };
  // Every element of a small case; a strided sample of a long one.
  const int64_t stride = n > 600 ? n / 300 + 1 : 1;
  for (int64_t i = 0; i < n; i += stride) {
    Vec up = qkv, down = qkv;
    const float h = 1e-2f;
    up[i] += h;
    down[i] -= h;
    const double fd = (loss(up) - loss(down)) / (double(up[i]) - down[i]);
    ASSERT_NEAR(grad[i], fd, 2e-4 + 2e-3 * std::fabs(fd)) << "element " << i;
  }
  // accumulate adds exactly the same gradient.
  const Vec prior = Random(n, 84);
  Vec acc = prior;
  RunGrad(g, qkv, w, true, acc);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], prior[i] + grad[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionCases,
    testing::Values(Case{2, 5, 2, 2, 4, false},  // GPT-2's layout
                    Case{1, 1, 1, 1, 4, false},  // a single token
                    // Past the kernel's block of rows and not a multiple of
                    // it: the triangle is cut with a partial last block.
                    Case{2, 150, 3, 3, 4, false},
                    Case{1, 7, 4, 2, 6, true},     // grouped query, rope
                    Case{2, 70, 4, 1, 8, true},    // multi-query, rope
                    Case{1, 9, 2, 2, 4, true}));  // rope, full heads

TEST(AttentionTest, IsCausal) {
  const attention::Geometry g = Shape(2, 150, 4, 2, 4, true);
  const Vec qkv = Random(g.batch * g.seq * g.QkvWidth(), 81);
  const Vec y = RunForward(g, qkv);
  for (int64_t t0 : {0, 3, 63, 64, 100, 149}) {
    SCOPED_TRACE(t0);
    // New keys and values for token t0 of batch row 1, every head.
    Vec changed = qkv;
    const int64_t base = (1 * g.seq + t0) * g.QkvWidth();
    for (int64_t c = g.KOffset(0); c < g.QkvWidth(); ++c) changed[base + c] += 0.5f;
    const Vec y2 = RunForward(g, changed);
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t t = 0; t < g.seq; ++t) {
        const int64_t row = (b * g.seq + t) * g.OutWidth();
        const bool same = std::equal(y.begin() + row, y.begin() + row + g.OutWidth(),
                                     y2.begin() + row);
        // Earlier tokens (and the other sequence) see exactly nothing of
        // it; t0 itself and every later token do.
        EXPECT_EQ(same, b == 0 || t < t0) << "batch " << b << " token " << t;
      }
    }
  }
}

// One call over B sequences writes, bit for bit, what B calls of one
// sequence write: the split of a batch across ranks or micro-steps cannot
// change a bit.
TEST(AttentionTest, BatchSplitIsBitIdentical) {
  const attention::Geometry g = Shape(3, 100, 4, 2, 8, true);
  attention::Geometry one = g;
  one.batch = 1;
  const int64_t n = g.seq * g.QkvWidth(), m = g.seq * g.OutWidth();
  const Vec qkv = Random(3 * n, 90), w = Random(3 * m, 91);
  Vec whole(3 * n);
  RunGrad(g, qkv, w, false, whole);
  for (int64_t b = 0; b < 3; ++b) {
    const Vec q(qkv.begin() + b * n, qkv.begin() + (b + 1) * n);
    const Vec wb(w.begin() + b * m, w.begin() + (b + 1) * m);
    Vec part(n);
    RunGrad(one, q, wb, false, part);
    ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + b * n)) << b;
  }
}

// ---- precision = bf16: the products on oneDNN's bf16 kernels ----

// Values bf16 represents, as the device's staging hands them over.
Vec RoundedToBf16(Vec v) {
  for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  return v;
}

// ||got - want|| / ||want||.
template <typename A, typename B>
double RelativeError(const A& got, const B& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
    norm += double(want[i]) * double(want[i]);
  }
  return std::sqrt(diff / norm);
}

std::vector<uint16_t> Bf16Of(const Vec& v) {
  std::vector<uint16_t> out(v.size());
  NarrowToBf16(v.data(), static_cast<int64_t>(v.size()), out.data());
  return out;
}

// y, lse and dqkv of sum(w * y) by the bf16 kernel, as the device runs it:
// q|k|v read as bf16 and, where `bf16_dy_y`, the backward's dy and y too
// (else as f32 values, as from an f32 tensor).
void RunBf16(const attention::Geometry& shape, const Vec& qkv, const Vec& w, Vec* y, Vec* lse,
             Vec* dqkv, bool accumulate = false, bool bf16_dy_y = true) {
  attention::Geometry g = shape;
  y->assign(g.batch * g.seq * g.OutWidth(), std::nanf(""));
  lse->assign(g.batch * g.heads * g.seq, std::nanf(""));
  const std::vector<uint16_t> qkv16 = Bf16Of(qkv), w16 = Bf16Of(w);
  g.native_inputs = 0b1;
  const float* fx[] = {reinterpret_cast<const float*>(qkv16.data())};
  float* fy[] = {y->data(), lse->data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttention, g, fx, fy, false), "");
  if (!accumulate) dqkv->assign(qkv.size(), std::nanf(""));
  Vec delta(lse->size(), std::nanf(""));
  const Vec y_bf16 = RoundedToBf16(*y);  // the device stores y in bf16
  const std::vector<uint16_t> y16 = Bf16Of(y_bf16);
  g.native_inputs = bf16_dy_y ? 0b111 : 0b010;
  const float* gx[] = {bf16_dy_y ? reinterpret_cast<const float*>(w16.data()) : w.data(),
                       fx[0],
                       bf16_dy_y ? reinterpret_cast<const float*>(y16.data()) : y_bf16.data(),
                       lse->data()};
  float* gy[] = {dqkv->data(), delta.data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttentionGrad, g, gx, gy, accumulate), "");
}

class Bf16AttentionCases : public AttentionCases {
 protected:
  void SetUp() override {
    if (!Bf16Gemm::Native()) GTEST_SKIP() << "no bf16 matmul kernels here: " << Bf16GemmSummary();
  }
};

// Within bf16's tolerance of the float64 attention on the same (bf16)
// operands, forward and backward; the gradient's reference is the f32
// kernel, itself within 1e-5 of float64 above.
TEST_P(Bf16AttentionCases, MatchesFloat64WithinBf16Tolerance) {
  const attention::Geometry g = G();
  const Vec qkv = RoundedToBf16(Random(g.batch * g.seq * g.QkvWidth(), 72, -2.0f, 2.0f));
  const Vec w = RoundedToBf16(Random(g.batch * g.seq * g.OutWidth(), 73));
  DVec y_ref, lse_ref;
  Naive(g, qkv, &y_ref, &lse_ref);
  Vec y, lse, dqkv;
  RunBf16(g, qkv, w, &y, &lse, &dqkv);
  // Rounding q', k' and P to bf16 (8 bits) moves y by ~2^-9 of its size.
  EXPECT_LT(RelativeError(y, y_ref), 1e-2);
  EXPECT_LT(RelativeError(lse, lse_ref), 1e-2);
  Vec dqkv_ref(qkv.size());
  RunGrad(g, qkv, w, false, dqkv_ref);
  EXPECT_LT(RelativeError(dqkv, dqkv_ref), 1e-2);
  // Not the f32 path by accident: bf16's rounding shows (one token's y is
  // its v, exactly).
  if (g.seq > 1) {
    EXPECT_GT(RelativeError(y, y_ref), 1e-6);
  }
  std::printf("bf16 attention: y %.2e, lse %.2e, dqkv %.2e relative error\n",
              RelativeError(y, y_ref), RelativeError(lse, lse_ref),
              RelativeError(dqkv, dqkv_ref));
  // accumulate adds exactly the same gradient.
  const Vec prior = Random(qkv.size(), 74);
  Vec acc = prior, y2, lse2;
  RunBf16(g, qkv, w, &y2, &lse2, &acc, true);
  for (size_t i = 0; i < acc.size(); ++i) ASSERT_EQ(acc[i], prior[i] + dqkv[i]) << i;
}

// dy and y read as the bf16 tensors they are give the bits their f32
// values give (rounding an exactly widened bf16 value is the identity).
TEST_P(Bf16AttentionCases, Bf16InputsGiveTheBitsOfTheirF32Values) {
  const attention::Geometry g = G();
  const Vec qkv = RoundedToBf16(Random(g.batch * g.seq * g.QkvWidth(), 75, -2.0f, 2.0f));
  const Vec w = RoundedToBf16(Random(g.batch * g.seq * g.OutWidth(), 76));
  Vec y, lse, dqkv, y2, lse2, dqkv2;
  RunBf16(g, qkv, w, &y, &lse, &dqkv, false, true);
  RunBf16(g, qkv, w, &y2, &lse2, &dqkv2, false, false);
  ASSERT_EQ(std::memcmp(dqkv.data(), dqkv2.data(), dqkv.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Bf16AttentionCases,
    testing::Values(Case{2, 5, 2, 2, 4, false},  // GPT-2's layout
                    Case{1, 1, 1, 1, 4, false},  // a single token
                    Case{2, 64, 4, 4, 32, false},  // tiny_gpt's heads
                    Case{2, 64, 8, 2, 32, true},   // llama_tiny's
                    // Past the whole-sequence length: blocks of rows, a
                    // partial last one.
                    Case{2, 150, 3, 3, 4, false},
                    Case{2, 200, 4, 1, 8, true},  // and multi-query, rope
                    // More pairs than a product takes: two chunks.
                    Case{5, 128, 16, 4, 8, true}));

// Bit for bit from call to call, and whatever the batch split (as the f32
// kernel: BatchSplitIsBitIdentical).
TEST(Bf16AttentionTest, BatchSplitIsBitIdentical) {
  if (!Bf16Gemm::Native()) GTEST_SKIP() << Bf16GemmSummary();
  for (int64_t t : {100, 150}) {
    SCOPED_TRACE(t);
    const attention::Geometry g = Shape(3, t, 4, 2, 8, true);
    attention::Geometry one = g;
    one.batch = 1;
    const int64_t n = g.seq * g.QkvWidth(), m = g.seq * g.OutWidth();
    const Vec qkv = RoundedToBf16(Random(3 * n, 90)), w = RoundedToBf16(Random(3 * m, 91));
    Vec y, lse, whole, again;
    RunBf16(g, qkv, w, &y, &lse, &whole);
    RunBf16(g, qkv, w, &y, &lse, &again);
    ASSERT_TRUE(std::equal(whole.begin(), whole.end(), again.begin()));
    for (int64_t b = 0; b < 3; ++b) {
      const Vec q(qkv.begin() + b * n, qkv.begin() + (b + 1) * n);
      const Vec wb(w.begin() + b * m, w.begin() + (b + 1) * m);
      Vec part;
      RunBf16(one, q, wb, &y, &lse, &part);
      ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + b * n)) << b;
    }
  }
}

// The backward on bf16 dy, q|k|v and y into dqkv, f32 or (`bf16_out`) bf16
// values in `out` (as many bits), added to when `accumulate`.
void GradInto(const attention::Geometry& shape, const std::vector<uint16_t>& dy,
              const std::vector<uint16_t>& qkv, const std::vector<uint16_t>& y, const Vec& lse,
              bool bf16_out, bool accumulate, void* out) {
  attention::Geometry g = shape;
  g.native_inputs = 0b111;
  g.native_outputs = bf16_out ? 1 : 0;
  Vec delta(lse.size());
  const float* x[] = {reinterpret_cast<const float*>(dy.data()),
                      reinterpret_cast<const float*>(qkv.data()),
                      reinterpret_cast<const float*>(y.data()), lse.data()};
  float* o[] = {static_cast<float*>(out), delta.data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttentionGrad, g, x, o, accumulate), "");
}

// y and dqkv written as the bf16 tensors they are hold the bits their f32
// values round to (dqkv added to: the sum in f32, then rounded), as the
// device's staging gave.
TEST_P(Bf16AttentionCases, Bf16OutputsAreTheRoundedF32Outputs) {
  attention::Geometry g = G();
  const std::vector<uint16_t> qkv = Bf16Of(Random(g.batch * g.seq * g.QkvWidth(), 77));
  const std::vector<uint16_t> dy = Bf16Of(Random(g.batch * g.seq * g.OutWidth(), 78));
  Vec y(dy.size()), lse(g.batch * g.heads * g.seq);
  std::vector<uint16_t> y16(dy.size());
  g.native_inputs = 1;
  const float* fx[] = {reinterpret_cast<const float*>(qkv.data())};
  float* f32_out[] = {y.data(), lse.data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttention, g, fx, f32_out, false), "");
  g.native_outputs = 1;
  float* bf16_out[] = {reinterpret_cast<float*>(y16.data()), lse.data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttention, g, fx, bf16_out, false), "");
  ASSERT_EQ(y16, Bf16Of(y));
  const std::vector<uint16_t> prior = Bf16Of(Random(qkv.size(), 79));
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate);
    Vec d32(qkv.size());
    WidenBf16(prior.data(), static_cast<int64_t>(prior.size()), d32.data());
    std::vector<uint16_t> d16 = prior;
    GradInto(G(), dy, qkv, y16, lse, false, accumulate, d32.data());
    GradInto(G(), dy, qkv, y16, lse, true, accumulate, d16.data());
    ASSERT_EQ(d16, Bf16Of(d32));
  }
}

// The family's decision for a plan: where the products run on bf16, an
// attention_grad whose q|k|v is bf16 reads its bf16 inputs as they are
// (native: no staging); with TRAINC_BF16_GEMM=widened, read when the plan
// is prepared, they stay staged and the kernel is the f32 one.
TEST(Bf16AttentionTest, PrepareAttentionDecidesOncePerPlan) {
  uint16_t dy[1], qkv[1], y[1];
  float lse[1];
  KernelArgs k;
  k.op = KernelOp::kAttentionGrad;
  k.attention.bf16_inputs = 0b111;  // the plan's facts: dy, q|k|v, y
  k.x[0] = reinterpret_cast<const float*>(dy);
  k.x[1] = reinterpret_cast<const float*>(qkv);
  k.x[2] = reinterpret_cast<const float*>(y);
  k.x[3] = lse;
  for (void* t : {static_cast<void*>(dy), static_cast<void*>(qkv), static_cast<void*>(y)}) {
    k.bf16[k.num_bf16++].bf16 = t;
  }
  uint16_t dqkv[1];
  float delta[1];
  k.attention.bf16_outputs = 0b1;  // dqkv (delta is f32)
  k.y[0] = reinterpret_cast<float*>(dqkv);
  k.y[1] = delta;
  k.bf16[k.num_bf16].bf16 = dqkv;
  k.bf16[k.num_bf16++].output = true;
  std::vector<KernelArgs> plan = {k};
  PrepareAttention(plan);
  const bool native = Bf16Gemm::Native();
  const auto expect = [&](uint32_t inputs, uint32_t outputs, bool marked) {
    EXPECT_EQ(plan[0].attention.native_inputs, inputs);
    EXPECT_EQ(plan[0].attention.native_outputs, outputs);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(plan[0].bf16[i].native, marked) << i;
    // The plan's facts stay as the resolver left them.
    EXPECT_EQ(plan[0].attention.bf16_inputs, k.attention.bf16_inputs);
  };
  expect(native ? 0b111u : 0u, native ? 0b1u : 0u, native);
  setenv("TRAINC_BF16_GEMM", "widened", 1);
  plan = {k};
  PrepareAttention(plan);
  unsetenv("TRAINC_BF16_GEMM");
  expect(0, 0, false);
  // Only q|k|v's bit decides: a bf16 dy beside an f32 q|k|v is staged.
  k.attention.bf16_inputs = 0b001;
  plan = {k};
  PrepareAttention(plan);
  EXPECT_EQ(plan[0].attention.native_inputs, 0u);
  EXPECT_FALSE(plan[0].bf16[0].native);
}

// One bf16 tensor read as two inputs (dy and y alike): every entry of it
// is native, so staging rewrites neither slot to f32 under a bf16 bit.
TEST(Bf16AttentionTest, PrepareAttentionMarksATensorReadTwice) {
  if (!Bf16Gemm::Native()) GTEST_SKIP() << Bf16GemmSummary();
  uint16_t same[1], qkv[1], dqkv[1];
  float lse[1], delta[1];
  KernelArgs k;
  k.op = KernelOp::kAttentionGrad;
  k.attention.bf16_inputs = 0b111;
  k.x[0] = k.x[2] = reinterpret_cast<const float*>(same);
  k.x[1] = reinterpret_cast<const float*>(qkv);
  k.x[3] = lse;
  k.y[0] = reinterpret_cast<float*>(dqkv);
  k.y[1] = delta;
  for (void* t : {static_cast<void*>(same), static_cast<void*>(qkv), static_cast<void*>(same)}) {
    k.bf16[k.num_bf16++].bf16 = t;
  }
  std::vector<KernelArgs> plan = {k};
  PrepareAttention(plan);
  EXPECT_EQ(plan[0].attention.native_inputs, 0b111u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(plan[0].bf16[i].native) << i;
}

// Unprepared (the resolver's facts alone), the kernel reads f32 slots: a
// bf16 plan whose device did not prepare it so never reads f32 as bf16.
TEST(Bf16AttentionTest, UnpreparedFactsRunTheF32Kernel) {
  attention::Geometry g = Shape(1, 8, 2, 1, 16, false);
  const attention::Geometry f32 = g;
  g.bf16_inputs = 0b1;
  g.bf16_outputs = 0b1;
  const Vec qkv = Random(g.batch * g.seq * g.QkvWidth(), 5);
  Vec y(g.batch * g.seq * g.OutWidth()), lse(g.batch * g.heads * g.seq);
  Vec y32(y.size()), lse32(lse.size());
  const float* x[] = {qkv.data()};
  float* out[] = {y.data(), lse.data()};
  ASSERT_EQ(OwnCpuKernel(KernelOp::kAttention, g, x, out, false), "");
  Attention(f32, qkv.data(), y32.data(), lse32.data());
  EXPECT_EQ(y, y32);
}

}  // namespace
}  // namespace trainc::cpu
