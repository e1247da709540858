// What the CPU's kernels decide once per plan: which bf16 operands they
// read and write as they are (the linear family's products and
// attention's), and the programs of the families prepared per plan
// (compiler/ops/unit_family.h: linear, window), with what the kernel of
// such a family runs one instruction with.
//
// CpuDevice::Prepare asks in two passes around the bf16 staging
// (runtime/device/kernel_args.h):
//
//   cpu::ChooseNative(matmuls, kernels);         // before AssignBf16Staging
//   ... AssignBf16Staging(kernels, staging) ...
//   cpu::PlanPrograms programs{dnnl, matmuls};   // the device's libraries
//   RETURN_IF_ERROR(programs.Build(plan, kernels, &host_bytes));
//
// The family's kernel is
//
//   absl::Status OwnCpuKernel(KernelOp op, const <Family>::Args& args,
//                             const Prepared& p);
//
// declared beside the programs it runs (linear.h, window.h).
#ifndef TRAINC_RUNTIME_CPU_PREPARED_H_
#define TRAINC_RUNTIME_CPU_PREPARED_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

class Bf16Matmuls;  // bf16_matmul.h
class DnnlOps;      // dnnl_ops.h

// Before the staging, while a bf16 operand's slot holds its tensor: marks
// native the operands that kernels read as bf16 themselves, which then get
// no staging: both operands of each product oneDNN's bf16 matmul runs
// (linear), and attention's q|k|v, dy, y and outputs where its block
// products run on bf16 (attention.h's PrepareAttention). Prepare and the
// planner's staging estimate (CpuBf16StagingBytes) both mark them so.
void ChooseNative(Bf16Matmuls& matmuls, std::vector<KernelArgs>& kernels);

// The families' programs for one plan, one object per library (the
// device's), rebuilt by each Prepare.
struct PlanPrograms {
  DnnlOps& dnnl;         // window: oneDNN convolution and pooling
  Bf16Matmuls& matmuls;  // linear: the products on bf16 operands (oneDNN)

  // After the staging: every family's programs for `plan` (`kernels`, its
  // instructions resolved and staged): the bf16 matmuls bound to their
  // operands; oneDNN's convolutions, pooling and layout reorders, the
  // layouts chosen across the plan's instructions (dnnl_ops.h). Adds the
  // host memory they allocate to *host_bytes. Errors are the libraries'
  // (oneDNN's convolutions name the instruction refused).
  absl::Status Build(const Plan& plan, const std::vector<KernelArgs>& kernels,
                     int64_t* host_bytes);
};

struct Prepared {
  // The instruction as resolved, with its bf16 operands staged: operands,
  // accumulate, workspace.
  const KernelArgs& k;
  int id;  // its instruction id, the programs' key
  DnnlOps& dnnl;         // convolution and pooling (oneDNN, blocked layouts)
  Bf16Matmuls& matmuls;  // the linear products on bf16 operands (oneDNN)
};

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_PREPARED_H_
