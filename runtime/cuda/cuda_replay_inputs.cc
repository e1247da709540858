// CudaDeviceImpl's replay inputs: the uploads of a captured step, held in
// device-side input slots that the graph copies into the arena.
//
// Each slot has two sets of buffers (device and pinned host). A replay
// reads one set; the next replay's uploads (BeginReplayInputs ..
// EndReplayInputs, made while that replay may still run) go to the other,
// host -> pinned at once and pinned -> device on copy_, a stream of their
// own. So the next batch moves while the current step computes:
//
//   copy_:     wait consumed[s]  H2D into set s  record landed[s]
//   compute_:  ... step n (set 1 - s) ...  wait landed[s]  step n+1 (set s)
//                                          record consumed[s]
//
// The graph's copy nodes are pointed at the set a replay reads
// (cudaGraphExecMemcpyNodeSetParams1D), which changes only later launches.
// Where a slot's copy node cannot be found in the graph, every replay
// reads set 0 and the copy stream waits for the replay before it.
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_device_impl.h"
#include "runtime/cuda/cuda_status.h"

namespace trainc::cuda_internal {

absl::Status CudaDeviceImpl::CaptureInput(int64_t offset, const void* src,
                                          int64_t bytes) {
  // The graph copies from set 0 of a slot of its own; the data of this
  // (captured, not yet run) step goes into it at EndCapture.
  InputSlot slot;
  slot.offset = offset;
  slot.bytes = bytes;
  const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 1);
  for (char*& device : slot.device) {
    CUDA_RETURN_IF_ERROR(cudaMalloc(&device, size));
  }
  slot.pending.assign(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
  input_slots_.push_back(std::move(slot));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(arena_ + offset, input_slots_.back().device[0],
                                       static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                       compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::FindInputNodes() {
  size_t count = 0;
  CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph_, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph_, nodes.data(), &count));
  size_t found = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_RETURN_IF_ERROR(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms params = {};
    CUDA_RETURN_IF_ERROR(cudaGraphMemcpyNodeGetParams(node, &params));
    for (InputSlot& slot : input_slots_) {
      if (slot.node == nullptr && params.srcPtr.ptr == slot.device[0]) {
        slot.node = node;
        ++found;
      }
    }
  }
  double_buffered_ = found == input_slots_.size();
  fill_set_ = 0;  // the captured step's inputs, for its first replay
  graph_set_ = 0;
  last_set_ = 0;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::BeginReplayInputs() {
  if (graph_exec_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": no captured step");
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  fill_set_ = double_buffered_ ? 1 - last_set_ : 0;
  // The pinned buffers of this set are free once its last copy landed
  // (two feeds ago: normally long done); its device buffers once the
  // replay that read them has finished.
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(landed_[fill_set_]));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, consumed_[fill_set_], 0));
  feeding_ = true;
  next_input_slot_ = 0;
  return absl::OkStatus();
}

// The pinned buffer the next FeedInput copies from, for the loader to
// gather into (its first use allocates it).
void* CudaDeviceImpl::UploadBuffer(int64_t bytes) {
  if (!feeding_ || next_input_slot_ >= input_slots_.size()) return nullptr;
  InputSlot& slot = input_slots_[next_input_slot_];
  if (slot.bytes != bytes) return nullptr;  // FeedInput will say so
  void*& pinned = slot.pinned[fill_set_];
  if (pinned == nullptr &&
      cudaMallocHost(&pinned, static_cast<size_t>(bytes > 0 ? bytes : 1)) != cudaSuccess) {
    cudaGetLastError();
    pinned = nullptr;  // FeedInput tries again and reports it
  }
  return pinned;
}

absl::Status CudaDeviceImpl::FeedInput(int64_t offset, const void* src, int64_t bytes) {
  if (next_input_slot_ >= input_slots_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": the captured step has ", input_slots_.size(),
                     " uploads and all are filled; call Replay"));
  }
  InputSlot& slot = input_slots_[next_input_slot_];
  if (slot.offset != offset || slot.bytes != bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": upload ", next_input_slot_, " of the captured step was [",
                     slot.offset, ", +", slot.bytes, "), now [", offset, ", +", bytes, ")"));
  }
  void*& pinned = slot.pinned[fill_set_];
  if (pinned == nullptr) {
    CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned, static_cast<size_t>(bytes > 0 ? bytes : 1)));
  }
  if (src != pinned) std::memcpy(pinned, src, static_cast<size_t>(bytes));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot.device[fill_set_], pinned,
                                       static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                       copy_));
  ++next_input_slot_;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::EndReplayInputs() {
  if (!feeding_) {
    return absl::FailedPreconditionError(name_ + ": EndReplayInputs without Begin");
  }
  feeding_ = false;
  CUDA_RETURN_IF_ERROR(cudaEventRecord(landed_[fill_set_], copy_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::LaunchWithInputs() {
  if (feeding_) RETURN_IF_ERROR(EndReplayInputs());
  const int set = fill_set_;
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, landed_[set], 0));
  if (set != graph_set_) {
    for (const InputSlot& slot : input_slots_) {
      CUDA_RETURN_IF_ERROR(cudaGraphExecMemcpyNodeSetParams1D(
          graph_exec_, slot.node, arena_ + slot.offset, slot.device[set],
          static_cast<size_t>(slot.bytes), cudaMemcpyDeviceToDevice));
    }
    graph_set_ = set;
  }
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec_, compute_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(consumed_[set], compute_));
  last_set_ = set;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::FreeInputSlots() {
  // Copies out of the pinned buffers may still be in flight.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_));
  for (InputSlot& slot : input_slots_) {
    for (char* device : slot.device) {
      if (device != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(device));
    }
    for (void* pinned : slot.pinned) {
      if (pinned != nullptr) CUDA_RETURN_IF_ERROR(cudaFreeHost(pinned));
    }
  }
  input_slots_.clear();
  next_input_slot_ = 0;
  feeding_ = false;
  fill_set_ = graph_set_ = last_set_ = 0;
  double_buffered_ = false;
  return absl::OkStatus();
}

}  // namespace trainc::cuda_internal
