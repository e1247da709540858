// CudaDeviceImpl's CUDA graphs: a step captured once (BeginCapture,
// EndCapture), then replayed with fresh inputs (BeginReplayInputs, Replay).
#include "runtime/cuda/cuda_device_impl.h"

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"

namespace trainc::cuda_internal {

absl::Status CudaDeviceImpl::BeginCapture() {
  if (prepared_plan_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": BeginCapture before Prepare");
  }
  if (capturing_ || graph_exec_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": a capture is already held");
  }
  RETURN_IF_ERROR(Synchronize());
  RETURN_IF_ERROR(FreeInputSlots());  // a dropped capture's
  // Relaxed: Upload allocates its input slots while capturing.
  CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(compute_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  // The comm stream joins the capture at once. A step may open with
  // collectives (zero_gather = next_forward's all-gathers) before any
  // compute event it would otherwise join through: they would run now,
  // outside the graph, and the compute stream's wait on them would cross
  // the capture's boundary.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_event_, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_, fork_event_, 0));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::EndCapture() {
  if (!capturing_) {
    return absl::FailedPreconditionError(name_ + ": EndCapture without Begin");
  }
  // The comm stream joined the capture at BeginCapture; it must join back
  // into the origin stream before the capture can end. (An error
  // before the end leaves the capture open for DropCapture to abandon.)
  cudaStreamCaptureStatus comm_status = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(comm_, &comm_status));
  if (comm_status == cudaStreamCaptureStatusActive) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(join_event_, comm_));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, join_event_, 0));
  }
  const cudaError_t ended = cudaStreamEndCapture(compute_, &graph_);
  capturing_ = false;
  CUDA_RETURN_IF_ERROR(ended);
  CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&graph_exec_, graph_, 0));
  CUDA_RETURN_IF_ERROR(cudaGraphUpload(graph_exec_, compute_));
  // The captured step has not run: its inputs go into the slots now, and
  // its first Replay consumes them.
  for (InputSlot& slot : input_slots_) {
    RETURN_IF_ERROR(StagedCopy(slot.device[0], slot.pending.data(), slot.bytes));
    slot.pending.clear();
    slot.pending.shrink_to_fit();
  }
  next_input_slot_ = input_slots_.size();
  return FindInputNodes();
}

absl::Status CudaDeviceImpl::Replay(const StepState& state) {
  const size_t fed = next_input_slot_;
  // Whatever happens, the input window closes: later uploads (evaluation)
  // go to the arena.
  if (feeding_) RETURN_IF_ERROR(EndReplayInputs());
  next_input_slot_ = 0;
  if (graph_exec_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": no captured step");
  }
  if (fed != input_slots_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the captured step needs ", input_slots_.size(),
        " uploads (after BeginReplayInputs) before each replay, got ", fed));
  }
  if (!sticky_.ok()) return sticky_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  // The scalars are read by the graph's optimizer kernels: stream order puts
  // this copy before them.
  RETURN_IF_ERROR(UploadStepScalars(*prepared_plan_, state));
  return LaunchWithInputs();
}

absl::Status CudaDeviceImpl::DropCapture() {
  if (capturing_) {
    // Abandon, best effort: join the comm stream back (a capture cannot end
    // with it still forked), end, and throw the partial graph away.
    cudaStreamCaptureStatus comm_status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(comm_, &comm_status) == cudaSuccess &&
        comm_status == cudaStreamCaptureStatusActive) {
      cudaEventRecord(join_event_, comm_);
      cudaStreamWaitEvent(compute_, join_event_, 0);
    }
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(compute_, &partial);
    if (partial) cudaGraphDestroy(partial);
    capturing_ = false;
    // Nothing of the capture ran (BeginCapture started from a clean,
    // synchronised device), so its errors say only that the step could not
    // be captured: the caller may still run it eagerly.
    sticky_ = absl::OkStatus();
  }
  cudaGetLastError();  // a failed capture or instantiation leaves its error
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  if (graph_exec_) CUDA_RETURN_IF_ERROR(cudaGraphExecDestroy(graph_exec_));
  if (graph_) CUDA_RETURN_IF_ERROR(cudaGraphDestroy(graph_));
  graph_exec_ = nullptr;
  graph_ = nullptr;
  return FreeInputSlots();
}

}  // namespace trainc::cuda_internal
