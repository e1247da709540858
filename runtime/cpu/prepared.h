// What the kernel of a unit family prepared per plan
// (compiler/ops/unit_family.h: linear, window) runs one instruction with
// on the CPU: the instruction as resolved and the programs CpuDevice built
// for the whole plan when it prepared it. The family's kernel is
//
//   absl::Status OwnCpuKernel(KernelOp op, const <Family>::Args& args,
//                             const Prepared& p);
//
// declared beside the programs it runs (linear.h, dnnl_ops.h).
#ifndef TRAINC_RUNTIME_CPU_PREPARED_H_
#define TRAINC_RUNTIME_CPU_PREPARED_H_

#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

class Bf16Matmuls;  // bf16_matmul.h
class DnnlOps;      // dnnl_ops.h

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
