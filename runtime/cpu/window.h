// The window family's CPU kernel (compiler/ops/window_family.h:
// convolution and pooling, a family prepared per plan:
// compiler/ops/unit_family.h): each instruction's oneDNN program, built
// for the plan by DnnlOps (dnnl_ops.h) with the layouts chosen across its
// instructions.
#ifndef TRAINC_RUNTIME_CPU_WINDOW_H_
#define TRAINC_RUNTIME_CPU_WINDOW_H_

#include "absl/status/status.h"
#include "compiler/ops/window_family.h"
#include "runtime/cpu/prepared.h"

namespace trainc::cpu {

// Runs window instruction p.id: its program, from p.dnnl.
absl::Status OwnCpuKernel(KernelOp op, const WindowGeometry& g, const Prepared& p);

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_WINDOW_H_
