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
// Deterministic plans: each bucket's `accumulate` gradient slots are
// gathered from every rank into a scratch area, then summed in global
// micro-batch order into slot 0 (Device::OrderedSum). The scratch area is
// extra memory beside the arena: world_size * accumulate * the largest
// bucket's slot bytes, allocated once by Prepare.
#ifndef TRAINC_RUNTIME_EXEC_EXECUTOR_H_
#define TRAINC_RUNTIME_EXEC_EXECUTOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"
#include "runtime/trace/tracer.h"

namespace trainc {

struct ExecutorOptions {
  // true: each bucket's all-reduce starts as soon as the plan says (during
  // the last micro-step's backward). false: every all-reduce waits until
  // the whole backward has run, the no-overlap baseline of the benchmarks.
  // Same numbers either way.
  bool overlap = true;
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
  absl::StatusOr<double> RunStep(const StepState& state, BatchSource& batches);

  // Evaluation: runs micro-step 0's load_batch and forward instructions
  // only (no backward, no communication, no optimizer), then waits for the
  // compute stream. The forward values, the loss operands included, are
  // then in their buffers for the caller to read.
  absl::Status RunForward(BatchSource& batches);

  // Starts (non-null) or stops (null) tracing from the next step.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 private:
  // One instruction resolved by Prepare.
  struct Resolved {
    enum Kind { kLoadBatch, kCompute, kAllReduce, kHoldForComm } kind;
    const Instruction* instr = nullptr;  // null for kHoldForComm
    int micro = -1;
    bool writes_loss = false;
    float* bucket = nullptr;  // all_reduce: slot 0 of the bucket
    int64_t count = 0;        // all_reduce: floats in one slot
  };

  absl::Status RunStepImpl(const StepState& state, BatchSource& batches,
                           double* loss_sum);
  absl::Status Issue(const Resolved& r, BatchSource& batches, double* loss);
  absl::Status IssueAllReduce(const Resolved& r);
  // Submit, timed into the tracer when one is set.
  absl::Status SubmitTraced(Stream stream, const Resolved& r,
                            std::function<absl::Status()> work);

  const Plan& plan_;
  Device* const device_;
  Communicator* const comm_;
  Tracer* tracer_;
  const ExecutorOptions options_;

  bool prepared_ = false;
  std::vector<Resolved> order_;  // issue order (see ExecutorOptions::overlap)
  int hold_event_ = -1;          // overlap off: compute -> comm fence
  float* scratch_ = nullptr;     // deterministic gather area
  StepState state_;              // of the step being run
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_EXEC_EXECUTOR_H_
