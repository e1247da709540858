// cast: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its size, its resolution from the operands'
// shapes and dtypes, and its loops: Run<float> is the CPU kernel (on the
// tensors as they are: a bf16 operand's slot holds its uint16 values),
// Run<double> the float64 reference. The CUDA kernel is
// runtime/cuda/cast.cu; the op table entry in compiler/ops/op_table.cc.
//
//   cast  x f32 -> y bf16, rounded to nearest even (CastToBf16), or
//         x bf16 -> y f32, exactly (CastToF32): the kernel is picked by
//         the operands' dtypes (KernelOf).
#ifndef TRAINC_COMPILER_OPS_CAST_FAMILY_H_
#define TRAINC_COMPILER_OPS_CAST_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "compiler/ops/bf16.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct CastFamily {
  struct Args {
    int64_t elements = 0;
  };

  static bool ToBf16(const unit::PlanFacts& plan) {
    return (plan.f32_inputs & 1u) && (plan.bf16_outputs & 1u);
  }
  static bool ToF32(const unit::PlanFacts& plan) {
    return (plan.bf16_inputs & 1u) && (plan.f32_outputs & 1u);
  }

  // f32 -> bf16 or bf16 -> f32; `op` (CastToBf16) where it is neither,
  // which Resolve refuses.
  static KernelOp KernelOf(KernelOp op, const unit::PlanFacts& plan) {
    return ToF32(plan) ? KernelOp::kCastToF32 : op;
  }

  // "" or why `in` / `out` (full buffer shapes and, in `plan`, dtypes) do
  // not fit `op`.
  static std::string Resolve(KernelOp op, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>&, const unit::PlanFacts& plan,
                             Args* a) {
    if (!(op == KernelOp::kCastToBf16 ? ToBf16(plan) : ToF32(plan))) {
      return "not a cast from f32 to bf16 or back";
    }
    a->elements = unit::Elements(in[0]);
    if (unit::Elements(out[0]) != a->elements) return "sizes differ";
    return "";
  }

  template <typename T>
  static void Run(KernelOp op, const Args& a, const T* const* x, T* const* y, bool) {
    if constexpr (std::is_same_v<T, float>) {
      if (op == KernelOp::kCastToBf16) {
        uint16_t* to = reinterpret_cast<uint16_t*>(y[0]);
        for (int64_t i = 0; i < a.elements; ++i) to[i] = FloatToBf16(x[0][i]);
      } else {
        const uint16_t* from = reinterpret_cast<const uint16_t*>(x[0]);
        for (int64_t i = 0; i < a.elements; ++i) y[0][i] = Bf16ToFloat(from[i]);
      }
    } else {
      // The reference holds every tensor's values as T: rounding to bf16
      // is a round trip through it, widening changes nothing.
      for (int64_t i = 0; i < a.elements; ++i) {
        y[0][i] = op == KernelOp::kCastToBf16
                      ? static_cast<T>(RoundedToBf16(static_cast<float>(x[0][i])))
                      : x[0][i];
      }
    }
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_CAST_FAMILY_H_
