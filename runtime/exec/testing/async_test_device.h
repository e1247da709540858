// AsyncTestDevice: a Device whose streams really run asynchronously, so
// that the executor's stream ordering (event waits and records, the
// no-overlap hold) can be wrong in a way a CPU-only test sees.
//
// On the CpuDevice the compute stream is the calling thread: every kernel
// has finished when Submit returns, so a missing event wait on either
// stream goes unnoticed until the code runs on a GPU. This device behaves
// like CUDA instead:
//
//  - Each stream is a worker thread draining a FIFO of work, event records
//    and event waits.
//  - Submit(kCompute, work) runs the host function at once, as on CUDA, and
//    the kernels it calls (RunKernel, OrderedSum, Copy) are only enqueued on
//    the compute worker, with the StepState of that moment. Each item of
//    compute work takes at least `compute_latency` there, so a kernel
//    completes well after the host moved on.
//  - Submit(kComm, work) runs `work` on the comm worker (a CPU communicator
//    such as Gloo blocks in it, as on the CpuDevice).
//  - Upload / CopyFromHost copy the host bytes at once and write them on the
//    compute stream; Download / CopyToHost wait for the compute stream.
//  - Events have CUDA's semantics: WaitEvent(s, e) makes s wait for the last
//    RecordEvent(e) issued before it (its completion on its stream).
//    Waiting on an event that was never recorded this step is a no-op on
//    CUDA, hence a silent ordering bug: here it is an error (a violation).
//  - SubmitTimed times the work where it runs on its stream (like CUDA
//    events), so trace spans show real stream order.
//
// The kernels themselves are the CpuDevice's (an inner CpuDevice holds the
// arena). MirrorCommunicator (below) lets one device play a rank of a
// larger world whose other ranks hold the same data.
#ifndef TRAINC_RUNTIME_EXEC_TESTING_ASYNC_TEST_DEVICE_H_
#define TRAINC_RUNTIME_EXEC_TESTING_ASYNC_TEST_DEVICE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/device/device.h"

namespace trainc {
namespace testing {

struct AsyncTestDeviceOptions {
  // The least time one item of compute-stream work (a kernel, an upload, a
  // copy) takes on the worker.
  absl::Duration compute_latency = absl::Milliseconds(1);
};

class AsyncTestDevice : public Device {
 public:
  explicit AsyncTestDevice(AsyncTestDeviceOptions options = {});
  ~AsyncTestDevice() override;

  AsyncTestDevice(const AsyncTestDevice&) = delete;
  AsyncTestDevice& operator=(const AsyncTestDevice&) = delete;

  std::string name() const override { return "async-test"; }

  absl::Status AllocateArena(int64_t bytes) override;
  char* arena() override { return inner_.arena(); }
  absl::Status Upload(int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Download(int64_t offset, void* dst, int64_t bytes) override;

  absl::Status Prepare(const Plan& plan) override;
  absl::Status RunKernel(const Plan& plan, const Instruction& instr,
                         const StepState& state) override;
  absl::Status OrderedSum(Stream stream, const float* src, int64_t n,
                          int64_t count, float* dst) override;
  absl::StatusOr<char*> AllocateScratch(int64_t bytes) override {
    return inner_.AllocateScratch(bytes);
  }

  absl::Status Submit(Stream stream,
                      std::function<absl::Status()> work) override;
  absl::Status SubmitTimed(Stream stream, std::function<absl::Status()> work,
                           TimedCallback on_timed) override;
  absl::Status RecordEvent(Stream stream, int event) override;
  absl::Status WaitEvent(Stream stream, int event) override;
  absl::Status ResetEvents(int num_events) override;
  absl::Status Synchronize() override;
  void* NativeStream(Stream /*stream*/) override { return nullptr; }
  absl::Status Copy(Stream stream, const void* src, void* dst,
                    int64_t bytes) override;
  absl::Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  absl::Status CopyFromHost(const void* src, void* dst,
                            int64_t bytes) override;

  // True on the worker thread of `stream` (a communicator checks that it is
  // called from the comm stream).
  bool OnStream(Stream stream) const;

  // Misuses seen so far (a wait on an unrecorded event, a kernel outside a
  // compute submission, ...); each also failed its call.
  std::vector<std::string> violations() const;

 private:
  struct Item {
    enum Kind { kWork, kRecord, kWait } kind = kWork;
    int event = 0;
    int64_t generation = 0;  // kRecord: which record; kWait: which to await
    std::function<absl::Status()> work;
  };
  struct Queue {
    std::deque<Item> items;
    int64_t pending = 0;  // queued + running
    std::thread worker;
  };

  static int Index(Stream s) { return s == Stream::kCompute ? 0 : 1; }
  // Runs `work` at this point of `stream`: at once on that stream's own
  // worker, else queued behind everything submitted to it so far.
  absl::Status Exec(Stream stream, std::function<absl::Status()> work);
  absl::Status Enqueue(Stream stream, Item item);
  absl::Status Violation(const std::string& what);
  void WaitIdle(int stream_index);
  void WorkerLoop(int stream_index);
  absl::Status StickyError();

  const AsyncTestDeviceOptions options_;
  CpuDevice inner_;  // arena, scratch and the kernels themselves
  int64_t arena_bytes_ = 0;

  mutable absl::Mutex mu_;
  Queue queues_[2] ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // first failure, sticky
  std::vector<int64_t> issued_ ABSL_GUARDED_BY(mu_);     // records issued
  std::vector<int64_t> completed_ ABSL_GUARDED_BY(mu_);  // records done
  int64_t events_in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // queued records, waits
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
};

// A communicator for one rank of `world_size` ranks that all hold the same
// data, without the other ranks: AllReduceSum multiplies by world_size,
// AllGather repeats the input world_size times. Each call first sleeps
// `latency`, so work that does not wait for it runs into the unreduced
// data. With `device`, every call must come from its comm stream.
class MirrorCommunicator : public Communicator {
 public:
  MirrorCommunicator(int world_size, absl::Duration latency,
                     const AsyncTestDevice* device = nullptr)
      : world_size_(world_size), latency_(latency), device_(device) {}

  std::string name() const override { return "mirror"; }
  int rank() const override { return 0; }
  int world_size() const override { return world_size_; }
  absl::Status AllReduceSum(float* data, int64_t count, void* stream) override;
  // This rank's segment times world_size.
  absl::Status ReduceScatterSum(float* data, int64_t count,
                                void* stream) override;
  absl::Status AllGather(const float* in, float* out, int64_t count,
                         void* stream) override;
  absl::Status Broadcast(float* data, int64_t count, int root,
                         void* stream) override;
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  absl::Status Check(const char* what) const;

  const int world_size_;
  const absl::Duration latency_;
  const AsyncTestDevice* const device_;
};

}  // namespace testing
}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_TESTING_ASYNC_TEST_DEVICE_H_
