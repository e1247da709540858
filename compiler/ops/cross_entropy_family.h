// cross_entropy: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes, and its loops: Run<float> is the CPU kernel,
// Run<double> the float64 reference. The CUDA kernels are
// runtime/cuda/cross_entropy.cu; the op table entries in
// compiler/ops/op_table.cc.
//
// One row of logits per label (token), softmax over its classes:
//   cross_entropy       logits[.., C], labels[..] -> loss_sum[1], probs
//   cross_entropy_grad  probs, labels -> dlogits (+)= scale (probs - onehot)
//   cross_entropy_fused logits, labels -> loss_sum, dlogits: both in one pass
//                       per row, no probability tensor, the same bits
// loss_sum = sum over rows of logsumexp(logits) - logits[label].
#ifndef TRAINC_COMPILER_OPS_CROSS_ENTROPY_FAMILY_H_
#define TRAINC_COMPILER_OPS_CROSS_ENTROPY_FAMILY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct CrossEntropyFamily {
  struct Args {
    int64_t rows = 0;                 // labels, one per row of logits
    int64_t classes = 0;              // logits per row
    double loss_scale = 0;            // the gradients': d(loss) / d(loss sum)
    const int32_t* labels = nullptr;  // [rows] class ids
    // cross_entropy_fused in evaluation (false): the loss alone, and
    // dlogits (which may occupy the logits' bytes) left holding the logits.
    bool training = true;
  };
  static constexpr const int32_t* Args::*kIds = &Args::labels;
  static int IdsInput(KernelOp) { return 1; }

  // "" or why `in` / `out` (full buffer shapes) and `attrs` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    a->rows = unit::Elements(in[1]);
    if (a->rows == 0 || unit::Elements(in[0]) % a->rows != 0) return "logits are not [B, C]";
    a->classes = unit::Elements(in[0]) / a->rows;
    if (op != KernelOp::kCrossEntropyGrad) {
      if (unit::Elements(out[0]) != 1) return "loss_sum is not [1]";
      if (unit::Elements(out[1]) != a->rows * a->classes) return "probs size";
    }
    if (op != KernelOp::kCrossEntropy) {
      auto it = attrs.find("scale");
      if (it == attrs.end()) return "missing attr scale";
      a->loss_scale = it->second;
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above):
  // "" or why not (a label outside [0, classes)).
  template <typename T>
  static std::string Run(KernelOp op, const Args& a, const T* const* x, T* const* y,
                         bool accumulate) {
    auto bad_label = [&] { return "a label is outside [0, " + std::to_string(a.classes) + ")"; };
    if (op == KernelOp::kCrossEntropy) return Forward(a, x[0], y[0], y[1]) ? "" : bad_label();
    if (op == KernelOp::kCrossEntropyGrad) {
      for (int64_t r = 0; r < a.rows; ++r) {
        if (a.labels[r] < 0 || a.labels[r] >= a.classes) return bad_label();
      }
      Grad(a, x[0], accumulate, y[0]);
      return "";
    }
    if (!Fused(a, x[0], y[0], a.training ? y[1] : nullptr)) return bad_label();
    if (!a.training && y[1] != x[0]) {
      std::memcpy(y[1], x[0], static_cast<size_t>(a.rows * a.classes) * sizeof(T));
    }
    return "";
  }

  // One row: softmax(lr) into `pr` (which may be `lr`: each element is
  // read before it is written); returns -log softmax[t] = log(sum) -
  // (l[t] - max), with no exp of a large number and no log of a tiny
  // probability. `pr` null: the loss only, nothing written.
  template <typename T>
  static double SoftmaxRow(const T* lr, int64_t classes, int32_t t, T* pr) {
    T mx = lr[0];
    for (int64_t j = 1; j < classes; ++j) mx = std::max(mx, lr[j]);
    const T at_label = lr[t] - mx;
    T sum = 0;
    if (pr == nullptr) {
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(lr[j] - mx);
    } else {
      for (int64_t j = 0; j < classes; ++j) {
        pr[j] = std::exp(lr[j] - mx);
        sum += pr[j];
      }
      const T inv = T(1) / sum;
      for (int64_t j = 0; j < classes; ++j) pr[j] *= inv;
    }
    return std::log(static_cast<double>(sum)) - at_label;
  }

  // probs = softmax(logits), loss_sum[0] = the rows' losses summed in
  // double. False (nothing useful written) on a label outside the classes.
  template <typename T>
  static bool Forward(const Args& a, const T* logits, T* loss_sum, T* __restrict probs) {
    double loss = 0.0;
    for (int64_t r = 0; r < a.rows; ++r) {
      const int32_t t = a.labels[r];
      if (t < 0 || t >= a.classes) return false;
      loss += SoftmaxRow(logits + r * a.classes, a.classes, t, probs + r * a.classes);
    }
    loss_sum[0] = static_cast<T>(loss);
    return true;
  }

  // Forward's row, then Grad's arithmetic on it in place (scale each
  // probability, subtract scale at the label): the fused plan trains on
  // the same bits as the unfused one. dlogits may be logits; null: the
  // loss only.
  template <typename T>
  static bool Fused(const Args& a, const T* logits, T* loss_sum, T* dlogits) {
    const T scale = static_cast<T>(a.loss_scale);
    double loss = 0.0;
    for (int64_t r = 0; r < a.rows; ++r) {
      const int32_t t = a.labels[r];
      if (t < 0 || t >= a.classes) return false;
      T* dr = dlogits == nullptr ? nullptr : dlogits + r * a.classes;
      loss += SoftmaxRow(logits + r * a.classes, a.classes, t, dr);
      if (dr == nullptr) continue;
      for (int64_t j = 0; j < a.classes; ++j) dr[j] = scale * dr[j];
      dr[t] -= scale;
    }
    loss_sum[0] = static_cast<T>(loss);
    return true;
  }

  // dlogits (+)= scale (probs - onehot(label)); labels already checked.
  template <typename T>
  static void Grad(const Args& a, const T* probs, bool accumulate, T* __restrict dlogits) {
    const T scale = static_cast<T>(a.loss_scale);
    const int64_t classes = a.classes;
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict pr = probs + r * classes;
      T* __restrict dr = dlogits + r * classes;
      if (accumulate) {
        for (int64_t j = 0; j < classes; ++j) dr[j] += scale * pr[j];
      } else {
        for (int64_t j = 0; j < classes; ++j) dr[j] = scale * pr[j];
      }
      dr[a.labels[r]] -= scale;
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_CROSS_ENTROPY_FAMILY_H_
