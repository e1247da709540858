// CudaDeviceImpl's memory: the arena, scratch blocks, and host <-> device
// copies (Upload through the pinned staging ring, also into a captured
// step's input slots).
#include "runtime/cuda/cuda_device_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"

namespace trainc::cuda_internal {

// cudaMemset runs on the legacy default stream, which the plan's
// non-blocking streams do not wait for: zero on compute_ and wait, so that
// both streams see the zeros (allocation time only).
absl::Status CudaDeviceImpl::Zero(void* p, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::CheckRange(const char* what, int64_t offset,
                                        int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset + bytes > arena_bytes_) {
    return absl::OutOfRangeError(
        absl::StrCat(name_, ": ", what, " [", offset, ", +", bytes,
                     ") outside the arena of ", arena_bytes_, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::AllocateArena(int64_t bytes) {
  if (arena_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": arena already allocated");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative arena size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  // One allocation for the whole plan: cudaMalloc aligns to 256 bytes, more
  // than the plan's 64-byte offsets need for coalesced and vector access.
  const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 256);
  CUDA_RETURN_IF_ERROR(cudaMalloc(&arena_, size));
  RETURN_IF_ERROR(Zero(arena_, size));
  arena_bytes_ = bytes;
  return absl::OkStatus();
}

absl::StatusOr<char*> CudaDeviceImpl::AllocateScratch(int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": AllocateScratch in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative scratch size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  void* p = nullptr;
  const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 256);
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size));
  scratch_.push_back(p);
  RETURN_IF_ERROR(Zero(p, size));
  return static_cast<char*>(p);
}

absl::Status CudaDeviceImpl::StagedCopy(void* device_dst, const void* src,
                                        int64_t bytes) {
  for (int64_t done = 0; done < bytes; done += kStagingChunkBytes) {
    const size_t n =
        static_cast<size_t>(std::min(kStagingChunkBytes, bytes - done));
    Staging& s = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % kStagingSlots;
    // Back-pressure only: blocks when the GPU is kStagingSlots chunks behind.
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.done));
    if (s.capacity < n) {
      if (s.host) CUDA_RETURN_IF_ERROR(cudaFreeHost(s.host));
      s.host = nullptr;
      s.capacity = 0;
      // Grow geometrically (up to a chunk) so the ring settles at once.
      const size_t size =
          std::min(2 * n, static_cast<size_t>(kStagingChunkBytes));
      CUDA_RETURN_IF_ERROR(cudaMallocHost(&s.host, size));
      s.capacity = size;
    }
    std::memcpy(s.host, static_cast<const char*>(src) + done, n);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(device_dst) + done,
                                         s.host, n, cudaMemcpyHostToDevice,
                                         compute_));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s.done, compute_));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Upload(int64_t offset, const void* src,
                                    int64_t bytes) {
  RETURN_IF_ERROR(CheckRange("upload", offset, bytes));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  if (capturing_) return CaptureInput(offset, src, bytes);
  if (feeding_) return FeedInput(offset, src, bytes);
  return StagedCopy(arena_ + offset, src, bytes);
}

absl::Status CudaDeviceImpl::Download(int64_t offset, void* dst,
                                      int64_t bytes) {
  RETURN_IF_ERROR(CheckRange("download", offset, bytes));
  return CopyToHost(arena_ + offset, dst, bytes);
}

absl::Status CudaDeviceImpl::CopyToHost(const void* src, void* dst,
                                        int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": a read in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                       cudaMemcpyDeviceToHost, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::CopyFromHost(const void* src, void* dst,
                                          int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": CopyFromHost in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  return StagedCopy(dst, src, bytes);
}

absl::Status CudaDeviceImpl::Copy(Stream stream, const void* src, void* dst,
                                  int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  if (!sticky_.ok()) return sticky_;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                       cudaMemcpyDeviceToDevice,
                                       StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::EnsureKernelScratch(int64_t floats) {
  if (floats <= kernel_scratch_floats_) return absl::OkStatus();
  if (kernel_scratch_) {
    // Prepare-time only: the old scratch may still be in use by queued work.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
    CUDA_RETURN_IF_ERROR(cudaFree(kernel_scratch_));
    kernel_scratch_ = nullptr;
    kernel_scratch_floats_ = 0;
  }
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(&kernel_scratch_, static_cast<size_t>(floats) * 4));
  kernel_scratch_floats_ = floats;
  return absl::OkStatus();
}

}  // namespace trainc::cuda_internal
