// Gradient checks in double precision against central finite differences:
// first every backward op of plan.h on its own, then whole plans (forward,
// backward, accumulation over micro-steps, deterministic slots) run by the
// reference interpreter over the planned arena.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/autodiff/reference_eval.h"
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
  // adds to what is there.
  std::vector<Tensor> Backward(const std::string& op, std::vector<Tensor> inputs,
                               std::vector<std::vector<int64_t>> out_shapes,
                               std::map<std::string, double> attrs = {}) {
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
    for (size_t k = 0; k < outs.size(); ++k) {
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

TEST_F(OpGradientCheck, Activations) {
  for (const std::string op : {"relu", "gelu", "tanh"}) {
    std::vector<Tensor> in = {Random({3, 7}, rng_)};
    std::vector<Tensor> out = {Zeros({3, 7})};
    Tensor r = Random({3, 7}, rng_);
    auto f = [&] { return Objective(op, in, out, r); };
    f();
    // relu and tanh use y, gelu uses x (plan.h).
    const Tensor& saved = op == "gelu" ? in[0] : out[0];
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
  explicit PlanGradientCheck(const Plan& plan) : plan_(plan), interp_(plan) {
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
        // every test model's count.
        for (double& v : data) {
          v = b.dtype == DType::kI32 ? static_cast<double>(rng() % 3) : normal(rng);
        }
        micro.push_back(std::move(data));
      }
    }
    interp_.set_batches(std::move(batches));
  }

  // The step's loss, sum over micro-steps of loss_sum / global_batch.
  double Loss() {
    double loss = 0;
    for (const Instruction& in : plan_.instructions) {
      if (in.phase != Phase::kData && in.phase != Phase::kForward) continue;
      EXPECT_TRUE(interp_.Run(in).ok());
      for (int out : in.outputs) {
        if (out == plan_.loss_buffer) loss += interp_.buffer(out).data[0];
      }
    }
    return loss / plan_.global_batch;
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
      if (grad.size() != numeric.size()) return 1.0;
      const double err = RelativeError(grad, numeric);
      EXPECT_LT(err, kTolerance) << plan_.buffers[id].name;
      worst = std::max(worst, err);
    }
    return worst;
  }

 private:
  const Plan& plan_;
  PlanInterpreter interp_;
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

}  // namespace
}  // namespace trainc
