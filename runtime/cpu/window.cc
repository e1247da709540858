#include "runtime/cpu/window.h"

#include "runtime/cpu/dnnl_ops.h"

namespace trainc::cpu {

absl::Status OwnCpuKernel(KernelOp, const WindowGeometry&, const Prepared& p) {
  return p.dnnl.Run(p.id);
}

}  // namespace trainc::cpu
