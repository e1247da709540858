// Executor: runs a Plan's optimizer steps on any Device and Communicator.
//
//   CpuDevice device;                         // or a CUDA device
//   Executor executor(plan, &device, comm.get(), tracer_or_null);
//   RETURN_IF_ERROR(executor.Prepare());      // allocates, checks, resolves
//   ... upload initial parameters (device.Upload) ...
//   for (int64_t step = 1; ...; ++step) {
//     ASSIGN_OR_RETURN(double loss_sum,
//                      executor.RunStep({step, lr_at(step)}, batches));
//   }
//
// The executor makes no decision of its own: instructions are issued in
// program order on their stream with the plan's event waits and records.
// Compute kernels go to Device::RunKernel, load_batch to the BatchSource,
// all_reduce to the Communicator from the comm stream. It knows nothing of
// CPU vs CUDA.
//
// Losses stay on the device: each micro-step's loss_sum is copied into a
// small scratch array on the compute stream and read once, after the step
// has finished, so the host never waits inside a step.
//
// Step capture: on a device that supports it (CUDA graphs, see device.h),
// the first untraced step after a warm-up step is captured whole, both
// streams and the all-reduces included, and every later untraced step is
// one replay: the host only uploads the batches and launches. Where capture
// cannot be used (the device or communicator has none, or capturing
// failed) every step runs eagerly, with the same numbers; capture() says
// which, and why.
//
// Deterministic plans: each bucket's `accumulate` gradient slots are
// gathered from every rank into a scratch area, then summed in global
// micro-batch order into slot 0 (Device::OrderedSum). The scratch area is
// extra memory beside the arena: world_size * accumulate * the largest
// bucket's slot bytes, allocated once by Prepare.
#ifndef TRAINC_RUNTIME_EXEC_EXECUTOR_H_
#define TRAINC_RUNTIME_EXEC_EXECUTOR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"
#include "runtime/position/position.h"
#include "runtime/trace/tracer.h"

namespace trainc {

struct ExecutorOptions {
  // true: each bucket's all-reduce starts as soon as the plan says (during
  // the last micro-step's backward). false: every all-reduce waits until
  // the whole backward has run, the no-overlap baseline of the benchmarks.
  // Same numbers either way.
  bool overlap = true;
  // true: replay a captured step where the device and communicator allow
  // it (see the header comment). Steps with a tracer set always run eagerly,
  // since a replay has no per-instruction times.
  bool capture = true;
  // Where each instruction is published as it is issued (runtime/position):
  // compute instructions when issued, collectives while they run. Steps
  // replayed as one CUDA graph publish their step only. Not owned; may be
  // null.
  PositionBoard* position = nullptr;
};

// Where the host's time in the last RunStep went (Executor::step_times()):
// what a rank compares with its peers' to find the slow one. On the CPU
// the compute stream is the host thread, whose CPU time outside Fill is
// the compute (CPU time, not wall time: a rank descheduled on a busy
// machine computes no slower); on a GPU that is only the launches, and
// the host waits for the device's compute in `waiting_ns`.
struct StepTimes {
  int64_t total_ns = 0;    // the whole RunStep
  int64_t data_ns = 0;     // in the batch source's Fill (load_batch)
  int64_t waiting_ns = 0;  // the compute stream waiting for an event (a
                           // collective) and the step's final Synchronize
  int64_t compute_cpu_ns = 0;  // the host thread's CPU time outside Fill
};

// What became of step capture (Executor::capture()).
struct CaptureInfo {
  // Empty when steps can be captured; else why not ("the cpu device has no
  // step capture", "step capture is off", ...).
  std::string unavailable;
  // Why capturing failed; from then on every step runs eagerly.
  std::string failure;
  int64_t captured_step = -1;  // the optimizer step that was captured
  int64_t replayed_steps = 0;  // steps run as one replay, that one included
};

class Executor {
 public:
  // `comm` may be null only for a world_size 1 plan; `tracer` may be null.
  // Nothing is owned; all must outlive the executor.
  Executor(const Plan& plan, Device* device, Communicator* comm,
           Tracer* tracer = nullptr, ExecutorOptions options = {});

  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Checks the plan against this executor (ops known, ids and events in
  // range, communicator's world size), allocates the arena if the device
  // has none yet (zeroed; upload parameters after this), prepares the
  // device's kernels and resolves every instruction, once.
  absl::Status Prepare();

  // One optimizer step: every micro-step, the all-reduces and the
  // optimizer, then waits for both streams. Returns this rank's sum of the
  // micro-steps' loss_sum (divide the world's sum by global_batch for the
  // mean loss).
  //
  // `next`, when the caller knows it, is the source the next RunStep will
  // be given (its data must not change in between). Where this step is a
  // replay, the next step's batches are fed from it before this step is
  // waited for: the device moves them while this step runs (device.h), and
  // the next replay starts at once. A failure to feed them is left for the
  // next step to meet again, at its own step.
  absl::StatusOr<double> RunStep(const StepState& state, BatchSource& batches,
                                 BatchSource* next = nullptr);

  // Evaluation: runs micro-step 0's load_batch and forward instructions
  // only (no backward, no gradient communication, no optimizer; under
  // ZeRO-3 the forward's parameter all-gathers, a collective every rank
  // runs), then waits for the device. The forward values, the loss
  // operands included, are then in their buffers for the caller to read.
  absl::Status RunForward(BatchSource& batches);

  // ZeRO-1 with zero_gather = next_forward: a step ends with each rank's
  // own shard of the parameters updated and the rest stale until the next
  // step's all-gathers. This runs those all-gathers now if a step ran since
  // the last call (a collective: every rank calls it at the same point),
  // and does nothing otherwise. Call it before anything reads the
  // parameters between steps: evaluation (RunForward), checkpoints.
  absl::Status GatherParameters();

  // Starts (non-null) or stops (null) tracing from the next step.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

  const CaptureInfo& capture() const { return capture_; }
  const StepTimes& step_times() const { return step_times_; }

 private:
  // One instruction resolved by Prepare.
  struct Resolved {
    enum Kind {
      kLoadBatch,
      kCompute,
      kAllReduce,
      kReduceScatter,  // ZeRO
      kAllGather,      // ZeRO
      kHoldForComm
    } kind;
    const Instruction* instr = nullptr;  // null for kHoldForComm
    int micro = -1;
    int hold = -1;  // kHoldForComm: its event, past the plan's own
    bool writes_loss = false;
    // Collectives: slot 0 of the bucket's gradients (the parameter span for
    // all_gather), or a step scalar for an all_reduce without a bucket.
    float* bucket = nullptr;
    int64_t count = 0;        // floats in one slot (in the scalar)
    int64_t shard = 0;        // ZeRO-1: floats of one rank's shard
    // all_gather: this rank's shard (inside `bucket` but for ZeRO-3, whose
    // shard is a buffer of its own and `bucket` the span it gathers into).
    const float* gather_from = nullptr;
    bool forward_gather = false;  // ZeRO-3: an all_gather for a forward pass
    bool per_slot = true;     // deterministic mode: one slot per micro-step
    // ZeRO-2's reduce_scatter: this rank's shard of the sum goes to
    // `shard_out`, copied, or added when `shard_add` (a later micro-step).
    float* shard_out = nullptr;
    bool shard_add = false;
    // reduce_scatter: the floats of the bucket no written gradient covers
    // (alignment gaps, the shards' padding, gradients the loss does not
    // reach) as (offset, count), over every slot. No kernel writes them, a
    // reduce-scatter leaves other ranks' segments undefined, and ZeRO-2's
    // buckets reuse arena memory: zeroed before each one, they cannot
    // carry stale values into the sum or the gradient norm.
    std::vector<std::pair<int64_t, int64_t>> holes;
  };

  // What resolving the program found that sizes Prepare's scratch areas.
  struct ScratchNeeds {
    int64_t max_bucket_bytes = 0;  // the largest bucket a collective reduces
    int64_t max_hole = 0;          // floats: the largest hole a reduce_scatter zeroes
    int64_t max_shard_add = 0;     // floats: ZeRO-2's largest shard added into
  };

  // Prepare's jobs, in order. The plan's own checks stay here (a Plan may
  // reach Prepare without ValidatePlan: built or edited in memory).
  // The device, the communicator's world size, accumulate >= 1.
  absl::Status CheckPrepareArguments() const;
  // Drops a captured step and its state, allocates the arena (once) and
  // lets the device prepare for the plan.
  absl::Status PrepareDevice();
  // Every instruction checked (events, stream, micro-step, its bucket) and
  // resolved, in program order, into `program`; `last_backward[m]`: the
  // index of micro-step m's last backward instruction in it.
  absl::Status ResolveProgram(std::vector<Resolved>& program, std::vector<int>& last_backward,
                              ScratchNeeds& needs) const;
  // An all_reduce, reduce_scatter or all_gather (instruction i, r.instr):
  // its bucket or step scalar, shards and holes. `written`: per buffer,
  // whether an instruction writes it (filled on first need).
  absl::Status ResolveCollective(size_t i, Resolved& r, std::vector<bool>& written,
                                 ScratchNeeds& needs) const;
  // An all_reduce without a bucket: a step scalar (ZeRO-1's grad_sq).
  absl::Status ResolveStepScalar(size_t i, Resolved& r) const;
  // order_: the program, or with overlap off its gradient collectives held
  // until their micro-step's last backward, behind a compute -> comm event.
  void OrderProgram(std::vector<Resolved> program, const std::vector<int>& last_backward);
  // The loss buffer's place, and the device's per-micro-step loss sums.
  absl::Status PrepareLoss();
  // capture_.unavailable: why steps will not be captured, if they will not.
  void NoteCaptureAvailability();
  // The deterministic gather area, ZeRO-2's shard pair, the zeros for holes.
  absl::Status AllocateScratch(const ScratchNeeds& needs);

  // One step, issued instruction by instruction.
  absl::Status IssueStep(BatchSource& batches);
  // Captures this step and replays it; falls back to IssueStep (for this and
  // every later step) if capturing fails.
  absl::Status CaptureStep(BatchSource& batches);
  // Whether `ok_here` holds on every rank: capturing is collective for
  // NCCL (every rank replays, or none does).
  absl::StatusOr<bool> AllRanks(bool ok_here);
  absl::Status ReplayStep(BatchSource& batches);
  // Feeds the next replay's inputs from `next` while this one runs.
  void FeedAhead(BatchSource& next);
  // Device::Replay, then the communicator watches the replay.
  absl::Status ReplayWatched();
  // `wait`: honour the instruction's wait events (false: forward-only
  // work, which issues no collective to record them).
  // Waits for the instruction's events (only those marked in `recorded`
  // when given: evaluation issues part of the step), runs it, records.
  absl::Status Issue(const Resolved& r, BatchSource& batches,
                     std::vector<bool>* recorded = nullptr);
  // ZeRO-2: where a reduce_scatter leaves this rank's shard (r.shard_out).
  absl::Status ResolveShardOutput(const Instruction& instr, const Bucket& bucket,
                                  Resolved& r) const;
  // all_reduce, reduce_scatter, all_gather on the comm stream.
  absl::Status IssueCollective(const Resolved& r);
  // An all_gather's source and destination (r.gather_from, r.bucket).
  absl::Status ResolveGather(const Instruction& instr, const Bucket& bucket,
                             Resolved& r) const;
  // ZeRO-2: this rank's segment of the reduced bucket into its shard.
  absl::Status KeepShard(const Resolved& r);
  // Submit, timed into the tracer when one is set.
  absl::Status SubmitTraced(Stream stream, const Resolved& r,
                            std::function<absl::Status()> work);

  const Plan& plan_;
  Device* const device_;
  Communicator* const comm_;
  Tracer* tracer_;
  const ExecutorOptions options_;

  bool prepared_ = false;
  bool parameters_stale_ = false;  // GatherParameters has work to do
  std::vector<Resolved> order_;  // issue order (see ExecutorOptions::overlap)
  int hold_event_ = -1;          // overlap off: compute -> comm fences from here
  int num_holds_ = 0;            // overlap off: how many
  float* scratch_ = nullptr;     // deterministic gather area
  float* zeros_ = nullptr;       // device: zeros, as many as the largest hole
  float* pair_ = nullptr;        // device: ZeRO-2's shard + addend, 2 x shard
  float* losses_ = nullptr;      // device: loss_sum of each micro-step
  float* vote_ = nullptr;        // device: AllRanks' flag
  std::vector<float> host_losses_;
  float* loss_value_ = nullptr;  // device: the plan's loss buffer
  StepState state_;              // of the step being run

  CaptureInfo capture_;
  StepTimes step_times_;  // of the last RunStep, filled as it runs
  bool captured_ = false;     // the device holds a captured step
  int64_t eager_steps_ = 0;   // warm-up before capturing
  // The device holds the next replay's inputs, fed from this source.
  const BatchSource* fed_ahead_ = nullptr;
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_EXECUTOR_H_
