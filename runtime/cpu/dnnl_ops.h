// Convolution and pooling on the CPU through oneDNN (Debian's libdnnl).
//
//   DnnlOps ops;
//   RETURN_IF_ERROR(ops.Prepare(plan, kernels));  // primitives, once
//   ... RETURN_IF_ERROR(ops.Run(instr.id, kernels[instr.id])); ...
//
// Tensors stay in PyTorch's layouts in the arena (NCHW activations, OIHW
// weights). oneDNN picks its own layouts for each convolution (blocked
// formats are several times faster than plain ones on AVX2/AVX-512); the
// reorders to and from them, oneDNN's scratchpad and the room to
// accumulate a gradient (`out += v`, which oneDNN's backward primitives
// cannot do) live in the instruction's workspace, reserved in the arena by
// the planner (WorkspaceBytes). Nothing is allocated during a step.
//
// oneDNN runs on OpenMP: SetDnnlThreads sets its thread count for the
// calling thread (the compute stream's).
#ifndef TRAINC_RUNTIME_CPU_DNNL_OPS_H_
#define TRAINC_RUNTIME_CPU_DNNL_OPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cpu {

void SetDnnlThreads(int threads);

// True for the ops DnnlOps runs (convolution and pooling).
bool IsDnnlOp(KernelOp op);

// The workspace `instr` needs on this backend: PlanOptions::workspace for
// plans that will run on the CPU.
absl::StatusOr<int64_t> WorkspaceBytes(const Plan& plan, const Instruction& instr);

class DnnlOps {
 public:
  DnnlOps();
  ~DnnlOps();

  // Creates the primitives of every convolution and pooling instruction of
  // `kernels` (ResolveKernels of `plan`, with arena pointers). Fails when
  // the plan reserves less workspace than oneDNN needs (a plan compiled
  // for another backend) or oneDNN refuses a shape.
  absl::Status Prepare(const Plan& plan, const std::vector<KernelArgs>& kernels);

  // Runs instruction `id` (one of those prepared).
  absl::Status Run(int id);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_DNNL_OPS_H_
