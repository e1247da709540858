// CudaDeviceImpl's timing: SubmitTimed's cudaEvent pairs, resolved to the
// host's steady clock at Synchronize.
#include "runtime/cuda/cuda_device_impl.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"

namespace trainc::cuda_internal {

namespace {

// OK, or `err` as a Status (CUDA_RETURN_IF_ERROR where returning at once
// is not what the caller wants).
absl::Status CudaOk(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return cuda::CudaErrorToStatus(err, what, __FILE__, __LINE__);
}

}  // namespace

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<cudaEvent_t> CudaDeviceImpl::TimingEvent() {
  if (!timing_pool_.empty()) {
    cudaEvent_t e = timing_pool_.back();
    timing_pool_.pop_back();
    return e;
  }
  cudaEvent_t e;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));  // with timing
  return e;
}

absl::Status CudaDeviceImpl::SubmitTimed(Stream stream,
                                         std::function<absl::Status()> work,
                                         TimedCallback on_timed) {
  // A graph is replayed as one unit: no per-instruction times inside it.
  if (capturing_) return Submit(stream, std::move(work));
  ASSIGN_OR_RETURN(cudaEvent_t begin, TimingEvent());
  ASSIGN_OR_RETURN(cudaEvent_t end, TimingEvent());
  absl::Status status =
      CudaOk(cudaEventRecord(begin, StreamOf(stream)), "cudaEventRecord");
  if (status.ok()) status = Submit(stream, std::move(work));
  if (status.ok()) {
    status = CudaOk(cudaEventRecord(end, StreamOf(stream)), "cudaEventRecord");
  }
  if (!status.ok()) {
    // Not timed: the events go back unrecorded (ResolveTimings would read
    // an unrecorded `end`).
    timing_pool_.push_back(begin);
    timing_pool_.push_back(end);
    return status;
  }
  timed_.push_back({begin, end, std::move(on_timed)});
  return absl::OkStatus();
}

// Device times are offsets from anchor_, an event the host saw complete at
// anchor_ns_ (steady clock); the anchor is renewed at every Synchronize so
// clock drift never accumulates beyond one step.
absl::Status CudaDeviceImpl::ResolveTimings(bool report) {
  std::vector<TimedWork> timed;
  timed.swap(timed_);
  absl::Status status;
  for (TimedWork& t : timed) {
    float begin_ms = 0, end_ms = 0;
    if (report && status.ok()) {
      status = CudaOk(cudaEventElapsedTime(&begin_ms, anchor_, t.begin),
                      "cudaEventElapsedTime");
      if (status.ok()) {
        status = CudaOk(cudaEventElapsedTime(&end_ms, anchor_, t.end),
                        "cudaEventElapsedTime");
      }
      if (status.ok()) {
        t.on_timed(anchor_ns_ + static_cast<int64_t>(begin_ms * 1e6),
                   anchor_ns_ + static_cast<int64_t>(end_ms * 1e6));
      }
    }
    timing_pool_.push_back(t.begin);
    timing_pool_.push_back(t.end);
  }
  RETURN_IF_ERROR(status);
  if (report && !timed.empty()) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, compute_));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
    anchor_ns_ = SteadyNowNs();
  }
  return absl::OkStatus();
}

}  // namespace trainc::cuda_internal
