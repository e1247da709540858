// optimizer: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes and the plan (its optimizer, the bucket and its ZeRO
// shards), and its loops: Run<float> is the CPU kernel, Run<double> the
// float64 reference. The CUDA kernels are runtime/cuda/optimizer.cu; the op
// table entry in compiler/ops/op_table.cc.
//
//   optimizer  params, grads, state spans[, grad_sq] -> params, state spans:
//              torch.optim.AdamW (amsgrad off; state m, v) or torch.optim.SGD
//              (dampening 0; state its momentum buffer, none without
//              momentum), in torch's float operation order, the scalars
//              formed in double and rounded once. With grad_sq (clipping or
//              skip_nonfinite): a non-finite norm changes nothing; clip > 0
//              scales the gradients by min(1, clip / (sqrt(grad_sq) + 1e-6)).
//              Under ZeRO (attr shard) one rank's shard: at rank x shard in
//              the bucket's span and gradients, or the ZeRO-2 gradient shard
//              and the ZeRO-3 parameter shard, which hold it alone.
#ifndef TRAINC_COMPILER_OPS_OPTIMIZER_FAMILY_H_
#define TRAINC_COMPILER_OPS_OPTIMIZER_FAMILY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct OptimizerFamily {
  struct Args {
    int64_t params = 0;           // floats of the bucket's parameter span
    int64_t shard = 0;            // floats of one rank's shard; 0: the whole span
    bool grads_sharded = false;   // x[1] is the rank's gradient shard alone
    bool params_sharded = false;  // x[0] / y[0] is the rank's parameter shard alone
    int grad_sq = -1;             // the input holding the squared norm; -1: none
    float clip = 0;               // clip_grad_norm; 0: none
    unit::OptimizerFacts hyper;   // the plan's, weight_decay 0 for an undecayed bucket
    unit::Step step;              // the run's: rank, step number, learning rate

    int64_t Count() const { return shard == 0 ? params : shard; }
    int64_t ParamBegin(int rank) const { return shard == 0 || params_sharded ? 0 : rank * shard; }
    int64_t GradBegin(int rank) const { return shard == 0 || grads_sharded ? 0 : rank * shard; }
  };

  // The plan's optimizer: AdamW or SGD (`op`, AdamW, for another kind,
  // which Resolve refuses).
  static KernelOp KernelOf(KernelOp op, const unit::PlanFacts& plan) {
    return plan.optimizer.kind == unit::OptimizerFacts::Kind::kSgd ? KernelOp::kSgd : op;
  }

  // "" or why `in` / `out` (full buffer shapes), `attrs` and the bucket in
  // `plan` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs,
                             const unit::PlanFacts& plan, Args* a) {
    using Role = unit::BucketRole;
    if (plan.bucket_elems < 0) return "attr bucket out of range";
    if (plan.optimizer.kind == unit::OptimizerFacts::Kind::kOther) return "unknown optimizer kind";
    if (plan.optimizer.param_elems < 0) return "bucket has no parameter span or gradient buffer";
    a->params = plan.optimizer.param_elems;
    if (plan.bucket_elems < a->params) return "bucket gradient slot smaller than its parameters";
    a->hyper = plan.optimizer;
    if (!plan.optimizer.bucket_decayed) a->hyper.weight_decay = 0;
    const int n_in = static_cast<int>(in.size());
    if (n_in > unit::PlanFacts::kMaxInputs) return "too many operands";
    const bool norm = plan.inputs[n_in - 1] == Role::kStepScalar;
    // Outputs: the parameters and the state spans, the inputs but the
    // gradients and the norm.
    if (out.size() != in.size() - (norm ? 2 : 1)) {
      return "the outputs are not the parameters and the state spans";
    }
    const double clip = unit::Attr(attrs, "clip", -1);
    if (norm) {
      if (unit::Elements(in[n_in - 1]) != 1) return "grad_sq is not [1]";
      a->grad_sq = n_in - 1;
      a->clip = static_cast<float>(std::max(clip, 0.0));
    } else if (clip > 0) {
      return "clipping needs the grad_sq step scalar as last input";
    }
    std::string why = unit::ShardOfBucket(attrs, plan, a->params, &a->shard);
    if (why.empty()) {
      why = unit::BucketGrads(plan.inputs[1], unit::Elements(in[1]), a->params, a->shard,
                              &a->grads_sharded);
    }
    if (why.empty()) why = Params(plan.inputs[0], unit::Elements(in[0]), a);
    if (why.empty()) why = States(op, plan, in, a);
    return why;
  }

  // The parameters, input 0 and output 0: the bucket's span, or under
  // ZeRO-3 its shard (with the gradient shard). "" or why not.
  static std::string Params(unit::BucketRole role, int64_t elements, Args* a) {
    if (role == unit::BucketRole::kParams) return "";
    if (role != unit::BucketRole::kParamShard) {
      return "the parameters are neither its bucket's span nor its shard";
    }
    if (a->shard == 0 || !a->grads_sharded) {
      return "a parameter shard needs attr shard and the gradient shard";
    }
    if (elements != a->shard) return "parameter shard of the wrong size";
    a->params_sharded = true;
    return "";
  }

  // The state spans, inputs 2.. and outputs 1..: AdamW's m and v, SGD's
  // momentum buffer (none without momentum), each of the shard's size.
  static std::string States(KernelOp op, const unit::PlanFacts& plan,
                            const std::vector<std::vector<int64_t>>& in, const Args* a) {
    const int want = op == KernelOp::kAdamW ? 2 : plan.optimizer.momentum != 0 ? 1 : 0;
    const int end = static_cast<int>(in.size()) - (a->grad_sq >= 0 ? 1 : 0);
    if (end - 2 != want) return "the state spans do not match the optimizer";
    for (int j = 2; j < end; ++j) {
      if (plan.inputs[j] != unit::BucketRole::kState || unit::Elements(in[j]) != a->Count()) {
        return "state span does not match the parameter span";
      }
    }
    return "";
  }

  // Runs kernel `op` (AdamW or SGD) on inputs `x` and outputs `y` (operand
  // order above) over this rank's floats.
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool) {
    T scale = 1;
    if (a.grad_sq >= 0) {
      const T sq = x[a.grad_sq][0];
      if (!std::isfinite(sq)) return;  // the weights and the state stay
      if (a.clip > 0) scale = std::min(T(1), static_cast<T>(a.clip) / (std::sqrt(sq) + T(1e-6f)));
    }
    const int rank = a.step.rank;
    const T* grad = x[1] + a.GradBegin(rank);
    T* param = y[0] + a.ParamBegin(rank);
    if (op == KernelOp::kAdamW) {
      AdamW(a, scale, grad, param, y[1], y[2]);
    } else {
      Sgd(a, scale, grad, param, a.hyper.momentum != 0 ? y[1] : nullptr);
    }
  }

  // Scalars are formed in double and rounded once, like torch's Python-side
  // arithmetic followed by the fp32 tensor ops; the per-element sequence is
  // torch's: p *= 1 - lr wd; m = m b1 + (1 - b1) g; v = v b2 + (1 - b2) g g;
  // p += (-(lr / bc1) * m) / (sqrt(v) / sqrt(bc2) + eps).
  template <typename T>
  static void AdamW(const Args& a, T scale, const T* __restrict grad, T* __restrict param,
                    T* __restrict m, T* __restrict v) {
    const unit::OptimizerFacts& h = a.hyper;
    const double lr = a.step.lr;
    const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(a.step.step));
    const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(a.step.step));
    const T decay = static_cast<T>(1.0 - lr * h.weight_decay);
    const T b1 = static_cast<T>(h.beta1), one_minus_b1 = static_cast<T>(1.0 - h.beta1);
    const T b2 = static_cast<T>(h.beta2), one_minus_b2 = static_cast<T>(1.0 - h.beta2);
    const T neg_step_size = static_cast<T>(-(lr / bc1));
    const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
    const double inv_bc2_sqrt = 1.0 / static_cast<double>(bc2_sqrt);
    const T eps = static_cast<T>(h.eps);
    for (int64_t i = 0, n = a.Count(); i < n; ++i) {
      const T g = grad[i] * scale;  // torch: grads.mul_(clip_coef)
      const T p = param[i] * decay;
      const T mi = m[i] * b1 + one_minus_b1 * g;
      const T vi = v[i] * b2 + one_minus_b2 * g * g;
      const T denom = DivideByConstant(std::sqrt(vi), bc2_sqrt, inv_bc2_sqrt) + eps;
      m[i] = mi;
      v[i] = vi;
      param[i] = p + neg_step_size * mi / denom;  // torch's addcdiv order
    }
  }

  // x / c for a constant c > 0 (inv_c = 1 / c in double), the same bits as
  // the division. In float, x * inv_c in double rounded once to float: the
  // quotient of two floats is either a float or at least 2^-49 (relative)
  // away from every midpoint between floats, and the double product is
  // within 2^-52 of it, so both round to the same float (inf, NaN, zeros
  // and subnormals included). A multiplication instead of a division: the
  // AdamW loop is bound by the divider (a square root and two divisions
  // per float).
  static float DivideByConstant(float x, float, double inv_c) {
    return static_cast<float>(static_cast<double>(x) * inv_c);
  }
  static double DivideByConstant(double x, double c, double) { return x / c; }

  // torch.optim.SGD (dampening 0): on step 1 the momentum buffer is the
  // decayed gradient itself.
  template <typename T>
  static void Sgd(const Args& a, T scale, const T* __restrict grad, T* __restrict param,
                  T* __restrict momentum_buf) {
    const T wd = static_cast<T>(a.hyper.weight_decay);
    const T mom = static_cast<T>(a.hyper.momentum);
    const T neg_lr = static_cast<T>(-a.step.lr);
    const int64_t n = a.Count();
    if (momentum_buf == nullptr) {
      for (int64_t i = 0; i < n; ++i) {
        const T d = grad[i] * scale + wd * param[i];
        param[i] = param[i] + neg_lr * d;
      }
      return;
    }
    const bool first = a.step.step == 1;
    for (int64_t i = 0; i < n; ++i) {
      const T d = grad[i] * scale + wd * param[i];
      const T buf = first ? d : momentum_buf[i] * mom + d;
      momentum_buf[i] = buf;
      const T step = a.hyper.nesterov ? d + mom * buf : buf;
      param[i] = param[i] + neg_lr * step;
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_OPTIMIZER_FAMILY_H_
