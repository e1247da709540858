// KernelOp: the one list of kernels every backend provides, one per
// compute instruction op of the op table (compiler/ops/op_table.h), or two
// where the instruction's dtypes or the plan pick between them (cast,
// optimizer), each in a family. The list and the families are declared
// once, in compiler/ops/kernel_families.h (pointwise ops in
// compiler/ops/pointwise.h).
//
// Each backend binds one kernel per family (FamilyTable) and indexes it by
// KernelOp (KernelTable, derived); a backend that lacks an op's kernel says
// so when it prepares a plan that uses it, and
// runtime/conformance/op_conformance_test.cc checks that every op has one
// everywhere.
#ifndef TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_
#define TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "compiler/ops/kernel_families.h"

namespace trainc {

// A backend's kernels, indexed by KernelOp; nullptr where it has none.
template <typename Fn>
class KernelTable {
 public:
  Fn& operator[](KernelOp op) { return fns_[static_cast<int>(op)]; }
  Fn operator[](KernelOp op) const { return fns_[static_cast<int>(op)]; }

  // Every op of each bound family gets that family's kernel: the one way a
  // backend fills its table. A family left out has no kernel on it.
  static KernelTable OfFamilies(std::initializer_list<std::pair<KernelFamily, Fn>> bound) {
    std::array<Fn, kNumKernelFamilies> of_family{};
    for (const auto& [family, fn] : bound) of_family[static_cast<int>(family)] = fn;
    KernelTable t;
    for (int i = 1; i < kNumKernelOps; ++i) {
      const KernelOp op = static_cast<KernelOp>(i);
      t[op] = of_family[static_cast<int>(FamilyOf(op))];
    }
    return t;
  }

 private:
  std::array<Fn, kNumKernelOps> fns_{};
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_KERNEL_OPS_H_
