// The linear family's CPU kernel (compiler/ops/linear_family.h, a family
// prepared per plan: compiler/ops/unit_family.h): each instruction's
// matrix product (bf16_matmul.h's LinearGemmOf) on the plan's oneDNN bf16
// matmul where Bf16Matmuls chose one, else on the f32 GEMM (gemm.h), then
// kernels.h's loops for the bias, the activation and the bias gradient.
#ifndef TRAINC_RUNTIME_CPU_LINEAR_H_
#define TRAINC_RUNTIME_CPU_LINEAR_H_

#include "absl/status/status.h"
#include "compiler/ops/linear_family.h"
#include "runtime/cpu/prepared.h"

namespace trainc::cpu {

// Runs linear instruction `op` (operands in p.k, op table order).
absl::Status OwnCpuKernel(KernelOp op, const ops::LinearFamily::Args& l, const Prepared& p);

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_LINEAR_H_
