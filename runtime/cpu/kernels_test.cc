// Every kernel against a naive double-precision reference, both the
// overwrite and the accumulate path of each gradient kernel.
#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <functional>
#include <random>
#include <cstring>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "gtest/gtest.h"

namespace trainc {
namespace cpu {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

// The unit families' CPU kernels (compiler/ops/*_family.h, Run<float>),
// the sizes passed as the tests below do.
bool CrossEntropy(const float* logits, const int32_t* label, int64_t rows, int64_t classes,
                  float* loss_sum, float* probs) {
  ops::CrossEntropyFamily::Args a;
  a.rows = rows, a.classes = classes, a.labels = label;
  return ops::CrossEntropyFamily::Forward(a, logits, loss_sum, probs);
}
void CrossEntropyGrad(const float* probs, const int32_t* label, int64_t rows, int64_t classes,
                      float scale, bool accumulate, float* dlogits) {
  ops::CrossEntropyFamily::Args a;
  a.rows = rows, a.classes = classes, a.labels = label, a.loss_scale = scale;
  ops::CrossEntropyFamily::Grad(a, probs, accumulate, dlogits);
}
void Mse(const float* pred, const float* target, int64_t rows, int64_t n, float* loss_sum) {
  ops::MseFamily::Args a;
  a.rows = rows, a.width = n;
  ops::MseFamily::Forward(a, pred, target, loss_sum);
}
void MseGrad(const float* pred, const float* target, int64_t rows, int64_t n, float scale,
             bool accumulate, float* dpred) {
  ops::MseFamily::Args a;
  a.rows = rows, a.width = n, a.loss_scale = scale;
  ops::MseFamily::Grad(a, pred, target, accumulate, dpred);
}
// Dropout through the CPU kernel (RunDropout): step 1 of rank 0, the
// example base the micro-step's offset.
void Dropout(const float* x, int64_t batch, int64_t per_example, float p, uint64_t seed,
             uint32_t key, uint64_t example_base, bool accumulate, float* y) {
  ops::DropoutFamily::Args a;
  a.rows = batch, a.per_example = per_example, a.p = p, a.key = key, a.seed = seed;
  a.micro_offset = static_cast<int64_t>(example_base);
  RunDropout(KernelOp::kDropout, a, &x, &y, accumulate);
}
// The optimizers through the CPU kernel (RunOptimizer) over a whole span
// of n floats, no clipping.
struct AdamWParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
};
struct SgdParams {
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  int64_t step = 1;
};
ops::OptimizerFamily::Args OptimizerArgs(int64_t n, double lr, int64_t step) {
  ops::OptimizerFamily::Args a;
  a.params = n;
  a.step.lr = lr, a.step.step = step;
  return a;
}
void AdamW(const AdamWParams& h, const float* grad, int64_t n, float* param, float* m, float* v) {
  ops::OptimizerFamily::Args a = OptimizerArgs(n, h.lr, h.step);
  a.hyper.beta1 = h.beta1, a.hyper.beta2 = h.beta2, a.hyper.eps = h.eps;
  a.hyper.weight_decay = h.weight_decay;
  const float* x[] = {param, grad, m, v};
  float* y[] = {param, m, v};
  RunOptimizer(KernelOp::kAdamW, a, x, y, false);
}
void Sgd(const SgdParams& h, const float* grad, int64_t n, float* param, float* momentum_buf) {
  ops::OptimizerFamily::Args a = OptimizerArgs(n, h.lr, h.step);
  a.hyper.momentum = h.momentum, a.hyper.weight_decay = h.weight_decay;
  a.hyper.nesterov = h.nesterov;
  const float* x[] = {param, grad, momentum_buf};
  float* y[] = {param, momentum_buf};
  RunOptimizer(KernelOp::kSgd, a, x, y, false);
}
ops::EmbeddingFamily::Args TokenArgs(const int32_t* ids, int64_t rows, int64_t vocab,
                                     int64_t dim) {
  ops::EmbeddingFamily::Args a;
  a.rows = rows, a.vocab = vocab, a.width = dim, a.ids = ids;
  return a;
}
bool Embedding(const int32_t* ids, const float* table, int64_t rows, int64_t vocab, int64_t dim,
               float* y) {
  const float* x[] = {nullptr, table};
  float* out[] = {y};
  return ops::EmbeddingFamily::Run<float>(KernelOp::kEmbedding, TokenArgs(ids, rows, vocab, dim),
                                          x, out, false)
      .empty();
}
void EmbeddingGrad(const float* dy, const int32_t* ids, int64_t rows, int64_t vocab,
                   int64_t dim, bool accumulate, float* dtable) {
  ops::EmbeddingFamily::Grad(TokenArgs(ids, rows, vocab, dim), dy, accumulate, dtable);
}
ops::EmbeddingFamily::Args PositionArgs(int64_t batch, int64_t positions, int64_t dim) {
  ops::EmbeddingFamily::Args a;
  a.batch = batch, a.positions = positions, a.width = dim;
  return a;
}
void PositionEmbedding(const float* table, int64_t batch, int64_t positions, int64_t dim,
                       float* y) {
  ops::EmbeddingFamily::PositionForward(PositionArgs(batch, positions, dim), table, y);
}
void PositionEmbeddingGrad(const float* dy, int64_t batch, int64_t positions, int64_t dim,
                           bool accumulate, float* dtable) {
  ops::EmbeddingFamily::PositionGrad(PositionArgs(batch, positions, dim), dy, accumulate,
                                     dtable);
}

// The pointwise kernels (PointwiseKernel), called as the tests below do.
#define TRAINC_TEST_FORWARD(Name)                         \
  void Name(const float* x, int64_t n, float* y) {        \
    PointwiseKernel(KernelOp::k##Name)(x, nullptr, n, false, y); \
  }
#define TRAINC_TEST_GRAD(Name)                                                   \
  void Name(const float* dy, const float* v, int64_t n, bool accumulate, float* dx) { \
    PointwiseKernel(KernelOp::k##Name)(dy, v, n, accumulate, dx);                \
  }
TRAINC_TEST_FORWARD(Relu)
TRAINC_TEST_FORWARD(Gelu)
TRAINC_TEST_FORWARD(GeluTanh)
TRAINC_TEST_FORWARD(Silu)
TRAINC_TEST_FORWARD(Tanh)
TRAINC_TEST_GRAD(ReluGrad)
TRAINC_TEST_GRAD(GeluGrad)
TRAINC_TEST_GRAD(GeluTanhGrad)
TRAINC_TEST_GRAD(SiluGrad)
TRAINC_TEST_GRAD(TanhGrad)
#undef TRAINC_TEST_FORWARD
#undef TRAINC_TEST_GRAD

// The unit families' kernels (their Run<float>, as the CPU device runs
// them: RunLayerNorm, RunSoftmax), called as the tests below do.
void LayerNorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t d,
               float eps, float* y, float* mean, float* rstd) {
  const float* in[] = {x, gamma, beta};
  float* out[] = {y, mean, rstd};
  RunLayerNorm(KernelOp::kLayerNorm, {rows, d, eps}, in, out, false);
}
void LayerNormGradInput(const float* dy, const float* x, const float* gamma, const float* mean,
                        const float* rstd, int64_t rows, int64_t d, bool accumulate, float* dx) {
  const float* in[] = {dy, x, gamma, mean, rstd};
  float* out[] = {dx};
  RunLayerNorm(KernelOp::kLayerNormGradInput, {rows, d}, in, out, accumulate);
}
void LayerNormGradParams(const float* dy, const float* x, const float* mean, const float* rstd,
                         int64_t rows, int64_t d, bool accumulate, float* dgamma, float* dbeta) {
  const float* in[] = {dy, x, mean, rstd};
  float* out[] = {dgamma, dbeta};
  RunLayerNorm(KernelOp::kLayerNormGradParams, {rows, d}, in, out, accumulate);
}
void Softmax(const float* x, int64_t rows, int64_t n, float* y) {
  const float* in[] = {x};
  float* out[] = {y};
  RunSoftmax(KernelOp::kSoftmax, {rows, n}, in, out, false);
}
void SoftmaxGrad(const float* dy, const float* y, int64_t rows, int64_t n, bool accumulate,
                 float* dx) {
  const float* in[] = {dy, y};
  float* out[] = {dx};
  RunSoftmax(KernelOp::kSoftmaxGrad, {rows, n}, in, out, accumulate);
}
void Add(const float* a, const float* b, int64_t n, float* y) {
  PointwiseKernel(KernelOp::kAdd)(a, b, n, false, y);
}
void CopyGrad(const float* dy, int64_t n, bool accumulate, float* dx) {
  PointwiseKernel(KernelOp::kCopyGrad)(dy, nullptr, n, accumulate, dx);
}

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
  // Without act_out (linear_<act> without pre) the activation is written
  // over y: the same bits as into act_out.
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kTanh}) {
    Vec in_place(kB * kOut);
    LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, y.data(), act, h.data());
    LinearForward(x.data(), w.data(), b.data(), kB, kIn, kOut, in_place.data(), act, nullptr);
    EXPECT_EQ(std::memcmp(in_place.data(), h.data(), h.size() * sizeof(float)), 0)
        << static_cast<int>(act);
  }

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

// Bit for bit torch's fp32 AdamW (a square root and two true divisions per
// float), over gradients from 2^-70 to 2^20, zeros and a remainder past the
// vector width, at steps where sqrt(bias_correction2) takes many values and
// finally rounds to 1: the kernel's division by that constant is a
// multiplication in double and must give the division's bits.
TEST(KernelsTest, AdamWBitForBitWithTorchFp32Order) {
  constexpr int64_t n = 4099;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-70, 20);
  Vec g(n), p(n), m(n), v(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = i % 97 == 0 ? 0.0f : std::ldexp(mantissa(rng), exponent(rng));
    p[i] = mantissa(rng);
    m[i] = std::ldexp(mantissa(rng), exponent(rng));
    v[i] = std::ldexp(std::fabs(mantissa(rng)), exponent(rng));
  }
  AdamWParams h;
  h.lr = 3e-3;
  h.weight_decay = 0.1;
  for (int64_t step : {1, 2, 3, 7, 60, 1000, 5000, 30000}) {
    h.step = step;
    Vec pk = p, mk = m, vk = v;
    AdamW(h, g.data(), n, pk.data(), mk.data(), vk.data());
    const double bc1 = 1 - std::pow(h.beta1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(h.beta2, static_cast<double>(step));
    const float decay = static_cast<float>(1 - h.lr * h.weight_decay);
    const float b1 = static_cast<float>(h.beta1), c1 = static_cast<float>(1 - h.beta1);
    const float b2 = static_cast<float>(h.beta2), c2 = static_cast<float>(1 - h.beta2);
    const float step_size = static_cast<float>(-(h.lr / bc1));
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(h.eps);
    for (int64_t i = 0; i < n; ++i) {
      const float mi = m[i] * b1 + c1 * g[i];
      const float vi = v[i] * b2 + c2 * g[i] * g[i];
      const float denom = std::sqrt(vi) / bc2_sqrt + eps;
      const float pi = p[i] * decay + step_size * mi / denom;
      ASSERT_EQ(mk[i], mi) << "step " << step << " i " << i;
      ASSERT_EQ(vk[i], vi) << "step " << step << " i " << i;
      ASSERT_EQ(pk[i], pi) << "step " << step << " i " << i << " v " << vi;
    }
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

// ---- Transformer ops ------------------------------------------------------

// sum_i w[i] y[i] in double: the scalar objective of the gradient checks.
double Objective(const Vec& w, const Vec& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(w[i]) * y[i];
  return s;
}

// Checks grad = d/dx sum(w * f(x)) by central differences of the float
// kernel `f` itself (so the backward is checked against the forward it
// belongs to, not against a formula shared with a reference). The step is
// divided by what x[i] +- step actually became in float.
void ExpectGradMatchesFiniteDifferences(
    const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& w,
    const Vec& grad, float step, double rtol, double atol) {
  ASSERT_EQ(grad.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    Vec xp = x, xm = x;
    xp[i] += step;
    xm[i] -= step;
    const double fd = (Objective(w, f(xp)) - Objective(w, f(xm))) /
                      (static_cast<double>(xp[i]) - xm[i]);
    ASSERT_NEAR(grad[i], fd, atol + rtol * std::fabs(fd)) << "at " << i;
  }
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;

double GeluTanhRef(double x) {
  return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double GeluTanhDerivRef(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) +
         0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
}

TEST(KernelsTest, GeluTanhMatchesTorch) {
  // From torch 1.13 (CPU, float32):
  //   y = torch.nn.functional.gelu(x, approximate='tanh'); y.sum().backward()
  // giving {x, y, x.grad}.
  struct Point {
    float x, y, dydx;
  };
  const Point kTorch[] = {
      {-3.0f, -0.00363743305f, -0.0115842968f},
      {-1.5f, -0.100428432f, -0.127710819f},
      {-0.5f, -0.154285997f, 0.13263011f},
      {0.0f, 0.0f, 0.5f},
      {0.25f, 0.149675354f, 0.695354104f},
      {1.0f, 0.841192007f, 1.08296406f},
      {2.0f, 1.95459771f, 1.08609927f},
      {4.0f, 3.9999299f, 1.00033498f},
  };
  for (const Point& p : kTorch) {
    SCOPED_TRACE(p.x);
    float y, dx;
    const float one = 1.0f;
    GeluTanh(&p.x, 1, &y);
    GeluTanhGrad(&one, &p.x, 1, false, &dx);
    // torch's float32 1 + tanh(u) cancels for x well below 0, losing about
    // |x| 2^-24 (at x = -3 its gradient is 1.3e-7 from the float64 value,
    // ours 3e-9): allow that much on top of rounding.
    const double torch_error = std::fabs(p.x) * 0x1p-23;
    EXPECT_NEAR(y, p.y, 1e-7 + 2e-6 * std::fabs(p.y) + torch_error);
    EXPECT_NEAR(dx, p.dydx, 1e-7 + 2e-6 * std::fabs(p.dydx) + torch_error);
  }
}

TEST(KernelsTest, SiluForwardAndGrad) {
  constexpr int64_t n = 1001;
  const Vec x = Random(n, 60, -8.0f, 8.0f), dy = Random(n, 61);
  DVec y_ref(n), dx_ref(n);
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    y_ref[i] = x[i] * s;
    dx_ref[i] = dy[i] * s * (1.0 + x[i] * (1.0 - s));
  }
  Vec y(n), dx(n);
  Silu(x.data(), n, y.data());
  ExpectNear(y, y_ref, 1e-6, 1e-7);
  SiluGrad(dy.data(), x.data(), n, false, dx.data());
  ExpectNear(dx, dx_ref, 1e-6, 1e-7);
  const Vec prior = Random(n, 62);
  dx = prior;
  SiluGrad(dy.data(), x.data(), n, true, dx.data());
  ExpectNear(dx, Plus(prior, dx_ref), 1e-6, 1e-6);
  // torch.nn.functional.silu at 1.5 and its derivative (torch 1.13,
  // float64): 1.2263617142904655, 1.041294154299143.
  const float x15 = 1.5f, one = 1.0f;
  float y15, d15;
  Silu(&x15, 1, &y15);
  SiluGrad(&one, &x15, 1, false, &d15);
  EXPECT_NEAR(y15, 1.2263617142904655, 1e-6);
  EXPECT_NEAR(d15, 1.041294154299143, 1e-6);
}

// The far tail and non-finite inputs, as x / (1 + e^-x) in libm (and
// torch.nn.functional.silu) give them: -0 and a zero gradient far below 0,
// NaN at -inf and for NaN; x itself far above 0.
TEST(KernelsTest, SiluTails) {
  const float inf = std::numeric_limits<float>::infinity();
  const Vec x = {-1e38f, -1000.0f, -90.0f, -inf, std::nanf(""), 1e38f, 100.0f};
  const int64_t n = static_cast<int64_t>(x.size());
  const Vec dy(x.size(), 1.0f);
  Vec y(x.size()), dx(x.size());
  Silu(x.data(), n, y.data());
  SiluGrad(dy.data(), x.data(), n, false, dx.data());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(y[i], 0.0f) << x[i];
    EXPECT_TRUE(std::signbit(y[i])) << x[i];
    EXPECT_EQ(dx[i], 0.0f) << x[i];
  }
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_TRUE(std::isnan(dx[3]));
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(std::isnan(dx[4]));
  EXPECT_EQ(y[5], 1e38f);
  EXPECT_EQ(y[6], 100.0f);
  EXPECT_EQ(dx[6], 1.0f);
}

TEST(KernelsTest, GeluTanhForwardAndGrad) {
  constexpr int64_t n = 1000;  // not a multiple of any vector width
  const Vec x = Random(n, 50, -6.0f, 6.0f), dy = Random(n, 51);
  DVec y_ref(n), dx_ref(n);
  for (int64_t i = 0; i < n; ++i) {
    y_ref[i] = GeluTanhRef(x[i]);
    dx_ref[i] = dy[i] * GeluTanhDerivRef(x[i]);
  }
  // GELU's tail below 0 is tiny; the absolute tolerance covers it.
  Vec y(n);
  GeluTanh(x.data(), n, y.data());
  ExpectNear(y, y_ref, 1e-5, 5e-7);
  Vec dx(n);
  GeluTanhGrad(dy.data(), x.data(), n, false, dx.data());
  ExpectNear(dx, dx_ref, 1e-5, 5e-7);
  const Vec prior = Random(n, 52);
  dx = prior;
  GeluTanhGrad(dy.data(), x.data(), n, true, dx.data());
  ExpectNear(dx, Plus(prior, dx_ref), 1e-5, 1e-6);

  constexpr int64_t m = 64;
  const Vec xs = Random(m, 53, -3.0f, 3.0f), w = Random(m, 54);
  Vec g(m);
  GeluTanhGrad(w.data(), xs.data(), m, false, g.data());
  ExpectGradMatchesFiniteDifferences(
      [](const Vec& in) {
        Vec out(in.size());
        GeluTanh(in.data(), static_cast<int64_t>(in.size()), out.data());
        return out;
      },
      xs, w, g, 1e-2f, 1e-3, 1e-4);
}

// Dropout's factor written here from the Philox4x32-10 paper (Salmon et
// al., SC'11) and the mask's definition, not from compiler/ops/philox.h:
// counter (element / 4, example lo, example hi, key), key (seed lo, seed
// hi), ten rounds; word element % 4, its top 24 bits a uniform u in [0, 1);
// dropped if u < p, else scaled by the float 1 / (1 - p).
struct PhiloxRef {
  static void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
    const uint64_t prod = uint64_t{a} * uint64_t{b};
    *hi = static_cast<uint32_t>(prod >> 32);
    *lo = static_cast<uint32_t>(prod & 0xffffffffu);
  }
  static std::vector<uint32_t> Block(std::vector<uint32_t> c, uint32_t k0,
                                     uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
      uint32_t hi0, lo0, hi1, lo1;
      MulHiLo(0xD2511F53u, c[0], &hi0, &lo0);
      MulHiLo(0xCD9E8D57u, c[2], &hi1, &lo1);
      c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
      k0 += 0x9E3779B9u;  // golden ratio
      k1 += 0xBB67AE85u;  // sqrt(3) - 1
    }
    return c;
  }
  static float Factor(uint64_t seed, uint32_t key, uint64_t example,
                      uint64_t element, float p) {
    const std::vector<uint32_t> out =
        Block({static_cast<uint32_t>(element / 4),
               static_cast<uint32_t>(example & 0xffffffffu),
               static_cast<uint32_t>(example >> 32), key},
              static_cast<uint32_t>(seed & 0xffffffffu),
              static_cast<uint32_t>(seed >> 32));
    const double u = (out[element % 4] >> 8) / 16777216.0;  // exact
    return u < p ? 0.0f : 1.0f / (1.0f - p);
  }
};

TEST(KernelsTest, DropoutReferencePhiloxMatchesRandom123) {
  // Guards the test's own generator: Random123's kat_vectors (philox4x32
  // 10), the zero and the pi vectors.
  EXPECT_EQ(PhiloxRef::Block({0, 0, 0, 0}, 0, 0),
            (std::vector<uint32_t>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu,
                                   0x9b00dbd8u}));
  EXPECT_EQ(PhiloxRef::Block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu,
                              0x03707344u},
                             0xa4093822u, 0x299f31d0u),
            (std::vector<uint32_t>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u,
                                   0x24126ea1u}));
}

// Bitwise equality of two float vectors (0 * x must be +-0 like x * 0).
void ExpectSameBits(const Vec& got, const Vec& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "at " << i;
    ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << "at " << i;
  }
}

TEST(KernelsTest, DropoutMatchesPhiloxElementByElement) {
  // 37 elements per example: the 4-element Philox groups straddle rows.
  // The examples cross 2^32 (the counter's high word) and the seed has
  // both halves set.
  constexpr int64_t B = 6, n = 37;
  const uint64_t seed = 0x0000000500000007ull, base = (uint64_t{1} << 32) - 3;
  const uint32_t key = 0x9747b28cu;
  const Vec x = Random(B * n, 90, -2.0f, 2.0f), prior = Random(B * n, 91);
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(p);
    Vec want(B * n), want_acc(B * n);
    int64_t dropped = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < n; ++j) {
        const float f = PhiloxRef::Factor(seed, key, base + b, j, p);
        dropped += f == 0.0f;
        want[b * n + j] = x[b * n + j] * f;
        want_acc[b * n + j] = prior[b * n + j] + x[b * n + j] * f;
      }
    }
    ASSERT_GT(dropped, 0);
    ASSERT_LT(dropped, B * n);
    Vec y(B * n, 123.0f);
    Dropout(x.data(), B, n, p, seed, key, base, false, y.data());
    ExpectSameBits(y, want);
    y = prior;
    Dropout(x.data(), B, n, p, seed, key, base, true, y.data());
    ExpectSameBits(y, want_acc);
    // Row b is example base + b: the same rows run as two calls (two ranks
    // or micro-steps) give the same output.
    Vec halves(B * n);
    Dropout(x.data(), 2, n, p, seed, key, base, false, halves.data());
    Dropout(x.data() + 2 * n, B - 2, n, p, seed, key, base + 2, false,
            halves.data() + 2 * n);
    ExpectSameBits(halves, want);
  }
  // Every input of the mask matters: another seed, key or example base
  // gives another output.
  Vec a(B * n), b(B * n);
  Dropout(x.data(), B, n, 0.5f, seed, key, base, false, a.data());
  const uint64_t high = uint64_t{1} << 32;  // the seed's second key word
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    Dropout(x.data(), B, n, 0.5f,
            which == 0 ? seed + 1 : which == 1 ? seed + high : seed,
            which == 2 ? key ^ 1u : key, which == 3 ? base + B : base, false,
            b.data());
    EXPECT_NE(a, b);
  }
}

TEST(KernelsTest, DropoutWithPZeroIsAnExactCopy) {
  constexpr int64_t B = 5, n = 29;
  const Vec x = Random(B * n, 92, -3.0f, 3.0f), prior = Random(B * n, 93);
  Vec y(B * n, 7.0f);
  Dropout(x.data(), B, n, 0.0f, 42, 17, 1000, false, y.data());
  ExpectSameBits(y, x);
  y = prior;
  Dropout(x.data(), B, n, 0.0f, 42, 17, 1000, true, y.data());
  Vec sum(B * n);
  for (int64_t i = 0; i < B * n; ++i) sum[i] = prior[i] + x[i];
  ExpectSameBits(y, sum);
}

TEST(KernelsTest, DropoutDropsAboutPAndScalesTheRest) {
  // 64 x 1000 Bernoulli(p) draws: the count is within 6 standard
  // deviations of p n, and every kept element is x / (1 - p) in float.
  constexpr int64_t B = 64, n = 1000;
  const Vec x = Random(B * n, 94, 0.5f, 1.5f);  // no zeros
  for (const float p : {0.05f, 0.1f, 0.5f, 0.8f}) {
    SCOPED_TRACE(p);
    Vec y(B * n);
    Dropout(x.data(), B, n, p, /*seed=*/2024, /*key=*/5, /*example_base=*/77,
            false, y.data());
    const float scale = 1.0f / (1.0f - p);
    int64_t dropped = 0;
    for (int64_t i = 0; i < B * n; ++i) {
      if (y[i] == 0.0f) {
        ++dropped;
      } else {
        ASSERT_EQ(y[i], x[i] * scale) << "at " << i;
      }
    }
    const double total = static_cast<double>(B * n);
    const double sd = std::sqrt(total * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(dropped), p * total, 6 * sd);
    // Neither all dropped in some rows nor none: per row about p too.
    for (int64_t b = 0; b < B; ++b) {
      int64_t row = 0;
      for (int64_t j = 0; j < n; ++j) row += y[b * n + j] == 0.0f;
      const double row_sd = std::sqrt(n * p * (1.0 - p));
      EXPECT_NEAR(static_cast<double>(row), p * n, 6 * row_sd) << "row " << b;
    }
  }
}

TEST(KernelsTest, SoftmaxIsStableAndMatchesReference) {
  constexpr int64_t B = 6, n = 37;
  Vec x = Random(B * n, 55, -5.0f, 5.0f);
  x[3] = 80.0f;  // exp(80) overflows fp32: needs the max shift
  x[n + 1] = -90.0f;
  const Vec dy = Random(B * n, 56);
  DVec y_ref(B * n), dx_ref(B * n);
  for (int64_t r = 0; r < B; ++r) {
    double mx = -1e300, s = 0, dot = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(x[r * n + j]));
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j) {
      y_ref[r * n + j] = std::exp(x[r * n + j] - mx) / s;
      dot += dy[r * n + j] * y_ref[r * n + j];
    }
    for (int64_t j = 0; j < n; ++j) {
      dx_ref[r * n + j] = y_ref[r * n + j] * (dy[r * n + j] - dot);
    }
  }
  Vec y(B * n);
  Softmax(x.data(), B, n, y.data());
  ExpectNear(y, y_ref, 1e-5, 1e-9);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));

  // The backward from the kernel's own y, against the exact y's.
  Vec dx(B * n);
  SoftmaxGrad(dy.data(), y.data(), B, n, false, dx.data());
  ExpectNear(dx, dx_ref, 1e-5, 1e-7);
  const Vec prior = Random(B * n, 57);
  dx = prior;
  SoftmaxGrad(dy.data(), y.data(), B, n, true, dx.data());
  ExpectNear(dx, Plus(prior, dx_ref), 1e-5, 1e-6);

  constexpr int64_t rows = 3, cols = 7;
  const Vec xs = Random(rows * cols, 58, -2.0f, 2.0f);
  const Vec w = Random(rows * cols, 59);
  Vec ys(rows * cols), g(rows * cols);
  Softmax(xs.data(), rows, cols, ys.data());
  SoftmaxGrad(w.data(), ys.data(), rows, cols, false, g.data());
  ExpectGradMatchesFiniteDifferences(
      [](const Vec& in) {
        Vec out(in.size());
        Softmax(in.data(), rows, cols, out.data());
        return out;
      },
      xs, w, g, 1e-2f, 1e-3, 1e-5);
}

TEST(KernelsTest, EmbeddingGathersRowsAndRejectsOutOfRangeIds) {
  constexpr int64_t V = 11, D = 9, R = 8;
  const Vec table = Random(V * D, 60);
  std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 0, 5};  // repeats on purpose
  Vec y(R * D);
  ASSERT_TRUE(Embedding(ids.data(), table.data(), R, V, D, y.data()));
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < D; ++j) {
      ASSERT_EQ(y[r * D + j], table[ids[r] * D + j]) << r << ", " << j;
    }
  }
  ids[5] = V;
  EXPECT_FALSE(Embedding(ids.data(), table.data(), R, V, D, y.data()));
  ids[5] = -1;
  EXPECT_FALSE(Embedding(ids.data(), table.data(), R, V, D, y.data()));
}

TEST(KernelsTest, EmbeddingGradScattersInRowOrder) {
  constexpr int64_t V = 11, D = 9, R = 8;
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7, 3, 0, 5};
  // Magnitudes far apart so that the order of the additions shows in fp32.
  Vec dy = Random(R * D, 61);
  for (int64_t j = 0; j < D; ++j) dy[3 * D + j] *= 1e4f;
  DVec ref(V * D, 0.0);
  Vec ordered(V * D, 0.0f);  // the fp32 scatter in row order, bit for bit
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < D; ++j) {
      ref[ids[r] * D + j] += dy[r * D + j];
      ordered[ids[r] * D + j] += dy[r * D + j];
    }
  }
  Vec dt = Random(V * D, 62);  // rows no id touches must still be zeroed
  EmbeddingGrad(dy.data(), ids.data(), R, V, D, false, dt.data());
  ExpectNear(dt, ref, 1e-6, 1e-6);
  for (int64_t i = 0; i < V * D; ++i) ASSERT_EQ(dt[i], ordered[i]) << i;

  const Vec prior = Random(V * D, 63);
  dt = prior;
  EmbeddingGrad(dy.data(), ids.data(), R, V, D, true, dt.data());
  ExpectNear(dt, Plus(prior, ref), 1e-6, 1e-6);

  // d/dtable sum(w * table[ids]) by differences of the forward.
  const Vec table = Random(V * D, 64), w = Random(R * D, 65);
  Vec g(V * D);
  EmbeddingGrad(w.data(), ids.data(), R, V, D, false, g.data());
  ExpectGradMatchesFiniteDifferences(
      [&ids](const Vec& t) {
        Vec out(R * D);
        EXPECT_TRUE(Embedding(ids.data(), t.data(), R, V, D, out.data()));
        return out;
      },
      table, w, g, 1e-2f, 1e-4, 1e-5);
}

TEST(KernelsTest, PositionEmbeddingAndGrad) {
  constexpr int64_t B = 3, T = 101, D = 7;  // T * D spans several chunks
  const Vec table = Random(T * D, 66);
  Vec y(B * T * D);
  PositionEmbedding(table.data(), B, T, D, y.data());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T * D; ++i) {
      ASSERT_EQ(y[b * T * D + i], table[i]) << b << ", " << i;
    }
  }

  const Vec dy = Random(B * T * D, 67);
  DVec ref(T * D, 0.0);
  Vec ordered(T * D, 0.0f);  // the fp32 sum over b in increasing order
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T * D; ++i) {
      ref[i] += dy[b * T * D + i];
      ordered[i] += dy[b * T * D + i];
    }
  }
  Vec dt = Random(T * D, 68);
  PositionEmbeddingGrad(dy.data(), B, T, D, false, dt.data());
  ExpectNear(dt, ref, 1e-6, 1e-6);
  for (int64_t i = 0; i < T * D; ++i) ASSERT_EQ(dt[i], ordered[i]) << i;
  const Vec prior = Random(T * D, 69);
  dt = prior;
  PositionEmbeddingGrad(dy.data(), B, T, D, true, dt.data());
  ExpectNear(dt, Plus(prior, ref), 1e-6, 1e-6);

  constexpr int64_t b = 2, t = 5, d = 3;
  const Vec small = Random(t * d, 70), w = Random(b * t * d, 71);
  Vec g(t * d);
  PositionEmbeddingGrad(w.data(), b, t, d, false, g.data());
  ExpectGradMatchesFiniteDifferences(
      [](const Vec& tab) {
        Vec out(b * t * d);
        PositionEmbedding(tab.data(), b, t, d, out.data());
        return out;
      },
      small, w, g, 1e-2f, 1e-4, 1e-5);
}

}  // namespace
}  // namespace cpu
}  // namespace trainc
