// swiglu: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Llama's gated activation silu(gate) * up and
// its gradient, each one pass over the elements, made by the SwiGLU fusion
// (compiler/graph/fuse_swiglu.h) from silu, mul and their three gradient
// instructions. Its sizes, their resolution from the operands' shapes, and
// its loops: Run<float> is the CPU kernel, Run<double> the float64
// reference. The CUDA kernels are runtime/cuda/swiglu.cu; the op table
// entries in compiler/ops/op_table.cc.
//
//   swiglu       gate, up -> y (+)= silu(gate) up
//   swiglu_grad  dy, gate, up -> dgate (+)= silu_grad(dy up, gate),
//                               dup (+)= dy silu(gate)
//
// The bits of the unfused instructions: pointwise.h's formulas (Silu, Mul,
// MulGrad, SiluGrad) in the unfused order, no FMA contraction on the CPU
// (runtime/cpu/BUILD). In a bf16 plan the pass fuses only when every value
// is bf16, and the unfused plan stored silu's output s and its gradient ds
// as bf16 tensors: both are rounded to bf16 here before they are read
// (Args::Round), as the next instruction would have read them. The
// gradient recomputes silu(gate) instead of reading s: s is never stored.
#ifndef TRAINC_COMPILER_OPS_SWIGLU_FAMILY_H_
#define TRAINC_COMPILER_OPS_SWIGLU_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/bf16.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct SwiGluFamily {
  struct Args {
    int64_t n = 0;  // elements of every operand
    // Bit j: output j is stored as bf16 (precision = bf16), set by the
    // runtime's resolver; the reference leaves it 0. Output 0 (y, dgate)
    // has gate's dtype, which silu's output and its gradient had.
    uint32_t bf16_outputs = 0;
    bool Round() const { return (bf16_outputs & 1u) != 0; }
  };

  // "" or why `in` / `out` (full buffer shapes) do not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>&, Args* a) {
    const size_t inputs = op == KernelOp::kSwiGlu ? 2 : 3;
    const size_t outputs = op == KernelOp::kSwiGlu ? 1 : 2;
    if (in.size() != inputs || out.size() != outputs) return "operand count";
    a->n = unit::Elements(in[0]);
    for (const auto* operands : {&in, &out}) {
      for (const std::vector<int64_t>& shape : *operands) {
        if (unit::Elements(shape) != a->n) return "operand sizes differ";
      }
    }
    return "";
  }

  // Runs kernel `op` on inputs `x` and outputs `y` (operand order above).
  // Inlined, with its loops, into the CPU's SIMD clones
  // (runtime/cpu/kernels.cc): called, it would run at the baseline ISA.
  template <typename T>
  __attribute__((always_inline)) static inline void Run(KernelOp op, const Args& a,
                                                        const T* const* x, T* const* y,
                                                        bool accumulate) {
    if (op == KernelOp::kSwiGlu) {
      if (a.Round()) {
        Forward<T, true>(a.n, x[0], x[1], accumulate, y[0]);
      } else {
        Forward<T, false>(a.n, x[0], x[1], accumulate, y[0]);
      }
    } else if (a.Round()) {
      Grad<T, true>(a.n, x[0], x[1], x[2], accumulate, y[0], y[1]);
    } else {
      Grad<T, false>(a.n, x[0], x[1], x[2], accumulate, y[0], y[1]);
    }
  }

  // v as a bf16 tensor holds it when kRound (compiler/ops/bf16.h); the
  // float64 reference never rounds.
  template <bool kRound>
  static float Stored(float v) {
    return kRound ? RoundedToBf16(v) : v;
  }
  template <bool kRound>
  static double Stored(double v) { return v; }

  // y (+)= s up, s = silu(gate) as silu's instruction stored it: one
  // vector loop per case.
  template <typename T, bool kRound>
  __attribute__((always_inline)) static inline void Forward(int64_t n, const T* __restrict gate,
                                                            const T* __restrict up,
                                                            bool accumulate, T* __restrict y) {
    if (accumulate) {
      for (int64_t i = 0; i < n; ++i) {
        y[i] += pointwise::Mul::F(Stored<kRound>(pointwise::Silu::F(gate[i])), up[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = pointwise::Mul::F(Stored<kRound>(pointwise::Silu::F(gate[i])), up[i]);
      }
    }
  }

  // ds = dy up as mul_grad stored it, dgate (+)= silu_grad(ds, gate);
  // dup (+)= dy s, s = silu(gate) recomputed as silu stored it; silu and
  // silu_grad's sigmoid from one exponential (math::SiluAndSigmoid).
  template <typename T, bool kRound>
  __attribute__((always_inline)) static inline void Grad(int64_t n, const T* __restrict dy,
                                                         const T* __restrict gate,
                                                         const T* __restrict up, bool accumulate,
                                                         T* __restrict dgate,
                                                         T* __restrict dup) {
    using pointwise::MulGrad, pointwise::SiluGrad;
    if (accumulate) {
      for (int64_t i = 0; i < n; ++i) {
        T sigmoid;
        const T s = Stored<kRound>(pointwise::math::SiluAndSigmoid(gate[i], &sigmoid));
        const T ds = Stored<kRound>(MulGrad::F(dy[i], up[i]));
        dgate[i] += SiluGrad::OfSigmoid(ds, gate[i], sigmoid);
        dup[i] += MulGrad::F(dy[i], s);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        T sigmoid;
        const T s = Stored<kRound>(pointwise::math::SiluAndSigmoid(gate[i], &sigmoid));
        const T ds = Stored<kRound>(MulGrad::F(dy[i], up[i]));
        dgate[i] = SiluGrad::OfSigmoid(ds, gate[i], sigmoid);
        dup[i] = MulGrad::F(dy[i], s);
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_SWIGLU_FAMILY_H_
