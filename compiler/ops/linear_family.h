// linear: a unit family prepared per plan (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h) in its typed sizes (Args), their resolution
// from the operands' shapes (Resolve) and its loops, Run<double> the
// float64 reference. Its CPU kernel is runtime/cpu/linear.cc (OpenBLAS /
// oneDNN sgemm, or the plan's oneDNN bf16 matmuls: bf16_matmul.h), its
// CUDA one the plan's cuBLASLt matmuls (runtime/cuda/cublas_linear.h)
// with linear.cu's bias kernels. The op table entries are in
// compiler/ops/op_table.cc.
//
//   linear                  x[M, K], w[N, K], b[N] (optional) -> y[M, N]
//   linear_gelu             x, w, b -> pre[M, N], y = gelu_tanh(pre)
//   linear_<act>            x, w, b -> pre (optional), y = act(pre)
//                           (relu, tanh, gelu_erf)
//   linear_grad_input       dy[M, N], w -> dx[M, K] (+)=
//   linear_grad_input_gelu  dy, w, pre[M, K] -> dpre (+)=
//                           gelu_tanh_grad(dy w, pre), workspace
//   linear_grad_params      dy, x -> dw[N, K] (+)=, db[N] (optional) (+)=
// M (rows) is whatever the weight leaves of the batch-side operand.
#ifndef TRAINC_COMPILER_OPS_LINEAR_FAMILY_H_
#define TRAINC_COMPILER_OPS_LINEAR_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"

namespace trainc {

// The activation a fused forward linear applies (linear_relu, linear_tanh,
// linear_gelu_erf; compiler/graph/fuse_activation.h).
enum class Activation : uint8_t { kNone, kRelu, kGelu, kTanh };
inline Activation ActivationOf(KernelOp op) {
  switch (op) {
    case KernelOp::kLinearRelu: return Activation::kRelu;
    case KernelOp::kLinearTanh: return Activation::kTanh;
    case KernelOp::kLinearGeluErf: return Activation::kGelu;
    default: return Activation::kNone;
  }
}

}  // namespace trainc

namespace trainc::ops {

struct LinearFamily {
  struct Args {
    int64_t rows = 0;  // M: the batch rows
    int64_t in = 0;    // K: in features
    int64_t out = 0;   // N: out features
    // linear_<act>: the activation, applied to pre into y (pre_kept) or in
    // place over output 0 (pre not in the plan).
    Activation act = Activation::kNone;
    bool pre_kept = false;
    // The forward reads a bias, linear_grad_params writes db.
    bool bias = false;
  };
  // The forward products: linear, linear_gelu and linear_<act>.
  static bool IsForward(KernelOp op) {
    return op == KernelOp::kLinear || op == KernelOp::kLinearGelu ||
           ActivationOf(op) != Activation::kNone;
  }

  // "" or why `in` / `out` (full buffer shapes) do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>& attrs, Args* a) {
    using unit::Elements;
    // The weight fixes [out, in]; the batch is whatever is left.
    const std::vector<int64_t>& w = op == KernelOp::kLinearGradParams ? out[0] : in[1];
    if (w.size() != 2) return "weight is not [out, in]";
    a->out = w[0];
    a->in = w[1];
    a->act = ActivationOf(op);
    const bool forward = IsForward(op);
    const int64_t per_row = forward ? a->in : a->out;
    if (per_row == 0 || Elements(in[0]) % per_row != 0) {
      return "batch input does not match the weight";
    }
    a->rows = Elements(in[0]) / per_row;
    if (forward) {
      for (const std::vector<int64_t>& y : out) {
        if (Elements(y) != a->rows * a->out) return "y size";
      }
      a->pre_kept = out.size() > 1;
      a->bias = in.size() > 2;
      if (a->bias && Elements(in[2]) != a->out) return "bias size";
    } else if (op == KernelOp::kLinearGradInput) {
      if (Elements(out[0]) != a->rows * a->in) return "dx size";
    } else if (op == KernelOp::kLinearGradInputGelu) {
      if (Elements(in[2]) != a->rows * a->in) return "pre size";
      if (Elements(out[0]) != a->rows * a->in) return "dpre size";
    } else {
      if (Elements(in[1]) != a->rows * a->in) return "x size";
      a->bias = out.size() > 1;
      if (a->bias && Elements(out[1]) != a->out) return "db size";
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool accumulate) {
    if (IsForward(op)) {
      Product(a, x[0], x[1], a.bias ? x[2] : nullptr, y[0]);
      if (op == KernelOp::kLinearGelu) Apply<pointwise::GeluTanh>(a, y[0], y[1]);
      T* act = a.pre_kept ? y[1] : y[0];
      switch (a.act) {
        case Activation::kRelu: Apply<pointwise::Relu>(a, y[0], act); break;
        case Activation::kTanh: Apply<pointwise::Tanh>(a, y[0], act); break;
        case Activation::kGelu: Apply<pointwise::Gelu>(a, y[0], act); break;
        case Activation::kNone: break;
      }
    } else if (op == KernelOp::kLinearGradInput) {
      GradInput(a, x[0], x[1], accumulate, y[0]);
    } else if (op == KernelOp::kLinearGradInputGelu) {
      std::vector<T> dh(a.rows * a.in);
      GradInput(a, x[0], x[1], false, dh.data());
      for (int64_t i = 0; i < a.rows * a.in; ++i) {
        const T v = pointwise::GeluTanhGrad::F(dh[i], x[2][i]);
        y[0][i] = accumulate ? y[0][i] + v : v;
      }
    } else {
      GradParams(a, x[0], x[1], accumulate, y[0], a.bias ? y[1] : nullptr);
    }
  }

  // y[M, N] = x w^T (+ b), each sum from the bias.
  template <typename T>
  static void Product(const Args& a, const T* x, const T* w, const T* b, T* y) {
    for (int64_t r = 0; r < a.rows; ++r) {
      for (int64_t o = 0; o < a.out; ++o) {
        T s = b != nullptr ? b[o] : T(0);
        for (int64_t i = 0; i < a.in; ++i) s += x[r * a.in + i] * w[o * a.in + i];
        y[r * a.out + o] = s;
      }
    }
  }

  // y = F(pre), element by element.
  template <typename F, typename T>
  static void Apply(const Args& a, const T* pre, T* y) {
    for (int64_t i = 0; i < a.rows * a.out; ++i) y[i] = F::F(pre[i]);
  }

  // dx[M, K] (+)= dy w.
  template <typename T>
  static void GradInput(const Args& a, const T* dy, const T* w, bool accumulate, T* dx) {
    for (int64_t r = 0; r < a.rows; ++r) {
      for (int64_t i = 0; i < a.in; ++i) {
        T s = 0;
        for (int64_t o = 0; o < a.out; ++o) s += dy[r * a.out + o] * w[o * a.in + i];
        dx[r * a.in + i] = accumulate ? dx[r * a.in + i] + s : s;
      }
    }
  }

  // dw[N, K] (+)= dy^T x, db[N] (+)= column sums of dy (db may be null).
  template <typename T>
  static void GradParams(const Args& a, const T* dy, const T* x, bool accumulate, T* dw,
                         T* db) {
    auto set = [accumulate](T& v, T s) { v = accumulate ? v + s : s; };
    for (int64_t o = 0; o < a.out; ++o) {
      if (db != nullptr) {
        T sb = 0;
        for (int64_t r = 0; r < a.rows; ++r) sb += dy[r * a.out + o];
        set(db[o], sb);
      }
      for (int64_t i = 0; i < a.in; ++i) {
        T s = 0;
        for (int64_t r = 0; r < a.rows; ++r) s += dy[r * a.out + o] * x[r * a.in + i];
        set(dw[o * a.in + i], s);
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_LINEAR_FAMILY_H_
