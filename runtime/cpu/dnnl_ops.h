// Convolution and pooling on the CPU through oneDNN (Debian's libdnnl).
//
//   DnnlOps ops;
//   RETURN_IF_ERROR(ops.Prepare(plan, kernels));  // primitives, once
//   ... RETURN_IF_ERROR(ops.Run(instr.id)); ...
//
// Layouts. Weights stay in PyTorch's OIHW. Images (4-D activations and
// their gradients) whose channels fill whole vector blocks are kept in
// oneDNN's channel-blocked layout (nChw8c, nChw16c with AVX-512), the one
// its convolution and pooling kernels run fastest on, when every
// instruction touching them takes it: convolution and pooling, elementwise
// ops (relu, add...: all operands alike), and flatten and its gradient,
// which become reorders to and from NCHW. Any other reader (linear,
// dropout, a loss) keeps the image NCHW (BlockedBuffers). Reorders a
// primitive still needs, oneDNN's scratchpad and the room to accumulate a
// gradient (`out += v`, which oneDNN's backward primitives cannot do) live
// in the instruction's workspace, reserved in the arena by the planner
// (WorkspaceBytes). Nothing is allocated during a step.
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

// True for convolution and pooling (DnnlOps also runs the reshapes and
// copies that change a buffer's layout: Runs()).
bool IsDnnlOp(KernelOp op);

// By buffer id: whether the CPU backend keeps the buffer channel-blocked
// (see above) rather than NCHW. A function of the plan and the CPU.
// Element (n, c, h, w) of a blocked [N, C, H, W] buffer is at
// ((n C/B + c/B) H W + h W + w) B + c%B, B = ChannelBlock() (8, or 16 with
// AVX-512).
std::vector<bool> BlockedBuffers(const Plan& plan);
int64_t ChannelBlock();

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
  // for another backend) or oneDNN refuses a shape. conv2d_relu's relu is
  // the convolution's post-op (the plan's fusion, compiler/graph).
  absl::Status Prepare(const Plan& plan, const std::vector<KernelArgs>& kernels);

  // Whether instruction `id` is a copy prepared here to change a buffer's
  // layout (a flatten between a blocked and an NCHW buffer): run in place
  // of its op's kernel.
  bool Converts(int id) const;

  // Runs instruction `id` (one of those prepared).
  absl::Status Run(int id);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainc::cpu

#endif  // TRAINC_RUNTIME_CPU_DNNL_OPS_H_
