// Device: where a plan's arena lives and its instructions run.
//
// One interface for every backend (cpu, cuda); the executor
// (runtime/exec) is shared and only talks to this and to a Communicator.
//
// Streams. A device has the plan's two streams, compute and comm. Work
// submitted to a stream runs in submission order. On the CPU the compute
// stream is the calling thread (Submit runs the work at once) and the comm
// stream is a worker thread; on CUDA both are cudaStreams and Submit runs the
// host function at once, which only enqueues device work.
//
// Events. RecordEvent(s, e) marks the point in stream s after everything
// submitted so far; WaitEvent(s, e) makes later work on s wait for it.
// ResetEvents() starts a new step (all events unrecorded).
#ifndef TRAINC_RUNTIME_DEVICE_DEVICE_H_
#define TRAINC_RUNTIME_DEVICE_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc {

// What changes from step to step and an instruction may need.
struct StepState {
  int64_t step = 1;    // 1-based optimizer step (Adam's bias correction)
  double lr = 0.0;     // learning rate from the schedule at this step
  int rank = 0;        // this rank (dropout: which examples it holds)
  bool training = true;  // false in evaluation: dropout is the identity
};

class Device {
 public:
  virtual ~Device() = default;

  virtual std::string name() const = 0;

  // The arena: one allocation of `bytes`, zero-filled.
  virtual absl::Status AllocateArena(int64_t bytes) = 0;
  // Base address of the arena (a device pointer on CUDA).
  virtual char* arena() = 0;

  // Host -> arena, ordered on the compute stream (the host buffer may be
  // reused once the call returns).
  virtual absl::Status Upload(int64_t offset, const void* src,
                              int64_t bytes) = 0;
  // Arena -> host after all compute work submitted so far.
  virtual absl::Status Download(int64_t offset, void* dst, int64_t bytes) = 0;

  // Runs (cpu) or enqueues (cuda) one compute instruction of `plan` on the
  // compute stream: every op of plan.h except load_batch and all_reduce.
  virtual absl::Status RunKernel(const Plan& plan, const Instruction& instr,
                                 const StepState& state) = 0;

  // Deterministic mode: dst[i] = sum over k of src[k * count + i], k in
  // increasing order, on `stream`. Bit-reproducible by construction.
  virtual absl::Status OrderedSum(Stream stream, const float* src, int64_t n,
                                  int64_t count, float* dst) = 0;

  // Runs `work` in order on `stream` (see the header comment).
  virtual absl::Status Submit(Stream stream,
                              std::function<absl::Status()> work) = 0;
  virtual absl::Status RecordEvent(Stream stream, int event) = 0;
  virtual absl::Status WaitEvent(Stream stream, int event) = 0;
  virtual absl::Status ResetEvents(int num_events) = 0;
  // Blocks until both streams are idle; returns the first error of any
  // submitted work.
  virtual absl::Status Synchronize() = 0;

  // Opaque native stream for a communicator to enqueue on (cudaStream_t on
  // CUDA, nullptr on the CPU).
  virtual void* NativeStream(Stream stream) = 0;

  // dst <- src, `bytes` of this device's memory (arena or scratch), in
  // order on `stream`.
  virtual absl::Status Copy(Stream stream, const void* src, void* dst,
                            int64_t bytes) = 0;
  // This device's memory (arena or scratch) -> host, after all compute work
  // submitted so far. Download(offset, ...) is the arena-relative form.
  virtual absl::Status CopyToHost(const void* src, void* dst,
                                  int64_t bytes) = 0;
  // Host -> this device's memory, ordered on the compute stream (the host
  // buffer may be reused once the call returns). Unlike Upload, never part
  // of a captured step's inputs.
  virtual absl::Status CopyFromHost(const void* src, void* dst,
                                    int64_t bytes) = 0;

  // --- Optional hooks, with defaults (added for the shared executor). ---

  // Called once per plan before the first step: resolves every compute
  // instruction (buffer offsets -> pointers, attrs -> numbers) so RunKernel
  // does no lookups, and rejects ops the backend does not know. RunKernel
  // may only be called for instructions of the plan last prepared.
  virtual absl::Status Prepare(const Plan& /*plan*/) {
    return absl::OkStatus();
  }

  // A second allocation beside the arena, owned by the device and valid
  // until it is destroyed: the deterministic all-reduce's gather area.
  virtual absl::StatusOr<char*> AllocateScratch(int64_t /*bytes*/) {
    return absl::UnimplementedError(name() + ": AllocateScratch");
  }

  // Like Submit, and reports when `work` actually ran on `stream` as
  // steady_clock nanoseconds (std::chrono::steady_clock::now() epoch), for
  // tracing. `on_timed` may be called on any thread, at the latest by the
  // next Synchronize(). The default times the host function, which is exact
  // where the host function *is* the work (the CPU backend); a backend that
  // only enqueues (CUDA) overrides it with device events.
  using TimedCallback = std::function<void(int64_t begin_ns, int64_t end_ns)>;
  virtual absl::Status SubmitTimed(Stream stream,
                                   std::function<absl::Status()> work,
                                   TimedCallback on_timed);

  // Step capture (CUDA graphs): one whole step, both streams, recorded once
  // and replayed with a single launch. The executor drives it:
  //
  //   BeginCapture();
  //   ... one step submitted exactly as usual, uploads included ...
  //   EndCapture();               // nothing of that step has run yet; its
  //                               // uploads are held as the first inputs
  //   Replay(state);              // runs it
  //   and for each later step:
  //   BeginReplayInputs();
  //   ... the same uploads (same order, offsets and sizes), new data ...
  //   EndReplayInputs();          // optional: the inputs wait for Replay
  //   Replay(state);              // new lr / step are applied
  //
  // While capturing nothing runs, so Download, CopyToHost and Synchronize
  // fail. Outside a BeginReplayInputs..EndReplayInputs (or Replay) window
  // uploads go to the arena as usual, so eager work (evaluation) can run
  // between replays, also while the next replay's inputs are held.
  // Synchronize() waits for a replay like for any other work.
  //
  // The next replay's inputs may be fed while the previous replay still
  // runs (before Synchronize): they never disturb it. The CUDA device keeps
  // two sets of input slots and copies a window's uploads into the idle
  // set on a copy stream of its own, so the next step's batch moves during
  // the running step, off its critical path.
  // Bytes of host memory this device allocated for the plan (the CPU
  // device: its arena, bf16 staging and scratch); 0 where they live on an
  // accelerator.
  virtual int64_t HostBytes() const { return 0; }

  virtual bool SupportsCapture() const { return false; }
  virtual absl::Status BeginCapture() {
    return absl::UnimplementedError(name() + ": step capture");
  }
  virtual absl::Status EndCapture() {
    return absl::UnimplementedError(name() + ": step capture");
  }
  virtual absl::Status BeginReplayInputs() {
    return absl::UnimplementedError(name() + ": step capture");
  }
  // Where the data of the next Upload, of `bytes`, may be gathered in
  // place: host memory the device copies from itself (the CUDA device's
  // pinned buffer of the input slot being fed, inside an input window), or
  // null (gather into your own memory). Upload(offset, that pointer,
  // bytes) then makes no host copy. Valid until that Upload.
  virtual void* UploadBuffer(int64_t /*bytes*/) { return nullptr; }
  // Closes the input window: the uploads made in it are held for the
  // next Replay, and later uploads go to the arena.
  virtual absl::Status EndReplayInputs() {
    return absl::UnimplementedError(name() + ": step capture");
  }
  virtual absl::Status Replay(const StepState& /*state*/) {
    return absl::UnimplementedError(name() + ": step capture");
  }
  // Back to eager execution; also abandons a capture in progress. A no-op
  // without a capture.
  virtual absl::Status DropCapture() { return absl::OkStatus(); }
};

// Reads elements [first, first + count) of a float buffer of the arena (an
// f32 one, or a bf16 one widened exactly) into `out` as f32, after all
// compute work submitted so far. Any other dtype, or a range outside the
// buffer, is an error.
absl::Status DownloadFloats(Device& device, const Buffer& buffer, int64_t first,
                            int64_t count, float* out);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DEVICE_DEVICE_H_
