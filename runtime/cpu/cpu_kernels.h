// The CPU backend's kernel table: for every KernelOp
// (runtime/device/kernel_ops.h) the function that runs one resolved
// instruction in f32, over OpenBLAS, oneDNN and the loops of kernels.h.
#ifndef TRAINC_RUNTIME_CPU_CPU_KERNELS_H_
#define TRAINC_RUNTIME_CPU_CPU_KERNELS_H_

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/prepared.h"
#include "runtime/device/device.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

// One instruction to run: its resolved arguments and the step it runs in.
struct KernelCall {
  const Plan& plan;
  const Instruction& instr;
  const KernelArgs& k;
  const StepState& step;
  // The programs prepared for the plan (prepared.h).
  DnnlOps& dnnl;
  Bf16Matmuls& matmuls;
};

using CpuKernel = absl::Status (*)(const KernelCall& call);

// Every kernel op's CPU kernel (nullptr: none; CpuDevice::Prepare then
// refuses a plan that needs it).
const KernelTable<CpuKernel>& CpuKernels();

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_CPU_KERNELS_H_
