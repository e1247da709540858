#include "runtime/exec/testing/async_test_device.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/util/status_macros.h"
#include "runtime/trace/tracer.h"

namespace trainc {
namespace testing {
namespace {

// The stream whose worker this thread is (-1: none), and of which device.
thread_local const void* tls_worker_device = nullptr;
thread_local int tls_worker_stream = -1;
// Set while the host function of a compute submission runs on this thread.
thread_local const void* tls_compute_submission = nullptr;

const char* StreamName(int index) { return index == 0 ? "compute" : "comm"; }

}  // namespace

AsyncTestDevice::AsyncTestDevice(AsyncTestDeviceOptions options)
    : options_(options) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < 2; ++i) {
    queues_[i].worker = std::thread([this, i] { WorkerLoop(i); });
  }
}

AsyncTestDevice::~AsyncTestDevice() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (Queue& q : queues_) q.worker.join();
}

bool AsyncTestDevice::OnStream(Stream stream) const {
  return tls_worker_device == this && tls_worker_stream == Index(stream);
}

std::vector<std::string> AsyncTestDevice::violations() const {
  absl::MutexLock lock(&mu_);
  return violations_;
}

absl::Status AsyncTestDevice::Violation(const std::string& what) {
  absl::MutexLock lock(&mu_);
  violations_.push_back(what);
  absl::Status status =
      absl::FailedPreconditionError(absl::StrCat("async-test device: ", what));
  if (error_.ok()) error_ = status;
  return status;
}

absl::Status AsyncTestDevice::StickyError() {
  absl::MutexLock lock(&mu_);
  return error_;
}

void AsyncTestDevice::WorkerLoop(int index) {
  tls_worker_device = this;
  tls_worker_stream = index;
  for (;;) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      Queue& q = queues_[index];
      std::pair<AsyncTestDevice*, int> arg(this, index);
      mu_.Await(absl::Condition(
          +[](std::pair<AsyncTestDevice*, int>* a)
               ABSL_NO_THREAD_SAFETY_ANALYSIS {
                 return a->first->stop_ ||
                        !a->first->queues_[a->second].items.empty();
               },
          &arg));
      if (q.items.empty()) return;  // stopped and drained
      item = std::move(q.items.front());
      q.items.pop_front();
    }
    switch (item.kind) {
      case Item::kWork: {
        // After a failure the stream only drains: records and waits still
        // run so that nothing waits forever.
        if (StickyError().ok()) {
          absl::Status status = item.work();
          if (!status.ok()) {
            absl::MutexLock lock(&mu_);
            if (error_.ok()) error_ = status;
          }
        }
        break;
      }
      case Item::kRecord: {
        absl::MutexLock lock(&mu_);
        completed_[item.event] =
            std::max(completed_[item.event], item.generation);
        break;
      }
      case Item::kWait: {
        absl::MutexLock lock(&mu_);
        struct Arg {
          AsyncTestDevice* self;
          int event;
          int64_t generation;
        } arg{this, item.event, item.generation};
        mu_.Await(absl::Condition(
            +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return a->self->completed_[a->event] >= a->generation ||
                     !a->self->error_.ok() || a->self->stop_;
            },
            &arg));
        break;
      }
    }
    absl::MutexLock lock(&mu_);
    --queues_[index].pending;
    if (item.kind != Item::kWork) --events_in_flight_;
  }
}

absl::Status AsyncTestDevice::Enqueue(Stream stream, Item item) {
  absl::MutexLock lock(&mu_);
  if (!error_.ok()) return error_;
  Queue& q = queues_[Index(stream)];
  if (item.kind != Item::kWork) ++events_in_flight_;
  q.items.push_back(std::move(item));
  ++q.pending;
  return absl::OkStatus();
}

absl::Status AsyncTestDevice::Exec(Stream stream,
                                   std::function<absl::Status()> work) {
  if (OnStream(stream)) {
    // Work submitted from the stream's own work runs at that point of the
    // stream, as on a CUDA stream.
    RETURN_IF_ERROR(StickyError());
    absl::Status status = work();
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = status;
    }
    return status;
  }
  Item item;
  item.kind = Item::kWork;
  if (stream == Stream::kCompute && options_.compute_latency > absl::ZeroDuration()) {
    // A kernel that completes well after it was launched.
    item.work = [latency = options_.compute_latency, work = std::move(work)] {
      absl::SleepFor(latency);
      return work();
    };
  } else {
    item.work = std::move(work);
  }
  return Enqueue(stream, std::move(item));
}

void AsyncTestDevice::WaitIdle(int index) {
  absl::MutexLock lock(&mu_);
  std::pair<AsyncTestDevice*, int> arg(this, index);
  mu_.Await(absl::Condition(
      +[](std::pair<AsyncTestDevice*, int>* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return a->first->queues_[a->second].pending == 0;
      },
      &arg));
}

absl::Status AsyncTestDevice::AllocateArena(int64_t bytes) {
  RETURN_IF_ERROR(inner_.AllocateArena(bytes));
  arena_bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status AsyncTestDevice::Prepare(const Plan& plan) {
  return inner_.Prepare(plan);
}

absl::Status AsyncTestDevice::Upload(int64_t offset, const void* src,
                                     int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset + bytes > arena_bytes_) {
    return absl::OutOfRangeError(absl::StrCat(
        "async-test: upload [", offset, ", +", bytes, ") outside the arena"));
  }
  // The host buffer may be reused once we return: copy it now, write it
  // when the compute stream gets there.
  auto data = std::make_shared<std::vector<char>>(
      static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
  char* dst = inner_.arena() + offset;
  return Exec(Stream::kCompute, [data, dst] {
    std::memcpy(dst, data->data(), data->size());
    return absl::OkStatus();
  });
}

absl::Status AsyncTestDevice::Download(int64_t offset, void* dst,
                                       int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset + bytes > arena_bytes_) {
    return absl::OutOfRangeError(absl::StrCat(
        "async-test: download [", offset, ", +", bytes, ") outside the arena"));
  }
  WaitIdle(0);  // after all compute work submitted so far
  std::memcpy(dst, inner_.arena() + offset, bytes);
  return StickyError();
}

absl::Status AsyncTestDevice::CopyToHost(const void* src, void* dst,
                                         int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("async-test: negative copy");
  WaitIdle(0);
  std::memcpy(dst, src, bytes);
  return StickyError();
}

absl::Status AsyncTestDevice::CopyFromHost(const void* src, void* dst,
                                           int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("async-test: negative copy");
  auto data = std::make_shared<std::vector<char>>(
      static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
  return Exec(Stream::kCompute, [data, dst] {
    std::memcpy(dst, data->data(), data->size());
    return absl::OkStatus();
  });
}

absl::Status AsyncTestDevice::Copy(Stream stream, const void* src, void* dst,
                                   int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("async-test: negative copy");
  return Exec(stream, [src, dst, bytes] {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  });
}

absl::Status AsyncTestDevice::RunKernel(const Plan& plan,
                                        const Instruction& instr,
                                        const StepState& state) {
  if (tls_compute_submission != this) {
    return Violation(absl::StrCat("RunKernel(", instr.op, " \"", instr.label,
                                  "\") outside a compute-stream Submit"));
  }
  // Enqueued with the StepState of this moment, like a CUDA launch.
  return Exec(Stream::kCompute, [this, &plan, &instr, state] {
    return inner_.RunKernel(plan, instr, state);
  });
}

absl::Status AsyncTestDevice::OrderedSum(Stream stream, const float* src,
                                         int64_t n, int64_t count, float* dst) {
  return Exec(stream, [this, src, n, count, dst] {
    // The inner device's compute stream is the calling thread: this runs
    // the sum here, on this stream's worker.
    return inner_.OrderedSum(Stream::kCompute, src, n, count, dst);
  });
}

absl::Status AsyncTestDevice::Submit(Stream stream,
                                     std::function<absl::Status()> work) {
  if (stream == Stream::kComm || OnStream(Stream::kCompute)) {
    return Exec(stream, std::move(work));
  }
  // Compute: the host function runs now and enqueues its kernels.
  RETURN_IF_ERROR(StickyError());
  const void* outer = tls_compute_submission;
  tls_compute_submission = this;
  absl::Status status = work();
  tls_compute_submission = outer;
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
  }
  return status;
}

absl::Status AsyncTestDevice::SubmitTimed(Stream stream,
                                          std::function<absl::Status()> work,
                                          TimedCallback on_timed) {
  // Markers around the work on its stream, like CUDA events: the span is
  // when the stream ran it, not when the host issued it.
  auto begin = std::make_shared<int64_t>(0);
  Item mark;
  mark.kind = Item::kWork;
  mark.work = [begin] {
    *begin = TraceClockNs();
    return absl::OkStatus();
  };
  if (OnStream(stream)) {
    RETURN_IF_ERROR(mark.work());
  } else {
    RETURN_IF_ERROR(Enqueue(stream, std::move(mark)));
  }
  RETURN_IF_ERROR(Submit(stream, std::move(work)));
  Item end;
  end.kind = Item::kWork;
  end.work = [begin, on_timed = std::move(on_timed)] {
    on_timed(*begin, TraceClockNs());
    return absl::OkStatus();
  };
  if (OnStream(stream)) return end.work();
  return Enqueue(stream, std::move(end));
}

absl::Status AsyncTestDevice::RecordEvent(Stream stream, int event) {
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    if (event < 0 || event >= static_cast<int>(issued_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "async-test: event ", event, " out of range (ResetEvents(",
          issued_.size(), "))"));
    }
    generation = ++issued_[event];
    if (OnStream(stream)) {
      completed_[event] = std::max(completed_[event], generation);
      return absl::OkStatus();
    }
  }
  Item item;
  item.kind = Item::kRecord;
  item.event = event;
  item.generation = generation;
  return Enqueue(stream, std::move(item));
}

absl::Status AsyncTestDevice::WaitEvent(Stream stream, int event) {
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    if (event < 0 || event >= static_cast<int>(issued_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "async-test: event ", event, " out of range (ResetEvents(",
          issued_.size(), "))"));
    }
    generation = issued_[event];
  }
  if (generation == 0) {
    // cudaStreamWaitEvent on an event not yet recorded returns at once: the
    // wait would silently order nothing.
    return Violation(absl::StrCat("WaitEvent(", StreamName(Index(stream)),
                                  ", ", event,
                                  ") before any RecordEvent of that event "
                                  "this step"));
  }
  if (OnStream(stream)) {
    absl::MutexLock lock(&mu_);
    struct Arg {
      AsyncTestDevice* self;
      int event;
      int64_t generation;
    } arg{this, event, generation};
    mu_.Await(absl::Condition(
        +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return a->self->completed_[a->event] >= a->generation ||
                 !a->self->error_.ok();
        },
        &arg));
    return error_;
  }
  Item item;
  item.kind = Item::kWait;
  item.event = event;
  item.generation = generation;
  return Enqueue(stream, std::move(item));
}

absl::Status AsyncTestDevice::ResetEvents(int num_events) {
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    // Work in flight is fine (the parameter uploads before the first step);
    // records and waits in flight would refer to the events being reset.
    busy = events_in_flight_ != 0;
    if (!busy) {
      issued_.assign(num_events, 0);
      completed_.assign(num_events, 0);
      return error_;
    }
  }
  return Violation("ResetEvents while event records or waits are queued");
}

absl::Status AsyncTestDevice::Synchronize() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](AsyncTestDevice* d) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return d->queues_[0].pending == 0 && d->queues_[1].pending == 0;
      },
      this));
  return error_;
}

absl::Status MirrorCommunicator::Check(const char* what) const {
  if (device_ != nullptr && !device_->OnStream(Stream::kComm)) {
    return absl::FailedPreconditionError(
        absl::StrCat("mirror: ", what, " called outside the comm stream"));
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::AllReduceSum(float* data, int64_t count,
                                              void* /*stream*/) {
  RETURN_IF_ERROR(Check("AllReduceSum"));
  absl::SleepFor(latency_);
  for (int64_t i = 0; i < count; ++i) data[i] *= world_size_;
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::ReduceScatterSum(float* data, int64_t count,
                                                  void* /*stream*/) {
  RETURN_IF_ERROR(Check("ReduceScatterSum"));
  absl::SleepFor(latency_);
  for (int64_t i = 0; i < count; ++i) data[i] *= world_size_;  // rank 0's
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::AllGather(const float* in, float* out,
                                           int64_t count, void* /*stream*/) {
  RETURN_IF_ERROR(Check("AllGather"));
  absl::SleepFor(latency_);
  const std::vector<float> mine(in, in + count);
  for (int r = 0; r < world_size_; ++r) {
    std::memcpy(out + r * count, mine.data(), count * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status MirrorCommunicator::Broadcast(float* /*data*/, int64_t /*count*/,
                                           int root, void* /*stream*/) {
  RETURN_IF_ERROR(Check("Broadcast"));
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("mirror: root ", root));
  }
  absl::SleepFor(latency_);
  return absl::OkStatus();  // every rank holds root's data already
}

}  // namespace testing
}  // namespace trainc
