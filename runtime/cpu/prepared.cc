#include "runtime/cpu/prepared.h"

#include "compiler/util/status_macros.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/dnnl_ops.h"

namespace trainc::cpu {

void PlanPrograms::ChooseNative(std::vector<KernelArgs>& kernels) const {
  matmuls.Choose(kernels);  // the window family reads no bf16 operand
}

absl::Status PlanPrograms::Build(const Plan& plan, const std::vector<KernelArgs>& kernels,
                                 int64_t* host_bytes) const {
  RETURN_IF_ERROR(matmuls.Bind(kernels));
  *host_bytes += matmuls.scratch_bytes();
  return dnnl.Prepare(plan, kernels);
}

}  // namespace trainc::cpu
