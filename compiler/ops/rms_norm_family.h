// rmsnorm: a unit family (compiler/ops/kernel_families.h). Its sizes,
// their resolution from the operands' shapes, and its loops: Run<float>
// is the CPU kernel, Run<double> the float64 reference. The CUDA kernels
// are runtime/cuda/rms_norm.cu; the op table entries (model op,
// instruction ops, gradient rules) are in compiler/ops/op_table.cc.
//
// RMSNorm (Llama's) over the last axis of x[rows, width]:
//   y = x rstd weight,  rstd = 1 / sqrt(mean(x^2) + eps)
// the sum of squares in double whatever the element type.
//
//   rmsnorm             x, weight[d] -> y, rstd[rows]
//   rmsnorm_grad_input  dy, x, weight, rstd -> dx; acc
//   rmsnorm_grad_params dy, x, rstd -> dweight; acc
#ifndef TRAINC_COMPILER_OPS_RMS_NORM_FAMILY_H_
#define TRAINC_COMPILER_OPS_RMS_NORM_FAMILY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct RmsNormFamily {
  struct Args {
    int64_t rows = 0, width = 0;
    double eps = 0;  // the loops use it in their element type
  };

  // "" or why `in` / `out` (full buffer shapes) and `attrs` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    // The weight (or its gradient) is [d]; rows are the rest of x.
    const std::vector<int64_t>& per_feature = op == KernelOp::kRmsNorm            ? in[1]
                                              : op == KernelOp::kRmsNormGradInput ? in[2]
                                                                                  : out[0];
    a->eps = unit::Attr(attrs, "eps", 1e-5);
    return unit::RowsOf(in[0], per_feature, &a->rows, &a->width);
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    switch (op) {
      case KernelOp::kRmsNorm:
        Forward(a, x[0], x[1], y[0], y[1]);
        break;
      case KernelOp::kRmsNormGradInput:
        GradInput(a, x[0], x[1], x[2], x[3], accumulate, y[0]);
        break;
      default:
        GradParams(a, x[0], x[1], x[2], accumulate, y[0]);
    }
  }

  // The rows' sums in double run kRowBlock rows at a time, each row's in
  // its own order (the same bits as one row at a time): one row's chain of
  // dependent double additions left the CPU idle for most of its latency.
  static constexpr int64_t kRowBlock = 4;

  // sums[i] = the sum over j of term(r0 + i, j), j in increasing order, for
  // the `n` (at most kRowBlock) rows from r0.
  template <typename Term>
  static void RowSums(int64_t r0, int64_t n, int64_t d, Term term, double* sums) {
    if (n == kRowBlock) {
      double s[kRowBlock] = {};
      for (int64_t j = 0; j < d; ++j) {
        for (int64_t i = 0; i < kRowBlock; ++i) s[i] += term(r0 + i, j);
      }
      std::copy(s, s + kRowBlock, sums);
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      double s = 0.0;
      for (int64_t j = 0; j < d; ++j) s += term(r0 + i, j);
      sums[i] = s;
    }
  }

  template <typename T>
  static void Forward(const Args& a, const T* x, const T* weight, T* __restrict y,
                      T* __restrict rstd) {
    const int64_t d = a.width;
    const double eps = static_cast<T>(a.eps);
    auto square = [&](int64_t r, int64_t j) {
      return static_cast<double>(x[r * d + j]) * x[r * d + j];
    };
    for (int64_t r0 = 0; r0 < a.rows; r0 += kRowBlock) {
      const int64_t n = std::min(kRowBlock, a.rows - r0);
      double sq[kRowBlock];  // in double, as LayerNorm's statistics
      RowSums(r0, n, d, square, sq);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i;
        const T* __restrict xr = x + r * d;
        T* __restrict yr = y + r * d;
        const T rs = static_cast<T>(1.0 / std::sqrt(sq[i] / d + eps));
        rstd[r] = rs;
        for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * rs * weight[j];
      }
    }
  }

  // dx (+)= rstd (g - xhat mean(g xhat)), g = dy weight, xhat = x rstd.
  template <typename T>
  static void GradInput(const Args& a, const T* dy, const T* x, const T* weight, const T* rstd,
                        bool accumulate, T* __restrict dx) {
    const int64_t d = a.width;
    auto gx = [&](int64_t r, int64_t j) {
      return static_cast<double>(dy[r * d + j] * weight[j]) * (x[r * d + j] * rstd[r]);
    };
    for (int64_t r0 = 0; r0 < a.rows; r0 += kRowBlock) {
      const int64_t n = std::min(kRowBlock, a.rows - r0);
      double sum_gx[kRowBlock];
      RowSums(r0, n, d, gx, sum_gx);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t r = r0 + i;
        const T* __restrict dyr = dy + r * d;
        const T* __restrict xr = x + r * d;
        T* __restrict dxr = dx + r * d;
        const T rs = rstd[r];
        const T mean_gx = static_cast<T>(sum_gx[i] / d);
        for (int64_t j = 0; j < d; ++j) {
          const T v = rs * (dyr[j] * weight[j] - (xr[j] * rs) * mean_gx);
          dxr[j] = accumulate ? dxr[j] + v : v;
        }
      }
    }
  }

  // dweight (+)= sum over rows of dy x rstd, added row by row in T.
  template <typename T>
  static void GradParams(const Args& a, const T* dy, const T* x, const T* rstd, bool accumulate,
                         T* __restrict dweight) {
    const int64_t d = a.width;
    if (!accumulate) std::fill(dweight, dweight + d, T(0));
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict dyr = dy + r * d;
      const T* __restrict xr = x + r * d;
      const T rs = rstd[r];
      for (int64_t j = 0; j < d; ++j) dweight[j] += dyr[j] * (xr[j] * rs);
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_RMS_NORM_FAMILY_H_
