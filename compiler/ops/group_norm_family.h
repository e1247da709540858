// group_norm: a unit family (compiler/ops/kernel_families.h). Its sizes,
// their resolution from the operands' shapes, and its loops: Run<float>
// is the CPU kernel, Run<double> the float64 reference. The CUDA kernels
// are runtime/cuda/group_norm.cu; the op table entries (model op,
// instruction ops, gradient rules) are in compiler/ops/op_table.cc.
//
// GroupNorm as torch.nn.GroupNorm: the channels split into `groups`
// groups; each sample's group is normalized over all its elements (its
// channels and every position), then scaled and shifted per channel:
//   y = (x - mean) rstd weight[c] + bias[c],  rstd = 1 / sqrt(var + eps)
// with the biased variance. An image [N, C, H, W] has its channels on
// axis 1; a sequence [N, T, C] on its last axis.
//
//   group_norm             x, weight[C], bias[C] -> y, mean[N, G], rstd[N, G]
//   group_norm_grad_input  dy, x, weight, mean, rstd -> dx; acc
//   group_norm_grad_params dy, x, mean, rstd -> dweight, dbias; acc
#ifndef TRAINC_COMPILER_OPS_GROUP_NORM_FAMILY_H_
#define TRAINC_COMPILER_OPS_GROUP_NORM_FAMILY_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"

namespace trainc::ops {

struct GroupNormFamily {
  // Element (n, t, c, s) of x is at ((n outer + t) c_total + c) inner + s:
  // [N, C, H, W] has outer 1, inner H W; [N, T, C] outer T, inner 1.
  struct Args {
    int64_t n = 0, channels = 0, groups = 0, outer = 0, inner = 0;
    float eps = 0;
    int64_t GroupChannels() const { return channels / groups; }
    int64_t GroupElements() const { return GroupChannels() * outer * inner; }
    // Element `e` (0 <= e < GroupElements) of sample n's group g.
    int64_t At(int64_t n_, int64_t g, int64_t e) const {
      const int64_t per_t = GroupChannels() * inner;
      const int64_t t = e / per_t, rem = e % per_t;
      return ((n_ * outer + t) * channels + g * GroupChannels() + rem / inner) * inner +
             rem % inner;
    }
    int64_t ChannelAt(int64_t e) const { return e % (GroupChannels() * inner) / inner; }
  };

  // "" or why `in` / `out` (full buffer shapes) and `attrs` do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    const std::vector<int64_t>& x = op == KernelOp::kGroupNorm ? in[0] : in[1];
    if (x.size() != 3 && x.size() != 4) return "x is not [N, C, H, W] or [N, T, C]";
    a->n = x[0];
    a->channels = x.size() == 4 ? x[1] : x[2];
    a->outer = x.size() == 4 ? 1 : x[1];
    a->inner = x.size() == 4 ? x[2] * x[3] : 1;
    auto attr = [&](const char* name) {
      auto it = attrs.find(name);
      return it == attrs.end() ? 0.0 : it->second;
    };
    a->groups = static_cast<int64_t>(attr("groups"));
    a->eps = static_cast<float>(attr("eps"));
    if (a->groups < 1 || a->channels % a->groups != 0) {
      return "attr groups does not divide the channels";
    }
    const int64_t elems = a->n * a->channels * a->outer * a->inner;
    const int64_t stats = a->n * a->groups;
    auto size = [](const std::vector<int64_t>& s) {
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      return n;
    };
    const std::vector<int64_t>* per_channel = op == KernelOp::kGroupNorm ? &in[1]
                                              : op == KernelOp::kGroupNormGradInput
                                                  ? &in[2]
                                                  : &out[0];
    if (size(*per_channel) != a->channels) return "weight is not [C]";
    if (op == KernelOp::kGroupNorm) {
      if (size(in[2]) != a->channels || size(out[0]) != elems) return "bias or y size";
      if (size(out[1]) != stats || size(out[2]) != stats) return "mean or rstd is not [N, G]";
    } else {
      const size_t m = op == KernelOp::kGroupNormGradInput ? 3 : 2;
      if (size(in[0]) != elems) return "dy is not shaped like x";
      if (size(in[m]) != stats || size(in[m + 1]) != stats) return "mean or rstd is not [N, G]";
      if (op == KernelOp::kGroupNormGradInput && size(out[0]) != elems) return "dx size";
      if (op == KernelOp::kGroupNormGradParams && size(out[1]) != a->channels) {
        return "dbias is not [C]";
      }
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above),
  // statistics and sums in double.
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    if (op == KernelOp::kGroupNorm) {
      Forward(a, x[0], x[1], x[2], y[0], y[1], y[2]);
    } else if (op == KernelOp::kGroupNormGradInput) {
      GradInput(a, x[0], x[1], x[2], x[3], x[4], accumulate, y[0]);
    } else {
      GradParams(a, x[0], x[1], x[2], x[3], accumulate, y[0], y[1]);
    }
  }

  template <typename T>
  static void Forward(const Args& a, const T* x, const T* w, const T* b, T* y, T* mean,
                      T* rstd) {
    const int64_t m = a.GroupElements();
    for (int64_t n = 0; n < a.n; ++n) {
      for (int64_t g = 0; g < a.groups; ++g) {
        double sum = 0, sq = 0;
        for (int64_t e = 0; e < m; ++e) sum += x[a.At(n, g, e)];
        const double mu = sum / m;
        for (int64_t e = 0; e < m; ++e) {
          const double d = x[a.At(n, g, e)] - mu;
          sq += d * d;
        }
        const double rs = 1 / std::sqrt(sq / m + static_cast<double>(a.eps));
        for (int64_t e = 0; e < m; ++e) {
          const int64_t i = a.At(n, g, e), c = g * a.GroupChannels() + a.ChannelAt(e);
          y[i] = static_cast<T>((x[i] - mu) * rs * w[c] + b[c]);
        }
        mean[n * a.groups + g] = static_cast<T>(mu);
        rstd[n * a.groups + g] = static_cast<T>(rs);
      }
    }
  }

  // dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) over each group.
  template <typename T>
  static void GradInput(const Args& a, const T* dy, const T* x, const T* w, const T* mean,
                        const T* rstd, bool accumulate, T* dx) {
    const int64_t m = a.GroupElements();
    for (int64_t n = 0; n < a.n; ++n) {
      for (int64_t g = 0; g < a.groups; ++g) {
        const double mu = mean[n * a.groups + g], rs = rstd[n * a.groups + g];
        double m1 = 0, m2 = 0;
        for (int64_t e = 0; e < m; ++e) {
          const int64_t i = a.At(n, g, e);
          const double gy = static_cast<double>(dy[i]) * w[g * a.GroupChannels() + a.ChannelAt(e)];
          m1 += gy;
          m2 += gy * (x[i] - mu) * rs;
        }
        m1 /= m;
        m2 /= m;
        for (int64_t e = 0; e < m; ++e) {
          const int64_t i = a.At(n, g, e);
          const double gy = static_cast<double>(dy[i]) * w[g * a.GroupChannels() + a.ChannelAt(e)];
          const double v = rs * (gy - m1 - (x[i] - mu) * rs * m2);
          dx[i] = static_cast<T>(accumulate ? dx[i] + v : v);
        }
      }
    }
  }

  // dweight[c] = sum dy xhat, dbias[c] = sum dy, over samples and positions.
  template <typename T>
  static void GradParams(const Args& a, const T* dy, const T* x, const T* mean, const T* rstd,
                         bool accumulate, T* dw, T* db) {
    for (int64_t c = 0; c < a.channels; ++c) {
      double sw = 0, sb = 0;
      const int64_t g = c / a.GroupChannels();
      for (int64_t n = 0; n < a.n; ++n) {
        const double mu = mean[n * a.groups + g], rs = rstd[n * a.groups + g];
        for (int64_t t = 0; t < a.outer; ++t) {
          for (int64_t s = 0; s < a.inner; ++s) {
            const int64_t i = ((n * a.outer + t) * a.channels + c) * a.inner + s;
            sw += dy[i] * (x[i] - mu) * rs;
            sb += dy[i];
          }
        }
      }
      dw[c] = static_cast<T>(accumulate ? dw[c] + sw : sw);
      db[c] = static_cast<T>(accumulate ? db[c] + sb : sb);
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_GROUP_NORM_FAMILY_H_
