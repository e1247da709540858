// softmax: a unit family (compiler/ops/kernel_families.h). Its sizes,
// their resolution from the operands' shapes, and its loops: Run<float>
// is the CPU kernel, Run<double> the float64 reference. The CUDA kernels
// are runtime/cuda/softmax.cu; the op table entries (model op,
// instruction ops, gradient rules) are in compiler/ops/op_table.cc.
//
// Softmax over the last axis of x[rows, width], the max subtracted (no exp
// overflows whatever the logits), the sums in double:
//
//   softmax      x -> y
//   softmax_grad dy, y -> dx = y (dy - sum_j dy_j y_j); acc
#ifndef TRAINC_COMPILER_OPS_SOFTMAX_FAMILY_H_
#define TRAINC_COMPILER_OPS_SOFTMAX_FAMILY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct SoftmaxFamily {
  struct Args {
    int64_t rows = 0, width = 0;
  };

  // "" or why `in` / `out` (full buffer shapes) do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    using unit::Elements;
    const std::vector<int64_t>& x = in[0];
    if (x.empty() || x.back() == 0) return "x has no axis";
    a->width = x.back();
    a->rows = Elements(x) / a->width;
    for (const std::vector<int64_t>& s : in) {
      if (Elements(s) != Elements(x)) return "sizes differ";
    }
    if (Elements(out[0]) != Elements(x)) return "output size";
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    if (op == KernelOp::kSoftmax) {
      Forward(a, x[0], y[0]);
    } else {
      Grad(a, x[0], x[1], accumulate, y[0]);
    }
  }

  // y may be x.
  template <typename T>
  static void Forward(const Args& a, const T* x, T* y) {
    if (a.width == 0) return;
    for (int64_t r = 0; r < a.rows; ++r) Row(x + r * a.width, a.width, y + r * a.width);
  }

  template <typename T>
  static void Grad(const Args& a, const T* dy, const T* y, bool accumulate, T* __restrict dx) {
    const int64_t n = a.width;
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict dyr = dy + r * n;
      const T* __restrict yr = y + r * n;
      T* __restrict dxr = dx + r * n;
      double dot = 0.0;
      for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(dyr[j]) * yr[j];
      const T d = static_cast<T>(dot);
      if (accumulate) {
        for (int64_t j = 0; j < n; ++j) dxr[j] += yr[j] * (dyr[j] - d);
      } else {
        for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - d);
      }
    }
  }

  // y[0, n) = softmax(x[0, n)). The sum is kept in double: attention rows
  // are as long as the context (1024 for GPT-2) and this costs nothing next
  // to the exp. y may be x.
  template <typename T>
  static void Row(const T* x, int64_t n, T* y) {
    T mx = x[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, x[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      y[j] = std::exp(x[j] - mx);
      sum += y[j];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) y[j] *= inv;
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_SOFTMAX_FAMILY_H_
