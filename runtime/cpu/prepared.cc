#include "runtime/cpu/prepared.h"

#include "compiler/util/status_macros.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/dnnl_ops.h"

namespace trainc::cpu {

void ChooseNative(Bf16Matmuls& matmuls, std::vector<KernelArgs>& kernels) {
  matmuls.Choose(kernels);   // linear's products on bf16 operands
  PrepareAttention(kernels);  // attention's, each decided once per plan
  // The window family reads no bf16 operand.
}

absl::Status PlanPrograms::Build(const Plan& plan, const std::vector<KernelArgs>& kernels,
                                 int64_t* host_bytes) {
  RETURN_IF_ERROR(matmuls.Bind(kernels));
  *host_bytes += matmuls.scratch_bytes();
  return dnnl.Prepare(plan, kernels);
}

}  // namespace trainc::cpu
