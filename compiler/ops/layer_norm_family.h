// layernorm: a unit family (compiler/ops/kernel_families.h). Its sizes,
// their resolution from the operands' shapes, and its loops: Run<float>
// is the CPU kernel, Run<double> the float64 reference. The CUDA kernels
// are runtime/cuda/layer_norm.cu; the op table entries (model op,
// instruction ops, gradient rules) are in compiler/ops/op_table.cc.
//
// LayerNorm over the last axis of x[rows, width], as torch.nn.LayerNorm:
//   y = (x - mean) rstd weight + bias,  rstd = 1 / sqrt(var + eps)
// with the biased variance; the statistics in double whatever the
// element type (two passes: no cancellation when |mean| >> std).
//
//   layernorm             x, weight[d], bias[d] -> y, mean[rows], rstd[rows]
//   add_layernorm         a, b, weight, bias -> sum = a + b, y, mean, rstd
//   layernorm_grad_input  dy, x, weight, mean, rstd -> dx; acc
//   layernorm_grad_params dy, x, mean, rstd -> dweight, dbias; acc
#ifndef TRAINC_COMPILER_OPS_LAYER_NORM_FAMILY_H_
#define TRAINC_COMPILER_OPS_LAYER_NORM_FAMILY_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/bf16.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct LayerNormFamily {
  struct Args {
    int64_t rows = 0, width = 0;
    double eps = 0;  // the loops use it in their element type
    // Bit j: output j is stored as bf16 (precision = bf16), set by the
    // runtime's resolver; the reference leaves it 0. add_layernorm rounds
    // a bf16 sum before it normalizes it, as the unfused plan's layernorm
    // reads the bf16 tensor.
    uint32_t bf16_outputs = 0;
    bool RoundSum() const { return (bf16_outputs & 1u) != 0; }
  };

  // "" or why `in` / `out` (full buffer shapes) and `attrs` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    using unit::Elements;
    // The weight (or its gradient) is [d]; rows are the rest of x (of
    // add_layernorm: of a).
    const std::vector<int64_t>& per_feature = op == KernelOp::kLayerNorm ? in[1]
                                              : op == KernelOp::kLayerNormGradParams
                                                  ? out[0]
                                                  : in[2];
    const std::string why = unit::RowsOf(in[0], per_feature, &a->rows, &a->width);
    if (!why.empty()) return why;
    a->eps = unit::Attr(attrs, "eps", 1e-5);
    if (op == KernelOp::kAddLayerNorm) {
      const int64_t n = a->rows * a->width;
      if (Elements(in[1]) != n) return "a and b differ in size";
      if (Elements(in[3]) != a->width) return "bias size";
      if (Elements(out[0]) != n || Elements(out[1]) != n) return "sum or y is not the size of a";
      if (Elements(out[2]) != a->rows || Elements(out[3]) != a->rows) {
        return "mean or rstd is not one per row";
      }
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    switch (op) {
      case KernelOp::kLayerNorm:
        Forward(a, x[0], x[1], x[2], y[0], y[1], y[2]);
        break;
      case KernelOp::kAddLayerNorm:
        AddForward(a, x[0], x[1], x[2], x[3], y[0], y[1], y[2], y[3]);
        break;
      case KernelOp::kLayerNormGradInput:
        GradInput(a, x[0], x[1], x[2], x[3], x[4], accumulate, y[0]);
        break;
      default:
        GradParams(a, x[0], x[1], x[2], x[3], accumulate, y[0], y[1]);
    }
  }

  // Per row: mean and rstd saved, y = (x - mean) rstd gamma + beta in T.
  template <typename T>
  static void Forward(const Args& a, const T* x, const T* gamma, const T* beta, T* __restrict y,
                      T* __restrict mean, T* __restrict rstd) {
    const int64_t d = a.width;
    const double eps = static_cast<T>(a.eps);
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict xr = x + r * d;
      T* __restrict yr = y + r * d;
      // Two passes in double: a row is short and this keeps the statistics
      // exact to fp32 rounding whatever the row's offset.
      double sum = 0.0;
      for (int64_t j = 0; j < d; ++j) sum += xr[j];
      const double mu = sum / d;
      double sq = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        const double c = xr[j] - mu;
        sq += c * c;
      }
      const T m = static_cast<T>(mu);
      const T rs = static_cast<T>(1.0 / std::sqrt(sq / d + eps));
      mean[r] = m;
      rstd[r] = rs;
      for (int64_t j = 0; j < d; ++j) {
        yr[j] = (xr[j] - m) * rs * gamma[j] + beta[j];
      }
    }
  }

  // Row by row: the add (pointwise.h's) into the sum, a bf16 sum rounded
  // (Args::RoundSum), then Forward of the row while it is in cache: the
  // unfused plan's two kernels' bits. y may take b's bytes: each row of b
  // is read before its y is written.
  template <typename T>
  static void AddForward(const Args& a, const T* x0, const T* x1, const T* gamma, const T* beta,
                         T* sum, T* y, T* mean, T* rstd) {
    Args row = a;
    row.rows = 1;
    for (int64_t r = 0; r < a.rows; ++r) {
      const int64_t at = r * a.width;
      for (int64_t j = 0; j < a.width; ++j) {
        sum[at + j] = pointwise::Add::F(x0[at + j], x1[at + j]);
      }
      if (a.RoundSum()) {
        for (int64_t j = 0; j < a.width; ++j) sum[at + j] = RoundToBf16(sum[at + j]);
      }
      Forward(row, sum + at, gamma, beta, y + at, mean + r, rstd + r);
    }
  }

  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
  template <typename T>
  static void GradInput(const Args& a, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, bool accumulate, T* __restrict dx) {
    const int64_t d = a.width;
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict dyr = dy + r * d;
      const T* __restrict xr = x + r * d;
      T* __restrict dxr = dx + r * d;
      const T m = mean[r];
      const T rs = rstd[r];
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t j = 0; j < d; ++j) {
        const T g = dyr[j] * gamma[j];
        sum_g += g;
        sum_gx += static_cast<double>(g) * ((xr[j] - m) * rs);
      }
      const T mean_g = static_cast<T>(sum_g / d);
      const T mean_gx = static_cast<T>(sum_gx / d);
      for (int64_t j = 0; j < d; ++j) {
        const T xhat = (xr[j] - m) * rs;
        const T v = rs * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
        dxr[j] = accumulate ? dxr[j] + v : v;
      }
    }
  }

  // dgamma (+)= sum over rows of dy xhat, dbeta (+)= sum of dy, added row
  // by row in T.
  template <typename T>
  static void GradParams(const Args& a, const T* dy, const T* x, const T* mean, const T* rstd,
                         bool accumulate, T* __restrict dgamma, T* __restrict dbeta) {
    const int64_t d = a.width;
    if (!accumulate) {
      std::fill(dgamma, dgamma + d, T(0));
      std::fill(dbeta, dbeta + d, T(0));
    }
    for (int64_t r = 0; r < a.rows; ++r) {
      const T* __restrict dyr = dy + r * d;
      const T* __restrict xr = x + r * d;
      const T m = mean[r];
      const T rs = rstd[r];
      for (int64_t j = 0; j < d; ++j) {
        dgamma[j] += dyr[j] * ((xr[j] - m) * rs);
        dbeta[j] += dyr[j];
      }
    }
  }

  // v as a bf16 tensor holds it (bf16.h). The reference never rounds
  // (bf16_outputs 0).
  static float RoundToBf16(float v) { return RoundedToBf16(v); }
  static double RoundToBf16(double v) { return v; }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_LAYER_NORM_FAMILY_H_
