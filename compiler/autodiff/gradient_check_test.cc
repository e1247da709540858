// Gradient checks in double precision against central finite differences:
// first every backward op of the op table on its own, then whole plans
// (forward, backward, accumulation over micro-steps, deterministic slots,
// weight tying) run by the reference interpreter over the planned arena,
// from hand-built specs and from .train source through the real front end
// (up to a 2-layer GPT).
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/autodiff/reference_eval.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "compiler/planner/testing/specs.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-6;

double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max({scale, std::abs(a[i]), std::abs(b[i])});
  }
  return diff / scale;
}

// d f / d x by central differences, x perturbed in place.
std::vector<double> Numerical(std::vector<double>& x, const std::function<double()>& f) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double plus = f();
    x[i] = saved - kStep;
    const double minus = f();
    x[i] = saved;
    g[i] = (plus - minus) / (2 * kStep);
  }
  return g;
}

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  TensorRef ref() { return TensorRef{data.data(), shape}; }
};

Tensor Random(std::vector<int64_t> shape, std::mt19937& rng, double lo = -1.5,
              double hi = 1.5) {
  Tensor t{shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.data.push_back(u(rng));
  return t;
}

Tensor Zeros(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Tensor{shape, std::vector<double>(n, 0.0)};
}

// One forward op and its backward ops, checked through L = sum(r * y).
class OpGradientCheck : public ::testing::Test {
 protected:
  std::mt19937 rng_{42};

  // Runs `forward` over `inputs` into `outputs` and returns sum(r * y0).
  double Objective(const std::string& op, std::vector<Tensor>& inputs,
                   std::vector<Tensor>& outputs, const Tensor& r,
                   const std::map<std::string, double>& attrs = {}) {
    std::vector<TensorRef> in, out;
    for (Tensor& t : inputs) in.push_back(t.ref());
    for (Tensor& t : outputs) out.push_back(t.ref());
    EXPECT_TRUE(EvalOp(op, attrs, in, out).ok());
    double s = 0;
    for (size_t i = 0; i < r.data.size(); ++i) s += r.data[i] * outputs[0].data[i];
    return s;
  }

  // Runs a backward op and returns its outputs; also checks accumulate=1
  // adds to what is there, on the first `accumulated_outputs` outputs (all
  // when -1; the rest are scratch).
  std::vector<Tensor> Backward(const std::string& op, std::vector<Tensor> inputs,
                               std::vector<std::vector<int64_t>> out_shapes,
                               std::map<std::string, double> attrs = {},
                               int accumulated_outputs = -1) {
    std::vector<Tensor> outs, accumulated;
    std::vector<TensorRef> in, out, acc;
    for (Tensor& t : inputs) in.push_back(t.ref());
    for (auto& s : out_shapes) {
      outs.push_back(Zeros(s));
      accumulated.push_back(Zeros(s));
      for (double& v : accumulated.back().data) v = 1.0;
    }
    for (Tensor& t : outs) out.push_back(t.ref());
    for (Tensor& t : accumulated) acc.push_back(t.ref());
    attrs["accumulate"] = 0;
    EXPECT_TRUE(EvalOp(op, attrs, in, out).ok());
    attrs["accumulate"] = 1;
    EXPECT_TRUE(EvalOp(op, attrs, in, acc).ok());
    const size_t checked = accumulated_outputs < 0 ? outs.size() : accumulated_outputs;
    for (size_t k = 0; k < checked; ++k) {
      for (size_t i = 0; i < outs[k].data.size(); ++i) {
        EXPECT_NEAR(accumulated[k].data[i], outs[k].data[i] + 1.0, 1e-12) << op;
      }
    }
    return outs;
  }
};

TEST_F(OpGradientCheck, Linear) {
  std::vector<Tensor> in = {Random({4, 3}, rng_), Random({5, 3}, rng_), Random({5}, rng_)};
  std::vector<Tensor> out = {Zeros({4, 5})};
  Tensor r = Random({4, 5}, rng_);
  auto f = [&] { return Objective("linear", in, out, r); };
  std::vector<Tensor> dx = Backward("linear_grad_input", {r, in[1]}, {{4, 3}});
  std::vector<Tensor> dp = Backward("linear_grad_params", {r, in[0]}, {{5, 3}, {5}});
  EXPECT_LT(RelativeError(dx[0].data, Numerical(in[0].data, f)), kTolerance);
  EXPECT_LT(RelativeError(dp[0].data, Numerical(in[1].data, f)), kTolerance);
  EXPECT_LT(RelativeError(dp[1].data, Numerical(in[2].data, f)), kTolerance);
}

// No bias, and a [B, T, in] input (the rows are every leading index).
TEST_F(OpGradientCheck, LinearWithoutBiasOverTokens) {
  std::vector<Tensor> in = {Random({2, 3, 4}, rng_), Random({5, 4}, rng_)};
  std::vector<Tensor> out = {Zeros({2, 3, 5})};
  Tensor r = Random({2, 3, 5}, rng_);
  auto f = [&] { return Objective("linear", in, out, r); };
  std::vector<Tensor> dx = Backward("linear_grad_input", {r, in[1]}, {{2, 3, 4}});
  std::vector<Tensor> dw = Backward("linear_grad_params", {r, in[0]}, {{5, 4}});
  EXPECT_LT(RelativeError(dx[0].data, Numerical(in[0].data, f)), kTolerance);
  EXPECT_LT(RelativeError(dw[0].data, Numerical(in[1].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, Activations) {
  for (const std::string op : {"relu", "gelu", "gelu_tanh", "tanh", "silu"}) {
    std::vector<Tensor> in = {Random({3, 7}, rng_)};
    std::vector<Tensor> out = {Zeros({3, 7})};
    Tensor r = Random({3, 7}, rng_);
    auto f = [&] { return Objective(op, in, out, r); };
    f();
    // relu and tanh use y; gelu, gelu_tanh and silu use x (op_table.cc).
    const Tensor& saved =
        op == "gelu" || op == "gelu_tanh" || op == "silu" ? in[0] : out[0];
    std::vector<Tensor> dx = Backward(op + "_grad", {r, saved}, {{3, 7}});
    EXPECT_LT(RelativeError(dx[0].data, Numerical(in[0].data, f)), kTolerance) << op;
  }
}

TEST_F(OpGradientCheck, LayerNorm) {
  const std::map<std::string, double> attrs = {{"eps", 1e-5}};
  std::vector<Tensor> in = {Random({3, 6}, rng_), Random({6}, rng_), Random({6}, rng_)};
  std::vector<Tensor> out = {Zeros({3, 6}), Zeros({3}), Zeros({3})};
  Tensor r = Random({3, 6}, rng_);
  auto f = [&] { return Objective("layernorm", in, out, r, attrs); };
  f();
  std::vector<Tensor> dx =
      Backward("layernorm_grad_input", {r, in[0], in[1], out[1], out[2]}, {{3, 6}});
  std::vector<Tensor> dp =
      Backward("layernorm_grad_params", {r, in[0], out[1], out[2]}, {{6}, {6}});
  EXPECT_LT(RelativeError(dx[0].data, Numerical(in[0].data, f)), kTolerance);
  EXPECT_LT(RelativeError(dp[0].data, Numerical(in[1].data, f)), kTolerance);
  EXPECT_LT(RelativeError(dp[1].data, Numerical(in[2].data, f)), kTolerance);
}

// GPT-2's tanh form against its closed form at a few points, so the
// reference forward is not only self-consistent.
TEST(ReferenceOps, GeluTanhValues) {
  std::vector<double> x = {-3.0, -0.5, 0.0, 0.7, 2.5}, y(5);
  ASSERT_TRUE(EvalOp("gelu_tanh", {}, {TensorRef{x.data(), {5}}}, {TensorRef{y.data(), {5}}}).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    EXPECT_NEAR(y[i], 0.5 * x[i] * (1 + std::tanh(u)), 1e-15);
  }
}

TEST_F(OpGradientCheck, Softmax) {
  std::vector<Tensor> in = {Random({2, 3, 5}, rng_, -3, 3)};
  std::vector<Tensor> out = {Zeros({2, 3, 5})};
  Tensor r = Random({2, 3, 5}, rng_);
  auto f = [&] { return Objective("softmax", in, out, r); };
  f();
  for (int row = 0; row < 6; ++row) {
    double sum = 0;
    for (int j = 0; j < 5; ++j) sum += out[0].data[row * 5 + j];
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
  std::vector<Tensor> dx = Backward("softmax_grad", {r, out[0]}, {{2, 3, 5}});
  EXPECT_LT(RelativeError(dx[0].data, Numerical(in[0].data, f)), kTolerance);
}

// Repeated ids: their rows of dtable are sums; unused rows get zero.
TEST_F(OpGradientCheck, Embedding) {
  std::vector<Tensor> in = {Tensor{{2, 4}, {3, 0, 3, 5, 5, 1, 3, 0}}, Random({7, 3}, rng_)};
  std::vector<Tensor> out = {Zeros({2, 4, 3})};
  Tensor r = Random({2, 4, 3}, rng_);
  auto f = [&] { return Objective("embedding", in, out, r); };
  f();
  for (int c = 0; c < 3; ++c) EXPECT_EQ(out[0].data[3 * 4 + c], in[1].data[5 * 3 + c]);
  std::vector<Tensor> dt = Backward("embedding_grad", {r, in[0]}, {{7, 3}});
  EXPECT_LT(RelativeError(dt[0].data, Numerical(in[1].data, f)), kTolerance);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(dt[0].data[2 * 3 + c], 0.0);  // id 2 unused
  // An id outside the table is an error, not a wild read.
  in[0].data[1] = 7;
  std::vector<TensorRef> bad_in = {in[0].ref(), in[1].ref()}, bad_out = {out[0].ref()};
  EXPECT_FALSE(EvalOp("embedding", {}, bad_in, bad_out).ok());
}

TEST_F(OpGradientCheck, PositionEmbedding) {
  std::vector<Tensor> in = {Random({4, 3}, rng_)};
  std::vector<Tensor> out = {Zeros({3, 4, 3})};
  Tensor r = Random({3, 4, 3}, rng_);
  auto f = [&] { return Objective("position_embedding", in, out, r); };
  f();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[0].data[2 * 12 + i], in[0].data[i]);
  std::vector<Tensor> dt = Backward("position_embedding_grad", {r}, {{4, 3}});
  EXPECT_LT(RelativeError(dt[0].data, Numerical(in[0].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, Attention) {
  // B 2, T 4, 2 heads of 3 (GPT-2's q|k|v layout): lse[B, H, T] is each
  // row's log-sum-exp, position 0 sees only itself, so y[b, 0] is v[b, 0].
  const std::map<std::string, double> attrs = {{"heads", 2}};
  std::vector<Tensor> in = {Random({2, 4, 18}, rng_)};
  std::vector<Tensor> out = {Zeros({2, 4, 6}), Zeros({2, 2, 4})};
  Tensor r = Random({2, 4, 6}, rng_);
  auto f = [&] { return Objective("attention", in, out, r, attrs); };
  f();
  for (int b = 0; b < 2; ++b) {
    for (int c = 0; c < 6; ++c) {
      EXPECT_NEAR(out[0].data[b * 24 + c], in[0].data[b * 72 + 12 + c], 1e-15);
    }
  }
  // lse[b=1, h=1, i=1] by hand: log(exp(q1 . k0) + exp(q1 . k1)), / sqrt(3).
  {
    auto at = [&](int t, int part, int d) { return in[0].data[72 + t * 18 + part * 6 + 3 + d]; };
    double s0 = 0, s1 = 0;
    for (int d = 0; d < 3; ++d) {
      s0 += at(1, 0, d) * at(0, 1, d);
      s1 += at(1, 0, d) * at(1, 1, d);
    }
    s0 /= std::sqrt(3.0);
    s1 /= std::sqrt(3.0);
    EXPECT_NEAR(out[1].data[(1 * 2 + 1) * 4 + 1], std::log(std::exp(s0) + std::exp(s1)),
                1e-14);
  }
  std::vector<Tensor> d = Backward("attention_grad", {r, in[0], out[0], out[1]},
                                   {{2, 4, 18}, {2, 2, 4}}, attrs,
                                   /*accumulated_outputs=*/1);
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, GroupedQueryAttentionWithRope) {
  // 4 query heads over 2 key/value heads of 4, rotary positions.
  const std::map<std::string, double> attrs = {
      {"heads", 4}, {"kv_heads", 2}, {"rope", 1}, {"rope_theta", 10000}};
  std::vector<Tensor> in = {Random({2, 5, 32}, rng_)};
  std::vector<Tensor> out = {Zeros({2, 5, 16}), Zeros({2, 4, 5})};
  Tensor r = Random({2, 5, 16}, rng_);
  auto f = [&] { return Objective("attention", in, out, r, attrs); };
  f();
  std::vector<Tensor> d = Backward("attention_grad", {r, in[0], out[0], out[1]},
                                   {{2, 5, 32}, {2, 4, 5}}, attrs,
                                   /*accumulated_outputs=*/1);
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, Add) {
  std::vector<Tensor> in = {Random({2, 5}, rng_), Random({2, 5}, rng_)};
  std::vector<Tensor> out = {Zeros({2, 5})};
  Tensor r = Random({2, 5}, rng_);
  auto f = [&] { return Objective("add", in, out, r); };
  std::vector<Tensor> d = Backward("copy_grad", {r}, {{2, 5}});
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[1].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, CrossEntropy) {
  const double scale = 1.0 / 8;
  std::vector<Tensor> in = {Random({4, 5}, rng_), Tensor{{4}, {0, 3, 4, 1}}};
  std::vector<Tensor> out = {Zeros({1}), Zeros({4, 5})};
  Tensor r{{1}, {scale}};  // L = scale * loss_sum
  auto f = [&] { return Objective("cross_entropy", in, out, r); };
  f();
  std::vector<Tensor> d =
      Backward("cross_entropy_grad", {out[1], in[1]}, {{4, 5}}, {{"scale", scale}});
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
}

// Logits [B, T, V], labels [B, T]: one row per token.
TEST_F(OpGradientCheck, CrossEntropyOverTokens) {
  const double scale = 1.0 / 6;
  std::vector<Tensor> in = {Random({2, 3, 4}, rng_), Tensor{{2, 3}, {0, 3, 2, 1, 1, 3}}};
  std::vector<Tensor> out = {Zeros({1}), Zeros({2, 3, 4})};
  Tensor r{{1}, {scale}};
  auto f = [&] { return Objective("cross_entropy", in, out, r); };
  f();
  std::vector<Tensor> d =
      Backward("cross_entropy_grad", {out[1], in[1]}, {{2, 3, 4}}, {{"scale", scale}});
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
}

TEST_F(OpGradientCheck, Mse) {
  const double scale = 1.0 / 6;
  std::vector<Tensor> in = {Random({3, 4}, rng_), Random({3, 4}, rng_)};
  std::vector<Tensor> out = {Zeros({1})};
  Tensor r{{1}, {scale}};
  auto f = [&] { return Objective("mse", in, out, r); };
  std::vector<Tensor> d = Backward("mse_grad", {in[0], in[1]}, {{3, 4}}, {{"scale", scale}});
  EXPECT_LT(RelativeError(d[0].data, Numerical(in[0].data, f)), kTolerance);
}

// ---------------------------------------------------------------------------
// Whole plans.

class PlanGradientCheck {
 public:
  // i32 inputs and labels (class labels, token ids) are drawn from
  // [0, index_range).
  explicit PlanGradientCheck(const Plan& plan, int64_t index_range = 3)
      : plan_(plan), interp_(plan) {
    std::mt19937 rng(7);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int id : plan.parameter_buffers) {
      TensorRef t = interp_.buffer(id);
      for (int64_t i = 0; i < t.size(); ++i) t.data[i] = 0.7 * normal(rng);
    }
    std::vector<std::vector<std::vector<double>>> batches(plan.accumulate);
    for (auto& micro : batches) {
      for (int id : plan.input_buffers) {
        const Buffer& b = plan.buffers[id];
        std::vector<double> data(b.bytes / 4);
        // Class labels: the class count is the logits' width; 3 is below
        // every hand-built test model's count.
        for (double& v : data) {
          v = b.dtype == DType::kI32 ? static_cast<double>(rng() % index_range) : normal(rng);
        }
        micro.push_back(std::move(data));
      }
    }
    interp_.set_batches(std::move(batches));
  }

  // The step's loss, sum over micro-steps of loss_sum / (global_batch x
  // loss_terms).
  double Loss() {
    double loss = 0;
    for (const Instruction& in : plan_.instructions) {
      if (in.phase != Phase::kData && in.phase != Phase::kForward) continue;
      EXPECT_TRUE(interp_.Run(in).ok());
      for (int out : in.outputs) {
        if (out == plan_.loss_buffer) loss += interp_.buffer(out).data[0];
      }
    }
    return loss / (static_cast<double>(plan_.global_batch) * plan_.loss_terms);
  }

  // Runs everything up to the optimizer; returns the largest relative error
  // of any parameter's gradient (read from its bucket slot 0).
  double MaxError() {
    for (const Instruction& in : plan_.instructions) {
      if (in.op == "optimizer") continue;
      EXPECT_TRUE(interp_.Run(in).ok()) << in.label;
    }
    std::map<std::string, std::vector<double>> analytic;
    for (const Buffer& b : plan_.buffers) {
      if (b.kind == BufferKind::kGradient && b.name.find('@') == std::string::npos) {
        TensorRef t = interp_.buffer(b.id);
        analytic[b.name.substr(5)] = std::vector<double>(t.data, t.data + t.size());
      }
    }
    double worst = 0;
    for (int id : plan_.parameter_buffers) {
      TensorRef t = interp_.buffer(id);
      std::vector<double> numeric(t.size());
      for (int64_t i = 0; i < t.size(); ++i) {
        const double saved = t.data[i];
        t.data[i] = saved + kStep;
        const double plus = Loss();
        t.data[i] = saved - kStep;
        const double minus = Loss();
        t.data[i] = saved;
        numeric[i] = (plus - minus) / (2 * kStep);
      }
      const std::vector<double>& grad = analytic[plan_.buffers[id].name];
      EXPECT_EQ(grad.size(), numeric.size()) << plan_.buffers[id].name;
      ++checked_;
      if (grad.size() != numeric.size()) return 1.0;
      const double err = RelativeError(grad, numeric);
      EXPECT_LT(err, kTolerance) << plan_.buffers[id].name;
      worst = std::max(worst, err);
      errors_[plan_.buffers[id].name] = err;
    }
    return worst;
  }

  int checked() const { return checked_; }
  const std::map<std::string, double>& errors() const { return errors_; }

 private:
  const Plan& plan_;
  PlanInterpreter interp_;
  int checked_ = 0;
  std::map<std::string, double> errors_;  // parameter -> relative error
};

void CheckPlanGradients(const TrainSpec& spec) {
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_LT(PlanGradientCheck(*plan).MaxError(), kTolerance) << spec.model.name;
}

TEST(PlanGradientCheck, Mlp) { CheckPlanGradients(testing::MlpSpec(6, {5, 4}, 3, 1, 3, 2)); }

TEST(PlanGradientCheck, ResidualLayerNormGelu) {
  CheckPlanGradients(testing::ResidualSpec(5, 4, 3, 1, 3, 2));
}

TEST(PlanGradientCheck, AutoencoderMseTanh) {
  CheckPlanGradients(testing::AutoencoderSpec(5, 3, 1, 2, 3));
}

TEST(PlanGradientCheck, DeterministicSlots) {
  TrainSpec spec = testing::ResidualSpec(5, 4, 3, 1, 2, 3);
  spec.train.deterministic = true;
  CheckPlanGradients(spec);
}

TEST(PlanGradientCheck, OneBucketPerParameter) {
  TrainSpec spec = testing::MlpSpec(4, {3}, 3, 1, 2, 2);
  spec.train.bucket_mb = 0;
  CheckPlanGradients(spec);
}

TEST(PlanGradientCheck, RandomModels) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CheckPlanGradients(testing::RandomSpec(seed, 6, 2, 2));
  }
}

// ---------------------------------------------------------------------------
// Plans of .train source through the real front end: every op a .train
// file can call, then a whole GPT.

// A .train file around `model` (the body of a model block): one GPU, one
// micro-step of `micro_batch` samples. The data files only need to be
// readable.
std::string Source(const std::string& model, int64_t micro_batch = 2, int64_t accumulate = 1) {
  return absl::StrCat("model m {\n", model, "\n}\n",
                      "data { train = idx(\"/dev/null\", \"/dev/null\") }\n",
                      "train {\n  gpus = 1  micro_batch = ", micro_batch,
                      "  accumulate = ", accumulate,
                      "  steps = 1\n  optimizer = adamw(lr = 1e-3, weight_decay = 0.1)\n}\n");
}

TrainSpec Compile(const std::string& source) {
  const FrontendResult r = CompileSource(source, "gradient_check.train");
  EXPECT_TRUE(r.spec.has_value()) << FormatDiagnostics(r.diagnostics, r.source);
  return r.spec.value_or(TrainSpec{});
}

// Which instructions write the gradient of `parameter`, as (op, accumulate).
std::vector<std::pair<std::string, double>> GradientWriters(const Plan& plan,
                                                            const std::string& parameter) {
  std::vector<std::pair<std::string, double>> writers;
  for (const Instruction& in : plan.instructions) {
    for (int out : in.outputs) {
      if (plan.buffers[out].name == "grad/" + parameter) {
        writers.emplace_back(in.op, in.attrs.count("accumulate") ? in.attrs.at("accumulate") : -1);
      }
    }
  }
  return writers;
}

bool PlanHasOp(const Plan& plan, const std::string& op) {
  for (const Instruction& in : plan.instructions) {
    if (in.op == op) return true;
  }
  return false;
}

// Compiles, plans and checks every parameter's gradient; `ops` must all be
// in the plan (so the check covers what it claims to).
double CheckSourceGradients(const std::string& source, int64_t index_range,
                            const std::vector<std::string>& ops) {
  const TrainSpec spec = Compile(source);
  if (spec.model.parameters.empty()) {
    ADD_FAILURE() << "no model";
    return 1.0;
  }
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return 1.0;
  for (const std::string& op : ops) EXPECT_TRUE(PlanHasOp(*plan, op)) << op;
  PlanGradientCheck check(*plan, index_range);
  const double worst = check.MaxError();
  EXPECT_EQ(check.checked(), static_cast<int>(spec.model.parameters.size()));
  for (const auto& [name, err] : check.errors()) {
    std::cout << "  " << name << ": " << err << "\n";
  }
  std::cout << spec.model.name << ": max relative error " << worst << "\n";
  EXPECT_LT(worst, kTolerance);
  return worst;
}

// The linear and its gelu run as one linear_gelu (fusion = true), the
// backward reading its pre-activation; the classifier's input gradient and
// the gelu's gradient as one linear_grad_input_gelu.
TEST(SourceGradientCheck, GeluTanhAndLinearWithoutBias) {
  CheckSourceGradients(Source(R"(
  input  x: f32[6]
  label  y: i32[3]
  h      = gelu(linear(x, 5, bias = false), approximate = "tanh")
  logits = linear(h, 3)
  loss   = cross_entropy(logits, y)
)", 3),
                       3, {"linear_gelu", "linear_grad_input_gelu", "linear_grad_params"});
}

// A Llama-style pre-norm block: RMSNorm, no biases.
TEST(SourceGradientCheck, RmsNorm) {
  CheckSourceGradients(Source(R"(
  input  x: f32[6]
  label  y: i32[3]
  h      = linear(x, 5, bias = false)
  n      = rmsnorm(h)
  logits = linear(n, 3, bias = false)
  loss   = cross_entropy(logits, y)
)", 3),
                       3, {"rmsnorm", "rmsnorm_grad_input", "rmsnorm_grad_params"});
}

// SwiGLU: silu(gate) * up, written with the infix and as a call; both
// operands of each mul need a gradient. The first product is fused
// (swiglu and swiglu_grad, compiler/graph/fuse_swiglu.h); the second, of
// no silu, stays a mul.
TEST(SourceGradientCheck, SwiGluMul) {
  CheckSourceGradients(Source(R"(
  input  x: f32[6]
  label  y: i32[3]
  gate   = linear(x, 5, bias = false)
  up     = linear(x, 5, bias = false)
  g      = silu(gate) * up
  v      = linear(x, 5)
  h      = mul(g, v)
  logits = linear(h, 3)
  loss   = cross_entropy(logits, y)
)", 3),
                       3, {"mul", "mul_grad", "swiglu", "swiglu_grad"});
}

// silu's output read by the product and the add: the fusion leaves the
// five apart.
TEST(SourceGradientCheck, SwiGluWithSiluReadTwice) {
  CheckSourceGradients(Source(R"(
  input  x: f32[6]
  label  y: i32[3]
  gate   = linear(x, 5, bias = false)
  up     = linear(x, 5, bias = false)
  s      = silu(gate)
  logits = linear(s * up + s, 3)
  loss   = cross_entropy(logits, y)
)", 3),
                       3, {"mul", "mul_grad", "silu", "silu_grad"});
}

TEST(SourceGradientCheck, Softmax) {
  CheckSourceGradients(Source(R"(
  input  x: f32[6]
  label  y: i32[3]
  s      = softmax(linear(x, 5))
  logits = linear(s, 3)
  loss   = cross_entropy(logits, y)
)", 3),
                       3, {"softmax", "softmax_grad"});
}

TEST(SourceGradientCheck, EmbeddingsOverTokens) {
  CheckSourceGradients(Source(R"(
  input  tokens: i32[5]
  label  next:   i32[5]
  wte    = embedding(tokens, 7, 4)
  wpe    = position_embedding(5, 4)
  logits = linear(wte + wpe, 7)
  loss   = cross_entropy(logits, next)
)"),
                       7, {"embedding_grad", "position_embedding_grad"});
}

TEST(SourceGradientCheck, CausalAttention) {
  CheckSourceGradients(Source(R"(
  input  tokens: i32[5]
  label  next:   i32[5]
  e      = embedding(tokens, 7, 6)
  qkv    = linear(e, 3 * 6)
  y      = causal_attention(qkv, 2)
  logits = linear(y, 7)
  loss   = cross_entropy(logits, next)
)"),
                       7, {"attention", "attention_grad"});
}

// Convolution (bias, padding, stride), max and average pooling (padding
// counted), the global average and flatten, the second convolution's input
// gradient included.
constexpr char kCnn[] = R"(
  input  x: f32[2, 6, 6]
  label  y: i32[3]
  c1     = relu(conv2d(x, 3, kernel = 3, padding = 1))
  p1     = max_pool2d(c1, 2)
  c2     = conv2d(p1, 4, kernel = 2, bias = false)
  a2     = avg_pool2d(c2, 2, stride = 1, padding = 1)
  c3     = conv2d(a2, 2, kernel = 3, stride = 2, padding = 1)
  g      = linear(global_avg_pool(a2), 3)
  logits = linear(flatten(c3), 3) + g
  loss   = cross_entropy(logits, y)
)";

TEST(SourceGradientCheck, ConvolutionAndPooling) {
  CheckSourceGradients(Source(kCnn), 3,
                       {"conv2d", "conv2d_grad_input", "conv2d_grad_params", "max_pool2d",
                        "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad", "reshape"});
}

TEST(SourceGradientCheck, ConvolutionAndPoolingTwoMicroSteps) {
  CheckSourceGradients(Source(kCnn, 2, 2), 3, {"conv2d_grad_params"});
}

// The tied weight gets two contributions in one micro-step: the head's
// (accumulate 0, it comes first in the backward) and the embedding's
// (accumulate 1).
TEST(SourceGradientCheck, TiedWeightTwoContributions) {
  const std::string source = Source(R"(
  input  tokens: i32[4]
  label  next:   i32[4]
  wte    = embedding(tokens, 6, 5)
  logits = linear(tanh(wte), 6, weight = wte.weight, bias = false)
  loss   = cross_entropy(logits, next)
)");
  absl::StatusOr<Plan> plan = BuildPlan(Compile(source));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(GradientWriters(*plan, "wte.weight"),
            (std::vector<std::pair<std::string, double>>{{"linear_grad_params", 0},
                                                         {"embedding_grad", 1}}));
  CheckSourceGradients(source, 6, {"embedding_grad", "linear_grad_params"});
}

// tiny_gpt.train's model, 2 layers at toy sizes.
constexpr char kGpt[] = R"(
  const vocab = 11, ctx = 5, width = 8, heads = 2, layers = 2

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  block attention(x) {
    c_attn = linear(x, 3 * width)
    y      = causal_attention(c_attn, heads)
    c_proj = linear(y, width)
    return c_proj
  }
  block mlp(x) {
    c_fc   = linear(x, 4 * width)
    c_proj = linear(gelu(c_fc, approximate = "tanh"), width)
    return c_proj
  }
  block layer(x) {
    ln_1 = layernorm(x)
    attn = attention(ln_1)
    r    = x + attn
    ln_2 = layernorm(r)
    mlp  = mlp(ln_2)
    return r + mlp
  }

  wte    = embedding(tokens, vocab, width)
  wpe    = position_embedding(ctx, width)
  h      = repeat(layer, layers, wte + wpe)
  ln_f   = layernorm(h)
  logits = linear(ln_f, vocab, weight = wte.weight, bias = false)
  loss   = cross_entropy(logits, next)
)";

// Every residual sum and its layernorm run as one add_layernorm
// (fusion = true): h.0's is wte + wpe; c_proj's input gradient and the
// gelu's gradient as one linear_grad_input_gelu.
const std::vector<std::string> kGptOps = {
    "embedding",      "position_embedding", "add_layernorm",
    "attention",      "linear_gelu",
    "cross_entropy_fused", "embedding_grad",  "position_embedding_grad",
    "attention_grad", "linear_grad_input_gelu", "layernorm_grad_input",
    "layernorm_grad_params", "linear_grad_params", "linear_grad_input",
    "copy_grad"};

TEST(SourceGradientCheck, TwoLayerGptTied) {
  const TrainSpec spec = Compile(Source(kGpt));
  // wte, wpe, 2 x 12 per layer, ln_f's 2; no lm head of its own.
  ASSERT_EQ(spec.model.parameters.size(), 2u + 2 * 12 + 2);
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->loss_terms, 5);
  EXPECT_EQ(GradientWriters(*plan, "wte.weight"),
            (std::vector<std::pair<std::string, double>>{{"linear_grad_params", 0},
                                                         {"embedding_grad", 1}}));
  CheckSourceGradients(Source(kGpt), 11, kGptOps);
}

// The same with an untied head (a weight and bias of its own).
TEST(SourceGradientCheck, TwoLayerGptUntied) {
  const std::string model = absl::StrReplaceAll(
      kGpt, {{"linear(ln_f, vocab, weight = wte.weight, bias = false)", "linear(ln_f, vocab)"}});
  ASSERT_NE(model, kGpt);
  CheckSourceGradients(Source(model), 11, kGptOps);
}

// Two micro-steps: the tied weight's first write in micro-step 1
// accumulates onto micro-step 0's.
TEST(SourceGradientCheck, TwoLayerGptTiedTwoMicroSteps) {
  CheckSourceGradients(Source(kGpt, 1, 2), 11, kGptOps);
}

}  // namespace
}  // namespace trainc
