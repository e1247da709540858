#include "runtime/exec/testing/graph_test_device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/cpu/cpu_device.h"

namespace trainc {
namespace testing {

GraphDevice::GraphDevice(int fail_after, std::unique_ptr<Device> inner)
    : inner_(inner != nullptr ? std::move(inner) : std::make_unique<CpuDevice>()),
      fail_after_(fail_after) {}

absl::Status GraphDevice::Prepare(const Plan& plan) {
  if (capturing_ || !graph_.empty()) {
    return absl::FailedPreconditionError("Prepare with a capture held");
  }
  return inner_->Prepare(plan);
}

absl::StatusOr<char*> GraphDevice::AllocateScratch(int64_t bytes) {
  if (capturing_) return absl::FailedPreconditionError("alloc in capture");
  return inner_->AllocateScratch(bytes);
}

absl::Status GraphDevice::Upload(int64_t offset, const void* src, int64_t bytes) {
  const char* data = static_cast<const char*>(src);
  if (capturing_) {
    slots_.push_back({offset, std::vector<char>(data, data + bytes)});
    const size_t i = slots_.size() - 1;
    return Record([this, i] {
      return inner_->Upload(slots_[i].offset, slots_[i].data.data(),
                            static_cast<int64_t>(slots_[i].data.size()));
    });
  }
  if (feeding_) {
    if (next_slot_ >= slots_.size() || slots_[next_slot_].offset != offset ||
        static_cast<int64_t>(slots_[next_slot_].data.size()) != bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("replay upload ", next_slot_, " does not match"));
    }
    slots_[next_slot_++].data.assign(data, data + bytes);
    return absl::OkStatus();
  }
  return inner_->Upload(offset, src, bytes);
}

absl::Status GraphDevice::Download(int64_t offset, void* dst, int64_t bytes) {
  if (capturing_) return absl::FailedPreconditionError("read in capture");
  return inner_->Download(offset, dst, bytes);
}

absl::Status GraphDevice::CopyToHost(const void* src, void* dst, int64_t bytes) {
  if (capturing_) return absl::FailedPreconditionError("read in capture");
  return inner_->CopyToHost(src, dst, bytes);
}

absl::Status GraphDevice::CopyFromHost(const void* src, void* dst, int64_t bytes) {
  if (capturing_) return absl::FailedPreconditionError("write in capture");
  return inner_->CopyFromHost(src, dst, bytes);
}

absl::Status GraphDevice::Copy(Stream stream, const void* src, void* dst, int64_t bytes) {
  if (capturing_) {
    return Record([=] { return inner_->Copy(stream, src, dst, bytes); });
  }
  return inner_->Copy(stream, src, dst, bytes);
}

absl::Status GraphDevice::RunKernel(const Plan& plan, const Instruction& instr,
                                    const StepState& state) {
  if (capturing_) return absl::FailedPreconditionError("RunKernel outside Submit");
  // A replayed graph reads the step scalars Replay() wrote, never the
  // host's state of the moment.
  const StepState& now = replaying_ ? replay_state_ : state;
  if (before_kernel) before_kernel(plan, instr, now);
  return inner_->RunKernel(plan, instr, now);
}

absl::Status GraphDevice::OrderedSum(Stream stream, const float* src, int64_t n,
                                     int64_t count, float* dst) {
  if (capturing_) {
    return Record([=] { return inner_->OrderedSum(stream, src, n, count, dst); });
  }
  return inner_->OrderedSum(stream, src, n, count, dst);
}

absl::Status GraphDevice::Submit(Stream stream, std::function<absl::Status()> work) {
  if (capturing_) {
    return Record([this, stream, work = std::move(work)] { return inner_->Submit(stream, work); });
  }
  return inner_->Submit(stream, std::move(work));
}

absl::Status GraphDevice::RecordEvent(Stream stream, int event) {
  if (capturing_) return Record([=] { return inner_->RecordEvent(stream, event); });
  return inner_->RecordEvent(stream, event);
}

absl::Status GraphDevice::WaitEvent(Stream stream, int event) {
  if (capturing_) return Record([=] { return inner_->WaitEvent(stream, event); });
  return inner_->WaitEvent(stream, event);
}

absl::Status GraphDevice::ResetEvents(int num_events) {
  if (capturing_) return Record([=] { return inner_->ResetEvents(num_events); });
  return inner_->ResetEvents(num_events);
}

absl::Status GraphDevice::Synchronize() {
  if (capturing_) return absl::FailedPreconditionError("sync in capture");
  log.push_back("sync");
  return inner_->Synchronize();
}

absl::Status GraphDevice::BeginCapture() {
  if (capturing_ || !graph_.empty()) {
    return absl::FailedPreconditionError("a capture is held");
  }
  capturing_ = true;
  next_slot_ = 0;
  ++captures;
  return absl::OkStatus();
}

absl::Status GraphDevice::EndCapture() {
  if (!capturing_) return absl::FailedPreconditionError("not capturing");
  capturing_ = false;
  next_slot_ = slots_.size();  // the captured uploads are the first inputs
  return absl::OkStatus();
}

absl::Status GraphDevice::BeginReplayInputs() {
  if (graph_.empty()) return absl::FailedPreconditionError("no capture");
  feeding_ = true;
  next_slot_ = 0;
  log.push_back("feed");
  return absl::OkStatus();
}

absl::Status GraphDevice::EndReplayInputs() {
  if (!feeding_) return absl::FailedPreconditionError("no input window");
  feeding_ = false;
  return absl::OkStatus();
}

absl::Status GraphDevice::Replay(const StepState& state) {
  if (graph_.empty()) return absl::FailedPreconditionError("no capture");
  log.push_back("replay");
  replay_steps.push_back(state.step);
  const bool fed = next_slot_ == slots_.size();
  feeding_ = false;
  next_slot_ = 0;
  if (!fed) return absl::FailedPreconditionError("replay inputs incomplete");
  replaying_ = true;
  replay_state_ = state;
  ++replays;
  absl::Status status;
  for (const auto& op : graph_) {
    if (!(status = op()).ok()) break;
  }
  replaying_ = false;
  return status;
}

absl::Status GraphDevice::DropCapture() {
  capturing_ = feeding_ = false;
  next_slot_ = 0;
  graph_.clear();
  slots_.clear();
  return absl::OkStatus();
}

absl::Status GraphDevice::Record(std::function<absl::Status()> op) {
  if (fail_after_ >= 0 && static_cast<int>(graph_.size()) >= fail_after_) {
    return absl::UnimplementedError("this op cannot be captured");
  }
  graph_.push_back(std::move(op));
  return absl::OkStatus();
}

}  // namespace testing
}  // namespace trainc
