// CudaDeviceImpl's streams and events: work submitted in program order,
// the plan's events, and Synchronize (which surfaces device-side errors).
#include "runtime/cuda/cuda_device_impl.h"

#include <cstdint>
#include <functional>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels.h"

namespace trainc::cuda_internal {

absl::Status CudaDeviceImpl::OrderedSum(Stream stream, const float* src,
                                        int64_t n, int64_t count, float* dst) {
  const cudaError_t err =
      cuda::LaunchOrderedSum(src, n, count, dst, StreamOf(stream));
  if (err != cudaSuccess) {
    return Fail(cuda::CudaErrorToStatus(err, "OrderedSum", __FILE__, __LINE__));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Submit(Stream /*stream*/,
                                    std::function<absl::Status()> work) {
  if (!sticky_.ok()) return sticky_;
  // The work enqueues on NativeStream(stream) itself (e.g. an NCCL call):
  // running it now, in program order, is what orders it on that stream.
  absl::Status status = work();
  if (!status.ok()) return Fail(status);
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RecordEvent(Stream stream, int event) {
  if (event < 0 || event >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": event ", event, " out of range (ResetEvents(",
        events_.size(), "))"));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[event], StreamOf(stream)));
  recorded_[event] = 1;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::WaitEvent(Stream stream, int event) {
  if (event < 0 || event >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": event ", event, " out of range (ResetEvents(",
        events_.size(), "))"));
  }
  // CUDA treats a wait on a never-recorded event as satisfied, and on a
  // re-recorded one as a wait for its latest record. The plan's "a wait is
  // satisfied only by this step's record" therefore needs the record to be
  // issued first; say so instead of silently racing.
  if (!recorded_[event]) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": WaitEvent(", event,
        ") before its RecordEvent in this step (the host must issue a record "
        "before any wait on it)"));
  }
  CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(StreamOf(stream), events_[event], 0));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::ResetEvents(int num_events) {
  if (num_events < 0) return absl::InvalidArgumentError("negative events");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  while (static_cast<int>(events_.size()) < num_events) {
    cudaEvent_t e;
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  recorded_.assign(events_.size(), 0);
  return sticky_;
}

absl::Status CudaDeviceImpl::Synchronize() {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": Synchronize in capture");
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(comm_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_));  // inputs fed ahead
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  int error_bits = 0;
  CUDA_RETURN_IF_ERROR(cudaMemcpy(&error_bits, device_error_, sizeof(int),
                                  cudaMemcpyDeviceToHost));
  if (error_bits != 0) {
    // Ordered before the next step's kernels, which run on compute_ too.
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(device_error_, 0, sizeof(int), compute_));
    if (error_bits & cuda::kErrorLabelOutOfRange) {
      (void)Fail(absl::InvalidArgumentError(
          name_ + ": cross_entropy: a label is outside [0, classes)"));
    }
    if (error_bits & cuda::kErrorTokenOutOfRange) {
      (void)Fail(absl::InvalidArgumentError(
          name_ + ": embedding: a token id is outside [0, vocab)"));
    }
  }
  // After a failed step its times are meaningless (and some work may never
  // have been enqueued): the error is what the caller needs.
  RETURN_IF_ERROR(ResolveTimings(/*report=*/sticky_.ok()));
  return sticky_;
}

}  // namespace trainc::cuda_internal
