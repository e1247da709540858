// The CPU's O(T) attention against a naive double-precision attention
// written here from the definition (no blocks, no BLAS, grouped heads by
// repeat_kv, RoPE by rotate_half), its gradient against finite
// differences, and the properties the runtime relies on: causality,
// overwrite vs accumulate, bit-identical results whatever the batch split.
#include "runtime/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace trainc::cpu
