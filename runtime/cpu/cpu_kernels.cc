#include "runtime/cpu/cpu_kernels.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ops/unit_family.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/linear.h"
#include "runtime/cpu/window.h"

namespace trainc::cpu {
namespace {

absl::Status Ok() { return absl::OkStatus(); }

absl::Status Pointwise(const KernelCall& c) {
  const KernelArgs& k = c.k;
  PointwiseKernel(k.op)(k.x[0], k.x[1], k.rows, k.accumulate, k.y[0]);
  return Ok();
}

// A unit family's CPU kernel: its loops in f32
// (compiler/ops/kernel_families.h, compiler/ops/unit_family.h), compiled
// with the kernels (kernels.h); a refusal (a label outside the classes) is
// the instruction's error.
template <typename Args>
absl::Status UnitKernel(const KernelCall& c, UnitRunFn<Args> run, const Args& args) {
  const ops::unit::Step step{c.step.training, c.step.step, c.step.rank, c.step.lr};
  const std::string why =
      run(c.k.op, ops::unit::ForStep(args, step), c.k.x, c.k.y, c.k.accumulate);
  if (why.empty()) return Ok();
  return absl::InvalidArgumentError(absl::StrCat("cpu: ", c.instr.label, ": ", why));
}
#define TRAINC_CPU_UNIT(Fam, snake) \
  absl::Status Fam##Unit(const KernelCall& c) { return UnitKernel(c, &Run##Fam, c.k.snake); }
TRAINC_STATELESS_FAMILIES(TRAINC_CPU_UNIT)
#undef TRAINC_CPU_UNIT

// A family prepared per plan (compiler/ops/unit_family.h): its kernel
// over the programs CpuDevice::Prepare built (PlanPrograms; OwnCpuKernel,
// declared beside them: linear.h, window.h).
#define TRAINC_CPU_PREPARED(Fam, snake)                                                   \
  absl::Status Fam##Unit(const KernelCall& c) {                                           \
    return OwnCpuKernel(c.k.op, c.k.snake, Prepared{c.k, c.instr.id, c.dnnl, c.matmuls}); \
  }
TRAINC_PREPARED_FAMILIES(TRAINC_CPU_PREPARED)
#undef TRAINC_CPU_PREPARED

// One kernel per family (compiler/ops/kernel_families.h); a family left
// out has no CPU kernel.
KernelTable<CpuKernel> MakeTable() {
  using F = KernelFamily;
#define TRAINC_CPU_UNIT_ENTRY(Family, snake) {F::k##Family, &Family##Unit},
  return KernelTable<CpuKernel>::OfFamilies({
      {F::kPointwise, &Pointwise},
      TRAINC_UNIT_FAMILIES(TRAINC_CPU_UNIT_ENTRY)
  });
#undef TRAINC_CPU_UNIT_ENTRY
}

}  // namespace

const KernelTable<CpuKernel>& CpuKernels() {
  static const KernelTable<CpuKernel> table = MakeTable();
  return table;
}

}  // namespace trainc::cpu
