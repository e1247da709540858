// reshape: a unit family (compiler/ops/kernel_families.h,
// compiler/ops/unit_family.h). Its size, its resolution from the operands'
// shapes, and its loop: Run<float> is the CPU kernel, Run<double> the
// float64 reference. The CUDA kernel is runtime/cuda/reshape.cu; the op
// table entry in compiler/ops/op_table.cc.
//
//   reshape  x -> y: the same elements under another shape, copied (or
//            nothing where y is x's bytes). On the CPU a copy that changes
//            oneDNN's layout is a reorder instead (runtime/cpu/dnnl_ops.cc).
#ifndef TRAINC_COMPILER_OPS_RESHAPE_FAMILY_H_
#define TRAINC_COMPILER_OPS_RESHAPE_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/unit_family.h"

namespace trainc::ops {

struct ReshapeFamily {
  struct Args {
    int64_t elements = 0;
  };

  // "" or why `in` / `out` (full buffer shapes) do not fit.
  static std::string Resolve(KernelOp, const std::vector<std::vector<int64_t>>& in,
                             const std::vector<std::vector<int64_t>>& out,
                             const std::map<std::string, double>&, Args* a) {
    a->elements = unit::Elements(in[0]);
    if (unit::Elements(out[0]) != a->elements) return "sizes differ";
    return "";
  }

  template <typename T>
  static void Run(KernelOp, const Args& a, const T* const* x, T* const* y, bool) {
    if (y[0] == x[0]) return;
    const T* __restrict from = x[0];
    T* __restrict to = y[0];
    for (int64_t i = 0; i < a.elements; ++i) to[i] = from[i];
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_RESHAPE_FAMILY_H_
