// Convolution and pooling on the GPU through cuDNN 9's legacy API (internal
// to the CUDA backend; CudaDevice owns one CudnnOps).
//
//   CudnnOps ops;
//   RETURN_IF_ERROR(ops.Init(compute_stream));             // the handle
//   ops.Clear();                                           // a new plan
//   RETURN_IF_ERROR(ops.Add(instr, k, tf32, name));        // descriptors
//   ... RETURN_IF_ERROR(ops.Run(instr.id)); ...            // enqueues only
//
// Tensors stay in PyTorch's layouts in the arena (NCHW activations, OIHW
// weights), which cuDNN takes as they are. Each convolution runs one fixed
// algorithm, chosen by nothing but the op (no autotuning, so results never
// depend on timing) and deterministic per cuDNN's documentation: forward
// IMPLICIT_PRECOMP_GEMM, backward data ALGO_1, backward filter ALGO_1. Their
// scratch is the instruction's workspace, reserved in the arena by the
// planner (CudnnWorkspaceBytes is the backend's PlanOptions::workspace), so
// nothing is allocated during a step and a step can be captured in a CUDA
// graph. Math: plain FP32 FMA, or TF32 tensor cores when plan.tf32 (as the
// cuBLAS path). Gradients accumulate through cuDNN's beta = 1.
//
// Pooling follows PyTorch: max pooling's padding never wins the max (cuDNN
// pads with -inf) and a NaN in a window propagates; average pooling counts
// the padding as zeros (count_include_pad). The gradient of max pooling
// goes to the window's maximum found again from x and y (cuDNN's
// deterministic mode), so the plan's argmax buffer is not used here.
#ifndef TRAINC_RUNTIME_CUDA_CUDNN_OPS_H_
#define TRAINC_RUNTIME_CUDA_CUDNN_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/kernel_args.h"

namespace trainc::cuda {

// True for the ops CudnnOps runs (convolution and pooling).
bool IsCudnnOp(KernelOp op);

// The workspace `instr` needs on the current GPU (0 for ops other than
// convolution and pooling). Unavailable without a GPU.
absl::StatusOr<int64_t> CudnnWorkspaceBytes(const Plan& plan,
                                            const Instruction& instr);

class CudnnOps {
 public:
  CudnnOps();
  ~CudnnOps();  // call with the handle's GPU current
  CudnnOps(const CudnnOps&) = delete;
  CudnnOps& operator=(const CudnnOps&) = delete;

  // Creates the cuDNN handle on the current GPU, bound to `stream`: every
  // call of Run enqueues there.
  absl::Status Init(cudaStream_t stream);

  // Forgets every instruction described (no queued work may use them).
  void Clear();

  // Describes convolution or pooling instruction `instr`, resolved as `k`
  // (with arena pointers), TF32 math when `tf32`. Fails, naming the
  // instruction, when cuDNN refuses a shape or the plan reserves less
  // workspace than cuDNN needs (a plan compiled for another device).
  absl::Status Add(const Instruction& instr, const KernelArgs& k, bool tf32,
                   const std::string& device_name);

  // Enqueues instruction `id` (one of those prepared) on the stream.
  absl::Status Run(int id);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainc::cuda

#endif  // TRAINC_RUNTIME_CUDA_CUDNN_OPS_H_
