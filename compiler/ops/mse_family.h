// mse: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its sizes, their resolution from the
// operands' shapes, and its loops: Run<float> is the CPU kernel,
// Run<double> the float64 reference. The CUDA kernels are
// runtime/cuda/mse.cu; the op table entries in compiler/ops/op_table.cc.
//
//   mse       pred[B, ..], target (pred's size) -> loss_sum[1]
//             = sum over rows of mean_j (pred - target)^2
//   mse_grad  pred, target -> dpred (+)= scale 2 (pred - target) / width
#ifndef TRAINC_COMPILER_OPS_MSE_FAMILY_H_
#define TRAINC_COMPILER_OPS_MSE_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct MseFamily {
  struct Args {
    int64_t rows = 0;       // pred's first axis
    int64_t width = 0;      // elements per row
    double loss_scale = 0;  // mse_grad: d(loss) / d(loss sum)
  };

  // "" or why `in` / `out` (full buffer shapes) and `attrs` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    if (in[0].empty() || in[0][0] == 0) return "pred shape";
    a->rows = in[0][0];
    a->width = unit::Elements(in[0]) / a->rows;
    if (unit::Elements(in[1]) != unit::Elements(in[0])) return "target size";
    if (op == KernelOp::kMseGrad) {
      auto it = attrs.find("scale");
      if (it == attrs.end()) return "missing attr scale";
      a->loss_scale = it->second;
    } else if (unit::Elements(out[0]) != 1) {
      return "loss_sum is not [1]";
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    if (op == KernelOp::kMse) {
      Forward(a, x[0], x[1], y[0]);
    } else {
      Grad(a, x[0], x[1], accumulate, y[0]);
    }
  }

  // Each row's mean in double, the rows summed in double.
  template <typename T>
  static void Forward(const Args& a, const T* pred, const T* target, T* loss_sum) {
    const int64_t n = a.width;
    double loss = 0.0;
    for (int64_t r = 0; r < a.rows; ++r) {
      double row = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double e = static_cast<double>(pred[r * n + j]) - target[r * n + j];
        row += e * e;
      }
      loss += row / n;
    }
    loss_sum[0] = static_cast<T>(loss);
  }

  template <typename T>
  static void Grad(const Args& a, const T* __restrict pred, const T* __restrict target,
                   bool accumulate, T* __restrict dpred) {
    const T k = T(2) * static_cast<T>(a.loss_scale) / static_cast<T>(a.width);
    const int64_t total = a.rows * a.width;
    if (accumulate) {
      for (int64_t i = 0; i < total; ++i) dpred[i] += k * (pred[i] - target[i]);
    } else {
      for (int64_t i = 0; i < total; ++i) dpred[i] = k * (pred[i] - target[i]);
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_MSE_FAMILY_H_
