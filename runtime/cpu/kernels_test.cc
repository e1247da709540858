// Every kernel against a naive double-precision reference, both the
// overwrite and the accumulate path of each gradient kernel.
#include "runtime/cpu/kernels.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace cpu {
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

// |got - want| <= atol + rtol |want|, element by element.
void ExpectNear(const Vec& got, const DVec& want, double rtol = 2e-6,
                double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i]))
        << "at " << i;
  }
}

// The accumulate path must add to what is there: start from `prior` and
// expect prior + v.
DVec Plus(const Vec& prior, const DVec& v) {
  DVec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = prior[i] + v[i];
  return out;
}

constexpr int64_t kB = 7, kIn = 13, kOut = 5;

TEST(KernelsTest, LinearForwardWithFusedActivations) {
  const Vec x = Random(kB * kIn, 1), w = Random(kOut * kIn, 2),
            b = Random(kOut, 3);
  DVec ref(kB * kOut);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < kIn; ++i) s += double(x[r * kIn + i]) * w[o * kIn + i];
      ref[r * kOut + o] = s;
    }
  }
  Vec y(kB * kOut), h(kB * kOut);
  LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, y.data(),
                Activation::kNone, nullptr);
  ExpectNear(y, ref, 1e-5, 1e-6);

  LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, y.data(),
                Activation::kRelu, h.data());
  ExpectNear(y, ref, 1e-5, 1e-6);
  DVec relu(ref.size()), gelu(ref.size()), tanh_ref(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    relu[i] = std::max(ref[i], 0.0);
    gelu[i] = 0.5 * ref[i] * (1 + std::erf(ref[i] / std::sqrt(2.0)));
    tanh_ref[i] = std::tanh(ref[i]);
  }
  ExpectNear(h, relu, 1e-5, 1e-6);
  LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, y.data(),
                Activation::kGelu, h.data());
  ExpectNear(h, gelu, 1e-5, 1e-6);
  LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, y.data(),
                Activation::kTanh, h.data());
  ExpectNear(h, tanh_ref, 1e-5, 1e-6);

  // No bias.
  LinearForward(x.data(), w.data(), nullptr, kB, kIn, kOut, y.data(),
                Activation::kNone, nullptr);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t o = 0; o < kOut; ++o) ref[r * kOut + o] -= b[o];
  }
  ExpectNear(y, ref, 1e-5, 1e-6);
}

TEST(KernelsTest, LinearGradInput) {
  const Vec dy = Random(kB * kOut, 4), w = Random(kOut * kIn, 5);
  DVec ref(kB * kIn, 0.0);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t i = 0; i < kIn; ++i) {
      for (int64_t o = 0; o < kOut; ++o) {
        ref[r * kIn + i] += double(dy[r * kOut + o]) * w[o * kIn + i];
      }
    }
  }
  Vec dx = Random(kB * kIn, 6);
  LinearGradInput(dy.data(), w.data(), kB, kIn, kOut, false, dx.data());
  ExpectNear(dx, ref, 1e-5, 1e-6);
  const Vec prior = Random(kB * kIn, 7);
  dx = prior;
  LinearGradInput(dy.data(), w.data(), kB, kIn, kOut, true, dx.data());
  ExpectNear(dx, Plus(prior, ref), 1e-5, 1e-6);
}

TEST(KernelsTest, LinearGradParams) {
  const Vec dy = Random(kB * kOut, 8), x = Random(kB * kIn, 9);
  DVec dw_ref(kOut * kIn, 0.0), db_ref(kOut, 0.0);
  for (int64_t r = 0; r < kB; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      db_ref[o] += dy[r * kOut + o];
      for (int64_t i = 0; i < kIn; ++i) {
        dw_ref[o * kIn + i] += double(dy[r * kOut + o]) * x[r * kIn + i];
      }
    }
  }
  Vec dw = Random(kOut * kIn, 10), db = Random(kOut, 11);
  LinearGradParams(dy.data(), x.data(), kB, kIn, kOut, false, dw.data(),
                   db.data());
  ExpectNear(dw, dw_ref, 1e-5, 1e-6);
  ExpectNear(db, db_ref, 1e-5, 1e-6);
  const Vec dw0 = Random(kOut * kIn, 12), db0 = Random(kOut, 13);
  dw = dw0;
  db = db0;
  LinearGradParams(dy.data(), x.data(), kB, kIn, kOut, true, dw.data(),
                   db.data());
  ExpectNear(dw, Plus(dw0, dw_ref), 1e-5, 1e-6);
  ExpectNear(db, Plus(db0, db_ref), 1e-5, 1e-6);
}

// Elementwise forward f and gradient g (of f's output or input).
struct Unary {
  const char* name;
  void (*fwd)(const float*, int64_t, float*);
  void (*grad)(const float*, const float*, int64_t, bool, float*);
  double (*f)(double);
  double (*df)(double x, double y);  // derivative given input and output
  bool grad_takes_output;            // relu/tanh: y; gelu: x
};

const Unary kUnary[] = {
    {"relu", Relu, ReluGrad, [](double x) { return x > 0 ? x : 0.0; },
     [](double, double y) { return y > 0 ? 1.0 : 0.0; }, true},
    {"gelu", Gelu, GeluGrad,
     [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
     [](double x, double) {
       return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
              x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
     },
     false},
    {"tanh", Tanh, TanhGrad, [](double x) { return std::tanh(x); },
     [](double, double y) { return 1 - y * y; }, true},
};

TEST(KernelsTest, Activations) {
  constexpr int64_t n = 1000;  // not a multiple of any vector width
  const Vec x = Random(n, 14, -4.0f, 4.0f), dy = Random(n, 15);
  for (const Unary& u : kUnary) {
    SCOPED_TRACE(u.name);
    Vec y(n);
    u.fwd(x.data(), n, y.data());
    DVec y_ref(n), dx_ref(n);
    for (int64_t i = 0; i < n; ++i) {
      y_ref[i] = u.f(x[i]);
      dx_ref[i] = dy[i] * u.df(x[i], y[i]);
    }
    ExpectNear(y, y_ref);
    const float* saved = u.grad_takes_output ? y.data() : x.data();
    Vec dx(n);
    u.grad(dy.data(), saved, n, false, dx.data());
    ExpectNear(dx, dx_ref);
    const Vec prior = Random(n, 16);
    dx = prior;
    u.grad(dy.data(), saved, n, true, dx.data());
    ExpectNear(dx, Plus(prior, dx_ref));
  }
}

TEST(KernelsTest, LayerNormForwardAndGrads) {
  constexpr int64_t B = 6, d = 37;
  constexpr float eps = 1e-5f;
  // An offset row mean checks the variance is not computed as E[x^2]-E[x]^2.
  const Vec x = Random(B * d, 17, 99.0f, 101.0f);
  const Vec gamma = Random(d, 18, 0.5f, 1.5f), beta = Random(d, 19);
  const Vec dy = Random(B * d, 20);
  DVec y_ref(B * d), dx_ref(B * d), dg_ref(d, 0.0), db_ref(d, 0.0);
  DVec mean_ref(B), rstd_ref(B);
  for (int64_t r = 0; r < B; ++r) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mu += x[r * d + j];
    mu /= d;
    for (int64_t j = 0; j < d; ++j) var += (x[r * d + j] - mu) * (x[r * d + j] - mu);
    var /= d;
    const double rs = 1 / std::sqrt(var + eps);
    mean_ref[r] = mu;
    rstd_ref[r] = rs;
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double xh = (x[r * d + j] - mu) * rs;
      y_ref[r * d + j] = xh * gamma[j] + beta[j];
      dg_ref[j] += dy[r * d + j] * xh;
      db_ref[j] += dy[r * d + j];
      mg += dy[r * d + j] * gamma[j];
      mgx += dy[r * d + j] * gamma[j] * xh;
    }
    mg /= d;
    mgx /= d;
    for (int64_t j = 0; j < d; ++j) {
      const double xh = (x[r * d + j] - mu) * rs;
      dx_ref[r * d + j] = rs * (dy[r * d + j] * gamma[j] - mg - xh * mgx);
    }
  }
  Vec y(B * d), mean(B), rstd(B);
  LayerNorm(x.data(), gamma.data(), beta.data(), B, d, eps, y.data(),
            mean.data(), rstd.data());
  // Normalising amplifies the input's own rounding (x ~ 100, ulp ~ 1e-5)
  // by rstd; the tolerances are that, not the kernel's error.
  ExpectNear(mean, mean_ref);
  ExpectNear(rstd, rstd_ref, 1e-5);
  ExpectNear(y, y_ref, 1e-5, 1e-5);

  Vec dx(B * d);
  LayerNormGradInput(dy.data(), x.data(), gamma.data(), mean.data(),
                     rstd.data(), B, d, false, dx.data());
  ExpectNear(dx, dx_ref, 1e-4, 1e-4);
  const Vec dx0 = Random(B * d, 21);
  dx = dx0;
  LayerNormGradInput(dy.data(), x.data(), gamma.data(), mean.data(),
                     rstd.data(), B, d, true, dx.data());
  ExpectNear(dx, Plus(dx0, dx_ref), 1e-4, 1e-4);

  Vec dg(d), dbeta(d);
  LayerNormGradParams(dy.data(), x.data(), mean.data(), rstd.data(), B, d,
                      false, dg.data(), dbeta.data());
  ExpectNear(dg, dg_ref, 1e-4, 1e-5);
  ExpectNear(dbeta, db_ref, 1e-5, 1e-6);
  const Vec dg0 = Random(d, 22), db0 = Random(d, 23);
  dg = dg0;
  dbeta = db0;
  LayerNormGradParams(dy.data(), x.data(), mean.data(), rstd.data(), B, d,
                      true, dg.data(), dbeta.data());
  ExpectNear(dg, Plus(dg0, dg_ref), 1e-4, 1e-5);
  ExpectNear(dbeta, Plus(db0, db_ref), 1e-5, 1e-6);
}

TEST(KernelsTest, AddAndCopyGrad) {
  constexpr int64_t n = 333;
  const Vec a = Random(n, 24), b = Random(n, 25);
  Vec y(n);
  Add(a.data(), b.data(), n, y.data());
  DVec sum(n), av(a.begin(), a.end());
  for (int64_t i = 0; i < n; ++i) sum[i] = double(a[i]) + b[i];
  ExpectNear(y, sum);
  Vec dx = b;
  CopyGrad(a.data(), n, false, dx.data());
  ExpectNear(dx, av, 0, 0);
  dx = b;
  CopyGrad(a.data(), n, true, dx.data());
  ExpectNear(dx, sum);
}

TEST(KernelsTest, CrossEntropyIsStableAndMatchesReference) {
  constexpr int64_t B = 9, C = 10;
  Vec logits = Random(B * C, 26, -5.0f, 5.0f);
  logits[3] = 80.0f;  // exp(80) overflows fp32: needs the max shift
  logits[C + 1] = -90.0f;
  std::vector<int32_t> label(B);
  for (int64_t r = 0; r < B; ++r) label[r] = static_cast<int32_t>((r * 7) % C);
  DVec probs_ref(B * C);
  double loss_ref = 0;
  for (int64_t r = 0; r < B; ++r) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < C; ++j) mx = std::max(mx, double(logits[r * C + j]));
    for (int64_t j = 0; j < C; ++j) s += std::exp(logits[r * C + j] - mx);
    for (int64_t j = 0; j < C; ++j) {
      probs_ref[r * C + j] = std::exp(logits[r * C + j] - mx) / s;
    }
    loss_ref += std::log(s) + mx - logits[r * C + label[r]];
  }
  Vec probs(B * C), loss(1);
  ASSERT_TRUE(CrossEntropy(logits.data(), label.data(), B, C, loss.data(),
                           probs.data()));
  ExpectNear(probs, probs_ref, 1e-5, 1e-7);
  EXPECT_NEAR(loss[0], loss_ref, 1e-5 * std::fabs(loss_ref));
  EXPECT_TRUE(std::isfinite(loss[0]));

  constexpr float scale = 1.0f / 64;
  DVec grad_ref(B * C);
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t j = 0; j < C; ++j) {
      grad_ref[r * C + j] =
          scale * (probs[r * C + j] - (j == label[r] ? 1.0 : 0.0));
    }
  }
  Vec dl(B * C);
  CrossEntropyGrad(probs.data(), label.data(), B, C, scale, false, dl.data());
  ExpectNear(dl, grad_ref);
  const Vec dl0 = Random(B * C, 27);
  dl = dl0;
  CrossEntropyGrad(probs.data(), label.data(), B, C, scale, true, dl.data());
  ExpectNear(dl, Plus(dl0, grad_ref));

  label[4] = C;  // out of range
  EXPECT_FALSE(CrossEntropy(logits.data(), label.data(), B, C, loss.data(),
                            probs.data()));
  label[4] = -1;
  EXPECT_FALSE(CrossEntropy(logits.data(), label.data(), B, C, loss.data(),
                            probs.data()));
}

TEST(KernelsTest, MseAndGrad) {
  constexpr int64_t B = 5, n = 11;
  const Vec p = Random(B * n, 28), t = Random(B * n, 29);
  double loss_ref = 0;
  DVec grad_ref(B * n);
  constexpr float scale = 0.25f;
  for (int64_t r = 0; r < B; ++r) {
    double row = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double e = double(p[r * n + j]) - t[r * n + j];
      row += e * e;
      grad_ref[r * n + j] = scale * 2 * e / n;
    }
    loss_ref += row / n;
  }
  Vec loss(1);
  Mse(p.data(), t.data(), B, n, loss.data());
  EXPECT_NEAR(loss[0], loss_ref, 1e-6 * loss_ref);
  Vec g(B * n);
  MseGrad(p.data(), t.data(), B, n, scale, false, g.data());
  ExpectNear(g, grad_ref);
  const Vec g0 = Random(B * n, 30);
  g = g0;
  MseGrad(p.data(), t.data(), B, n, scale, true, g.data());
  ExpectNear(g, Plus(g0, grad_ref));
}

TEST(KernelsTest, OrderedSumAddsSlotsInOrderAndMayWriteSlotZero) {
  constexpr int64_t slots = 4, count = 101;
  const Vec src = Random(slots * count, 31, -1e3f, 1e3f);
  Vec expect(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = src[i];
    for (int64_t k = 1; k < slots; ++k) s += src[k * count + i];
    expect[i] = s;  // the fp32 sum in slot order, bit for bit
  }
  Vec dst(count);
  OrderedSum(src.data(), slots, count, dst.data());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(dst[i], expect[i]) << i;
  Vec in_place = src;
  OrderedSum(in_place.data(), slots, count, in_place.data());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(in_place[i], expect[i]) << i;
}

// torch.optim.AdamW's update, step by step, in double.
TEST(KernelsTest, AdamWMatchesTorchFormulaOverSteps) {
  constexpr int64_t n = 257;
  AdamWParams h;
  h.lr = 1e-3;
  h.weight_decay = 0.01;
  Vec p = Random(n, 32), m(n, 0.0f), v(n, 0.0f);
  DVec pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const Vec g = Random(n, 100 + step);
    h.step = step;
    AdamW(h, g.data(), n, p.data(), m.data(), v.data());
    const double bc1 = 1 - std::pow(h.beta1, step);
    const double bc2 = 1 - std::pow(h.beta2, step);
    for (int64_t i = 0; i < n; ++i) {
      pd[i] -= h.lr * h.weight_decay * pd[i];
      md[i] = h.beta1 * md[i] + (1 - h.beta1) * g[i];
      vd[i] = h.beta2 * vd[i] + (1 - h.beta2) * double(g[i]) * g[i];
      pd[i] -= h.lr * (md[i] / bc1) / (std::sqrt(vd[i] / bc2) + h.eps);
    }
    ExpectNear(p, pd, 2e-6, 1e-7);
    ExpectNear(m, md, 1e-5, 1e-7);
    ExpectNear(v, vd, 1e-5, 1e-9);
  }
}

TEST(KernelsTest, SgdMatchesTorchFormula) {
  constexpr int64_t n = 129;
  struct Case {
    double momentum, weight_decay;
    bool nesterov;
  };
  for (const Case& c : {Case{0, 0, false}, Case{0, 0.1, false},
                        Case{0.9, 0.0, false}, Case{0.9, 0.05, true}}) {
    SCOPED_TRACE(testing::Message() << "momentum " << c.momentum << " wd "
                                    << c.weight_decay << " nesterov "
                                    << c.nesterov);
    SgdParams h;
    h.lr = 0.1;
    h.momentum = c.momentum;
    h.weight_decay = c.weight_decay;
    h.nesterov = c.nesterov;
    // Garbage in the buffer: step 1 must overwrite it, not decay it.
    Vec p = Random(n, 40), buf = Random(n, 41);
    DVec pd(p.begin(), p.end()), bd(n, 0.0);
    for (int64_t step = 1; step <= 4; ++step) {
      const Vec g = Random(n, 200 + step);
      h.step = step;
      Sgd(h, g.data(), n, p.data(), c.momentum != 0 ? buf.data() : nullptr);
      for (int64_t i = 0; i < n; ++i) {
        double d = g[i] + c.weight_decay * pd[i];
        if (c.momentum != 0) {
          bd[i] = step == 1 ? d : c.momentum * bd[i] + d;
          d = c.nesterov ? d + c.momentum * bd[i] : bd[i];
        }
        pd[i] -= h.lr * d;
      }
      ExpectNear(p, pd, 1e-6, 1e-7);
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace trainc
