#include "runtime/exec/executor.h"

#include <time.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/util/status_macros.h"
#include "runtime/device/kernel_args.h"

namespace trainc {
namespace {

// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID), ns.
int64_t ThreadCpuNs() {
  timespec t;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

// The floats of bucket buffer `grads` (every slot) that no gradient an
// instruction writes covers: (offset, count) ranges, in order. A gradient
// of the bucket lies inside it and lives exactly as long (both whole-run,
// or ZeRO-2's planned together), which tells it from a buffer that reuses
// the same bytes at another time.
std::vector<std::pair<int64_t, int64_t>> Holes(const Plan& plan, const Buffer& grads,
                                               const std::vector<bool>& written) {
  std::vector<std::pair<int64_t, int64_t>> covered;
  for (const Buffer& g : plan.buffers) {
    if (g.kind != BufferKind::kGradient || !written[g.id] || g.offset < grads.offset ||
        g.offset + g.bytes > grads.offset + grads.bytes || g.first_use != grads.first_use ||
        g.last_use != grads.last_use) {
      continue;
    }
    covered.emplace_back((g.offset - grads.offset) / 4, g.bytes / 4);
  }
  std::sort(covered.begin(), covered.end());
  std::vector<std::pair<int64_t, int64_t>> holes;
  int64_t at = 0;
  for (const auto& [begin, count] : covered) {
    if (begin > at) holes.emplace_back(at, begin - at);
    at = std::max(at, begin + count);
  }
  if (at < grads.bytes / 4) holes.emplace_back(at, grads.bytes / 4 - at);
  return holes;
}

// Whether an instruction writes buffer id, per buffer.
std::vector<bool> WrittenBuffers(const Plan& plan) {
  std::vector<bool> written(plan.buffers.size(), false);
  for (const Instruction& in : plan.instructions) {
    for (int id : in.outputs) {
      if (id >= 0 && id < static_cast<int>(written.size())) written[id] = true;
    }
  }
  return written;
}

// Prepare's refusal of instruction `i`, naming it.
absl::Status InstructionError(size_t i, const Instruction& instr, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("instruction ", i, " (", instr.op, " \"", instr.label, "\"): ", why));
}

}  // namespace

Executor::Executor(const Plan& plan, Device* device, Communicator* comm,
                   Tracer* tracer, ExecutorOptions options)
    : plan_(plan),
      device_(device),
      comm_(comm),
      tracer_(tracer),
      options_(options) {}

absl::Status Executor::Prepare() {
  RETURN_IF_ERROR(CheckPrepareArguments());
  RETURN_IF_ERROR(PrepareDevice());
  const int num_buffers = static_cast<int>(plan_.buffers.size());
  if (plan_.loss_buffer < 0 || plan_.loss_buffer >= num_buffers) {
    return absl::InvalidArgumentError("plan has no loss buffer");
  }
  std::vector<Resolved> program;
  // Per micro-step, the index in `program` of its last backward instruction.
  std::vector<int> last_backward(plan_.accumulate, -1);
  ScratchNeeds needs;
  RETURN_IF_ERROR(ResolveProgram(program, last_backward, needs));
  OrderProgram(std::move(program), last_backward);
  RETURN_IF_ERROR(PrepareLoss());
  NoteCaptureAvailability();
  RETURN_IF_ERROR(AllocateScratch(needs));
  if (options_.position != nullptr) options_.position->SetLabels(plan_);
  prepared_ = true;
  return absl::OkStatus();
}

absl::Status Executor::CheckPrepareArguments() const {
  if (device_ == nullptr) return absl::InvalidArgumentError("no device");
  if (comm_ == nullptr && plan_.world_size != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a plan for ", plan_.world_size, " ranks needs a communicator"));
  }
  if (comm_ != nullptr && comm_->world_size() != plan_.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan is for ", plan_.world_size, " ranks, communicator ",
                     comm_->name(), " has ", comm_->world_size()));
  }
  if (plan_.accumulate < 1) {
    return absl::InvalidArgumentError("plan accumulate < 1");
  }
  return absl::OkStatus();
}

absl::Status Executor::PrepareDevice() {
  // A step captured for an earlier Prepare would replay stale instructions.
  RETURN_IF_ERROR(device_->DropCapture());
  captured_ = false;
  fed_ahead_ = nullptr;
  eager_steps_ = 0;
  capture_ = CaptureInfo();
  if (device_->arena() == nullptr) {
    RETURN_IF_ERROR(device_->AllocateArena(plan_.arena_bytes));
  }
  return device_->Prepare(plan_);
}

absl::Status Executor::ResolveProgram(std::vector<Resolved>& program,
                                      std::vector<int>& last_backward,
                                      ScratchNeeds& needs) const {
  std::vector<bool> written;  // per buffer, once a reduce_scatter needs it
  for (size_t i = 0; i < plan_.instructions.size(); ++i) {
    const Instruction& instr = plan_.instructions[i];
    for (const std::vector<int>* events : {&instr.wait_events, &instr.record_events}) {
      for (int e : *events) {
        if (e < 0 || e >= plan_.num_events) {
          return InstructionError(i, instr, "event out of range");
        }
      }
    }
    Resolved r;
    r.instr = &instr;
    r.micro = instr.micro_step;
    const StepOp step_op = StepOpOfInstruction(instr.op);
    if (step_op == StepOp::kLoadBatch) {
      r.kind = Resolved::kLoadBatch;
      if (instr.micro_step < 0 || instr.micro_step >= plan_.accumulate) {
        return InstructionError(i, instr, "load_batch without a micro-step");
      }
      if (instr.stream != Stream::kCompute) return InstructionError(i, instr, "not on compute");
    } else if (IsCollectiveOp(step_op)) {
      RETURN_IF_ERROR(ResolveCollective(i, r, written, needs));
    } else if (IsKernelOp(instr.op)) {
      r.kind = Resolved::kCompute;
      if (instr.stream != Stream::kCompute) return InstructionError(i, instr, "not on compute");
      if (instr.phase == Phase::kBackward && instr.micro_step >= 0) {
        last_backward[instr.micro_step] = static_cast<int>(program.size());
      }
      r.writes_loss = std::find(instr.outputs.begin(), instr.outputs.end(),
                                plan_.loss_buffer) != instr.outputs.end();
    } else {
      return InstructionError(i, instr, "unknown op");
    }
    program.push_back(r);
  }
  return absl::OkStatus();
}

absl::Status Executor::ResolveStepScalar(size_t i, Resolved& r) const {
  const Instruction& instr = *r.instr;
  if (instr.inputs.size() != 1 || instr.inputs[0] < 0 ||
      instr.inputs[0] >= static_cast<int>(plan_.buffers.size())) {
    return InstructionError(i, instr, "all_reduce without a bucket needs one input buffer");
  }
  const Buffer& b = plan_.buffers[instr.inputs[0]];
  if (b.dtype != DType::kF32 || b.offset < 0 || b.offset + b.bytes > plan_.arena_bytes) {
    return InstructionError(i, instr, "its buffer is not f32 inside the arena");
  }
  r.bucket = reinterpret_cast<float*>(device_->arena() + b.offset);
  r.count = b.bytes / 4;
  r.per_slot = false;
  return absl::OkStatus();
}

absl::Status Executor::ResolveCollective(size_t i, Resolved& r, std::vector<bool>& written,
                                         ScratchNeeds& needs) const {
  const Instruction& instr = *r.instr;
  const int num_buffers = static_cast<int>(plan_.buffers.size());
  const StepOp op = StepOpOfInstruction(instr.op);
  r.kind = op == StepOp::kAllReduce       ? Resolved::kAllReduce
           : op == StepOp::kReduceScatter ? Resolved::kReduceScatter
                                          : Resolved::kAllGather;
  if (instr.stream != Stream::kComm) return InstructionError(i, instr, "not on the comm stream");
  auto it = instr.attrs.find("bucket");
  if (it == instr.attrs.end() && r.kind == Resolved::kAllReduce) {
    // A step scalar (ZeRO-1's grad_sq): one slot of its own size.
    return ResolveStepScalar(i, r);
  }
  const int b = it == instr.attrs.end() ? -1 : static_cast<int>(it->second);
  if (b < 0 || b >= static_cast<int>(plan_.buckets.size())) {
    return InstructionError(i, instr, "attr bucket out of range");
  }
  const Bucket& bucket = plan_.buckets[b];
  if (bucket.grad_buffer < 0 || bucket.grad_buffer >= num_buffers ||
      bucket.param_span < 0 || bucket.param_span >= num_buffers) {
    return InstructionError(i, instr, "bucket without a gradient buffer or parameter span");
  }
  // The instruction's own: ZeRO-2 may give each micro-step a bucket.
  const int grads_id = r.kind == Resolved::kAllGather || instr.inputs.size() != 1
                           ? bucket.grad_buffer
                           : instr.inputs[0];
  if (grads_id < 0 || grads_id >= num_buffers ||
      plan_.buffers[grads_id].kind != BufferKind::kBucket) {
    return InstructionError(i, instr, "its input is not a bucket's gradients");
  }
  const Buffer& grads = plan_.buffers[grads_id];
  const int64_t slots = plan_.deterministic ? plan_.accumulate : 1;
  if (bucket.bytes % 4 != 0 || grads.offset + slots * bucket.bytes > plan_.arena_bytes) {
    return InstructionError(i, instr, "bucket slots do not fit the arena");
  }
  if (r.kind != Resolved::kAllReduce &&
      (bucket.shard_elems <= 0 || bucket.shard_elems * 4 * plan_.world_size != bucket.bytes)) {
    return InstructionError(i, instr, "the bucket is not in world_size shards");
  }
  const Buffer& target =
      r.kind == Resolved::kAllGather ? plan_.buffers[bucket.param_span] : grads;
  r.bucket = reinterpret_cast<float*>(device_->arena() + target.offset);
  r.count = bucket.bytes / 4;
  r.shard = bucket.shard_elems;
  if (r.kind == Resolved::kAllGather) RETURN_IF_ERROR(ResolveGather(instr, bucket, r));
  if (r.kind == Resolved::kReduceScatter) {
    if (written.empty()) written = WrittenBuffers(plan_);
    r.holes = Holes(plan_, grads, written);
    for (const auto& [offset, count] : r.holes) needs.max_hole = std::max(needs.max_hole, count);
    RETURN_IF_ERROR(ResolveShardOutput(instr, bucket, r));
    if (r.shard_add) needs.max_shard_add = std::max(needs.max_shard_add, r.shard);
  }
  if (r.kind != Resolved::kAllGather) {
    needs.max_bucket_bytes = std::max(needs.max_bucket_bytes, bucket.bytes);
  }
  return absl::OkStatus();
}

void Executor::OrderProgram(std::vector<Resolved> program,
                            const std::vector<int>& last_backward) {
  order_.clear();
  hold_event_ = plan_.num_events;  // past the plan's own: + Resolved::hold
  num_holds_ = 0;
  if (options_.overlap) {
    order_ = std::move(program);
    return;
  }
  // ZeRO-2 ends a bucket's life at a compute instruction that waits for
  // its scatter: held collectives are released before such a waiter.
  std::vector<Resolved> held;
  std::vector<int> held_events;
  auto release = [&] {
    if (held.empty()) return;
    Resolved hold;
    hold.kind = Resolved::kHoldForComm;
    hold.hold = num_holds_++;
    order_.push_back(hold);
    order_.insert(order_.end(), held.begin(), held.end());
    held.clear();
    held_events.clear();
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const bool gradients = program[i].kind == Resolved::kAllReduce ||
                           program[i].kind == Resolved::kReduceScatter;
    const int micro = program[i].micro;
    const int end = micro >= 0 ? last_backward[micro] : -1;
    for (int e : program[i].instr->wait_events) {
      if (std::count(held_events.begin(), held_events.end(), e)) release();
    }
    if (gradients && static_cast<int>(i) < end) {
      held.push_back(program[i]);
      const std::vector<int>& recorded = program[i].instr->record_events;
      held_events.insert(held_events.end(), recorded.begin(), recorded.end());
    } else {
      order_.push_back(program[i]);
    }
    if (micro >= 0 && static_cast<int>(i) == end) release();
  }
}

absl::Status Executor::PrepareLoss() {
  const Buffer& loss = plan_.buffers[plan_.loss_buffer];
  if (loss.offset < 0 || loss.offset + 4 > plan_.arena_bytes) {
    return absl::InvalidArgumentError("plan's loss buffer is outside the arena");
  }
  loss_value_ = reinterpret_cast<float*>(device_->arena() + loss.offset);
  ASSIGN_OR_RETURN(char* losses, device_->AllocateScratch(
                                     (plan_.accumulate + 1) * sizeof(float)));
  losses_ = reinterpret_cast<float*>(losses);
  vote_ = losses_ + plan_.accumulate;
  host_losses_.assign(plan_.accumulate, 0.0f);
  return absl::OkStatus();
}

void Executor::NoteCaptureAvailability() {
  if (!options_.capture) {
    capture_.unavailable = "step capture is off";
  } else if (!device_->SupportsCapture()) {
    capture_.unavailable =
        absl::StrCat("the ", device_->name(), " device has no step capture");
  } else if (plan_.world_size > 1 && !comm_->SupportsCapture()) {
    capture_.unavailable = absl::StrCat(
        "the ", comm_->name(), " communicator's collectives cannot be captured");
  }
}

absl::Status Executor::AllocateScratch(const ScratchNeeds& needs) {
  if (plan_.deterministic && plan_.world_size > 1 && needs.max_bucket_bytes > 0) {
    ASSIGN_OR_RETURN(char* scratch,
                     device_->AllocateScratch(plan_.world_size *
                                              plan_.accumulate *
                                              needs.max_bucket_bytes));
    scratch_ = reinterpret_cast<float*>(scratch);
  }
  if (needs.max_shard_add > 0) {
    ASSIGN_OR_RETURN(char* pair, device_->AllocateScratch(2 * needs.max_shard_add * 4));
    pair_ = reinterpret_cast<float*>(pair);
  }
  if (needs.max_hole > 0) {
    ASSIGN_OR_RETURN(char* zeros, device_->AllocateScratch(needs.max_hole * 4));
    const std::vector<float> host(needs.max_hole, 0.0f);
    RETURN_IF_ERROR(device_->CopyFromHost(host.data(), zeros, needs.max_hole * 4));
    RETURN_IF_ERROR(device_->Synchronize());
    zeros_ = reinterpret_cast<float*>(zeros);
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Executor::RunStep(const StepState& state,
                                         BatchSource& batches, BatchSource* next) {
  if (!prepared_) {
    return absl::FailedPreconditionError("Executor::RunStep before Prepare");
  }
  state_ = state;
  state_.rank = comm_ != nullptr ? comm_->rank() : 0;
  state_.training = true;
  step_times_ = {};
  const int64_t step_begin = TraceClockNs();
  const int64_t cpu_begin = ThreadCpuNs();
  // One eager step first: libraries settle their lazy set-up (cuBLAS
  // heuristics, NCCL connections) outside the capture.
  constexpr int64_t kWarmupSteps = 1;
  const bool eager = tracer_ != nullptr || !capture_.unavailable.empty() ||
                     !capture_.failure.empty() || eager_steps_ < kWarmupSteps;
  absl::Status status;
  if (eager || !captured_) fed_ahead_ = nullptr;  // inputs held, if any, unread
  if (eager) {
    status = IssueStep(batches);
    ++eager_steps_;
  } else if (captured_) {
    status = ReplayStep(batches);
    if (!status.ok()) {
      // Leave the device eager (its replay-input window closed) for
      // whatever the caller does next.
      (void)device_->DropCapture();
      captured_ = false;
      capture_.failure = std::string(status.message());
    }
  } else {
    status = CaptureStep(batches);
  }
  // The next step will be a replay: its batches move while this one runs.
  if (status.ok() && captured_ && next != nullptr && tracer_ == nullptr) FeedAhead(*next);
  // Whatever happened, nothing of this step may still be running when we
  // return: queued comm work points into the arena and at `batches`.
  const int64_t sync_begin = TraceClockNs();
  absl::Status sync = device_->Synchronize();
  const int64_t step_end = TraceClockNs();
  step_times_.waiting_ns += step_end - sync_begin;
  step_times_.total_ns = step_end - step_begin;
  step_times_.compute_cpu_ns += ThreadCpuNs() - cpu_begin;
  parameters_stale_ = plan_.zero > 0 && plan_.zero_gather == ZeroGather::kNextForward;
  if (!status.ok()) return status;
  if (!sync.ok()) return sync;
  // An aborted communicator (a replayed collective past its bound) lets
  // the stuck kernels return with garbage: the step is not a step.
  if (comm_ != nullptr) RETURN_IF_ERROR(comm_->Health());
  RETURN_IF_ERROR(device_->CopyToHost(losses_, host_losses_.data(),
                                      plan_.accumulate * sizeof(float)));
  double loss_sum = 0.0;
  for (float loss : host_losses_) loss_sum += loss;
  return loss_sum;
}

absl::Status Executor::RunForward(BatchSource& batches) {
  if (!prepared_) {
    return absl::FailedPreconditionError("Executor::RunForward before Prepare");
  }
  Tracer* const tracer = tracer_;
  tracer_ = nullptr;  // evaluation is not part of the traced steps
  state_.training = false;  // dropout is the identity
  absl::Status status = device_->ResetEvents(plan_.num_events + num_holds_);
  // Only the events this pass records are waited for.
  std::vector<bool> recorded(plan_.num_events + num_holds_, false);
  for (const Resolved& r : order_) {
    if (!status.ok()) break;
    if (r.micro != 0) continue;
    const bool forward =
        r.kind == Resolved::kLoadBatch || r.forward_gather ||
        (r.kind == Resolved::kCompute && r.instr->phase == Phase::kForward);
    if (forward) status = Issue(r, batches, &recorded);
  }
  tracer_ = tracer;
  state_.training = true;
  absl::Status sync = device_->Synchronize();
  return status.ok() ? sync : status;
}

absl::Status Executor::GatherParameters() {
  if (!prepared_) {
    return absl::FailedPreconditionError("Executor::GatherParameters before Prepare");
  }
  if (!parameters_stale_) return absl::OkStatus();
  absl::Status status = device_->ResetEvents(plan_.num_events + num_holds_);
  for (const Resolved& r : order_) {
    if (status.ok() && r.kind == Resolved::kAllGather) status = IssueCollective(r);
  }
  absl::Status sync = device_->Synchronize();
  if (!status.ok()) return status;
  RETURN_IF_ERROR(sync);
  parameters_stale_ = false;
  return absl::OkStatus();
}

absl::Status Executor::IssueStep(BatchSource& batches) {
  RETURN_IF_ERROR(device_->ResetEvents(plan_.num_events + num_holds_));
  for (const Resolved& r : order_) {
    RETURN_IF_ERROR(Issue(r, batches));
  }
  return absl::OkStatus();
}

absl::Status Executor::CaptureStep(BatchSource& batches) {
  absl::Status status = device_->BeginCapture();
  if (status.ok()) status = IssueStep(batches);
  if (status.ok()) status = device_->EndCapture();
  if (!status.ok()) {
    capture_.failure = std::string(status.message());
    RETURN_IF_ERROR(device_->DropCapture());
  }
  ASSIGN_OR_RETURN(const bool everywhere, AllRanks(status.ok()));
  if (everywhere) {
    captured_ = true;
    capture_.captured_step = state_.step;
    ++capture_.replayed_steps;
    // The captured step has not run yet: this replay runs it.
    return ReplayWatched();
  }
  if (status.ok()) {
    capture_.failure = "another rank could not capture its step";
    RETURN_IF_ERROR(device_->DropCapture());
  }
  // Nothing of a failed capture ran, so the step is issued again, eagerly
  // (BatchSource::Fill serves the same data again for the same step).
  ++eager_steps_;
  return IssueStep(batches);
}

absl::StatusOr<bool> Executor::AllRanks(bool ok_here) {
  if (plan_.world_size == 1) return ok_here;
  float failed = ok_here ? 0.0f : 1.0f;
  RETURN_IF_ERROR(device_->CopyFromHost(&failed, vote_, sizeof(float)));
  RETURN_IF_ERROR(device_->Synchronize());  // the comm stream reads it
  RETURN_IF_ERROR(device_->Submit(Stream::kComm, [this] {
    return comm_->AllReduceSum(vote_, 1, device_->NativeStream(Stream::kComm));
  }));
  RETURN_IF_ERROR(device_->Synchronize());
  RETURN_IF_ERROR(device_->CopyToHost(vote_, &failed, sizeof(float)));
  return failed == 0.0f;
}

absl::Status Executor::ReplayStep(BatchSource& batches) {
  // The captured step's uploads are exactly its load_batch instructions'
  // Fill calls, in program order: fed during the last step from this very
  // source, or now.
  const bool fed = fed_ahead_ == &batches;
  fed_ahead_ = nullptr;
  if (!fed) {
    RETURN_IF_ERROR(device_->BeginReplayInputs());
    for (const Resolved& r : order_) {
      if (r.kind == Resolved::kLoadBatch) {
        RETURN_IF_ERROR(batches.Fill(r.micro, plan_, *device_));
      }
    }
  }
  ++capture_.replayed_steps;
  return ReplayWatched();
}

void Executor::FeedAhead(BatchSource& next) {
  absl::Status status = device_->BeginReplayInputs();
  for (const Resolved& r : order_) {
    if (status.ok() && r.kind == Resolved::kLoadBatch) {
      status = next.Fill(r.micro, plan_, *device_);
    }
  }
  // Closed whatever happened: evaluation's uploads go to the arena.
  const absl::Status closed = device_->EndReplayInputs();
  fed_ahead_ = status.ok() && closed.ok() ? &next : nullptr;
}

absl::Status Executor::ReplayWatched() {
  RETURN_IF_ERROR(device_->Replay(state_));
  // The graph's collectives have no host call for the communicator to
  // watch: it watches the whole replay instead.
  if (comm_ != nullptr) {
    RETURN_IF_ERROR(comm_->WatchStream(device_->NativeStream(Stream::kCompute)));
  }
  return absl::OkStatus();
}

absl::Status Executor::SubmitTraced(Stream stream, const Resolved& r,
                                    std::function<absl::Status()> work) {
  if (PositionBoard* board = options_.position; board != nullptr && stream == Stream::kComm) {
    // A collective is a few per step: wrapping it costs one allocation.
    work = [board, id = r.instr->id, inner = std::move(work)] {
      board->CommBegin(id);
      absl::Status status = inner();
      board->CommEnd();
      return status;
    };
  }
  Tracer* tracer = tracer_;
  if (tracer == nullptr) return device_->Submit(stream, std::move(work));
  const TraceSpan base{r.instr->id, state_.step, r.micro, stream, 0, 0};
  return device_->SubmitTimed(
      stream, std::move(work), [tracer, base](int64_t begin, int64_t end) {
        TraceSpan span = base;
        span.begin_ns = begin;
        span.end_ns = end;
        tracer->Add(span);
      });
}

absl::Status Executor::Issue(const Resolved& r, BatchSource& batches,
                             std::vector<bool>* recorded) {
  if (r.kind == Resolved::kHoldForComm) {
    RETURN_IF_ERROR(device_->RecordEvent(Stream::kCompute, hold_event_ + r.hold));
    return device_->WaitEvent(Stream::kComm, hold_event_ + r.hold);
  }
  const Instruction& instr = *r.instr;
  for (int e : instr.wait_events) {
    if (recorded == nullptr || (*recorded)[e]) {
      const int64_t begin = instr.stream == Stream::kCompute ? TraceClockNs() : 0;
      RETURN_IF_ERROR(device_->WaitEvent(instr.stream, e));
      if (begin != 0) step_times_.waiting_ns += TraceClockNs() - begin;
    }
  }
  if (options_.position != nullptr && instr.stream == Stream::kCompute) {
    options_.position->Compute(state_.step, instr.id);
  }
  switch (r.kind) {
    case Resolved::kLoadBatch: {
      const int64_t begin = TraceClockNs();
      const int64_t cpu = ThreadCpuNs();
      RETURN_IF_ERROR(batches.Fill(r.micro, plan_, *device_));
      step_times_.compute_cpu_ns -= ThreadCpuNs() - cpu;  // the data's, not the compute's
      const int64_t end = TraceClockNs();
      step_times_.data_ns += end - begin;
      if (tracer_ != nullptr) {
        tracer_->Add({instr.id, state_.step, r.micro, Stream::kCompute, begin, end});
      }
      break;
    }
    case Resolved::kCompute:
      // Two pointers: fits std::function's inline storage, so no heap
      // allocation per instruction.
      RETURN_IF_ERROR(SubmitTraced(Stream::kCompute, r, [this, &r] {
        return device_->RunKernel(plan_, *r.instr, state_);
      }));
      break;
    case Resolved::kAllReduce:
    case Resolved::kReduceScatter:
    case Resolved::kAllGather:
      RETURN_IF_ERROR(IssueCollective(r));
      break;
    case Resolved::kHoldForComm:
      break;
  }
  for (int e : instr.record_events) {
    RETURN_IF_ERROR(device_->RecordEvent(instr.stream, e));
    if (recorded != nullptr) (*recorded)[e] = true;
  }
  if (r.writes_loss) {
    RETURN_IF_ERROR(device_->Copy(Stream::kCompute, loss_value_,
                                  losses_ + r.micro, sizeof(float)));
  }
  return absl::OkStatus();
}

absl::Status Executor::ResolveShardOutput(const Instruction& instr, const Bucket& bucket,
                                          Resolved& r) const {
  if (instr.outputs.size() != 1 || instr.outputs[0] == instr.inputs[0]) return absl::OkStatus();
  const int id = instr.outputs[0];
  if (id != bucket.grad_shard || id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "instruction ", instr.id, " (", instr.label,
        "): a reduce_scatter writes its bucket or the bucket's gradient shard"));
  }
  const Buffer& shard = plan_.buffers[id];
  if (shard.bytes != bucket.shard_elems * 4 || shard.offset + shard.bytes > plan_.arena_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "instruction ", instr.id, " (", instr.label, "): gradient shard of the wrong size"));
  }
  r.shard_out = reinterpret_cast<float*>(device_->arena() + shard.offset);
  auto it = instr.attrs.find("accumulate");
  r.shard_add = it != instr.attrs.end() && it->second != 0;
  return absl::OkStatus();
}

// An all_gather: the bucket's parameter span in place (ZeRO-1, 2: the
// rank's shard is inside it), or under ZeRO-3 the bucket's parameter shard
// into a parameter span of the bucket's size.
absl::Status Executor::ResolveGather(const Instruction& instr, const Bucket& bucket,
                                     Resolved& r) const {
  const int64_t rank = comm_ != nullptr ? comm_->rank() : 0;
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("instruction ", instr.id, " (", instr.label, "): ", why));
  };
  if (instr.inputs.size() != 1 || instr.outputs.size() != 1) {
    return fail("an all_gather has one input and one output");
  }
  if (instr.inputs[0] == instr.outputs[0]) {
    if (instr.inputs[0] != bucket.param_span) return fail("gathers another bucket's span");
    r.gather_from = r.bucket + rank * r.shard;
    return absl::OkStatus();
  }
  // ZeRO-3: the shard, or under bf16 its bf16 cast, into a span of the
  // same type (bf16 moves as raw 4-byte words: a gather adds nothing).
  const Buffer& shard = plan_.buffers[instr.inputs[0]];
  const Buffer& span = plan_.buffers[instr.outputs[0]];
  const bool bf16 = shard.dtype == DType::kBF16;
  if ((instr.inputs[0] != bucket.param_shard || bucket.param_shard < 0) &&
      !(bf16 && shard.kind == BufferKind::kParameterCopy)) {
    return fail("gathers neither its bucket's span nor its parameter shard");
  }
  const int64_t width = DTypeBytes(shard.dtype);
  if (shard.bytes != bucket.shard_elems * width || span.dtype != shard.dtype ||
      span.bytes != bucket.bytes / 4 * width || span.kind != BufferKind::kParameterSpan ||
      span.offset + span.bytes > plan_.arena_bytes ||
      shard.offset + shard.bytes > plan_.arena_bytes) {
    return fail("its parameter shard or span does not match the bucket");
  }
  r.gather_from = reinterpret_cast<const float*>(device_->arena() + shard.offset);
  r.bucket = reinterpret_cast<float*>(device_->arena() + span.offset);
  r.shard = bucket.shard_elems * width / 4;
  auto it = instr.attrs.find("backward");
  r.forward_gather = it != instr.attrs.end() && it->second == 0;
  return absl::OkStatus();
}

// The shard is added as the backward adds a gradient (shard + segment, in
// that order), through a scratch pair so that OrderedSum sees contiguous
// operands.
absl::Status Executor::KeepShard(const Resolved& r) {
  const int64_t rank = comm_ != nullptr ? comm_->rank() : 0;
  const float* segment = r.bucket + rank * r.shard;
  const int64_t bytes = r.shard * 4;
  if (!r.shard_add) return device_->Copy(Stream::kComm, segment, r.shard_out, bytes);
  RETURN_IF_ERROR(device_->Copy(Stream::kComm, r.shard_out, pair_, bytes));
  RETURN_IF_ERROR(device_->Copy(Stream::kComm, segment, pair_ + r.shard, bytes));
  return device_->OrderedSum(Stream::kComm, pair_, 2, r.shard, r.shard_out);
}

absl::Status Executor::IssueCollective(const Resolved& r) {
  const int64_t world = plan_.world_size;
  void* stream = device_->NativeStream(Stream::kComm);
  for (const auto& [offset, count] : r.holes) {
    RETURN_IF_ERROR(device_->Copy(Stream::kComm, zeros_, r.bucket + offset, count * 4));
  }
  if (r.kind == Resolved::kAllGather) {
    return SubmitTraced(Stream::kComm, r, [this, &r, stream] {
      return comm_->AllGather(r.gather_from, r.bucket, r.shard, stream);
    });
  }
  if (!plan_.deterministic) {
    if (world == 1) return absl::OkStatus();  // a sum over one rank
    // grad_comm = bf16: gradients travel as bf16 (a step scalar stays fp32).
    const bool bf16 = plan_.grad_comm == GradComm::kBf16 && r.per_slot;
    if (r.kind == Resolved::kReduceScatter) {
      RETURN_IF_ERROR(SubmitTraced(Stream::kComm, r, [this, &r, stream, bf16] {
        return bf16 ? comm_->ReduceScatterSumBf16(r.bucket, r.shard, stream)
                    : comm_->ReduceScatterSum(r.bucket, r.shard, stream);
      }));
      return r.shard_out != nullptr ? KeepShard(r) : absl::OkStatus();
    }
    return SubmitTraced(Stream::kComm, r, [this, &r, stream, bf16] {
      return bf16 ? comm_->AllReduceSumBf16(r.bucket, r.count, stream)
                  : comm_->AllReduceSum(r.bucket, r.count, stream);
    });
  }
  // Deterministic: the world's slots gathered and added in global order,
  // for a reduce-scatter too (each rank then uses its shard of the sum), so
  // ZeRO-1 gives the bits of zero = 0.
  const int64_t slots = r.per_slot ? plan_.accumulate : 1;
  if (world == 1) {
    // Slot 0 may be OrderedSum's destination and first operand at once.
    if (slots == 1) return absl::OkStatus();
    return SubmitTraced(Stream::kComm, r, [this, &r, slots] {
      return device_->OrderedSum(Stream::kComm, r.bucket, slots, r.count,
                                 r.bucket);
    });
  }
  // Rank q's slots land at scratch + q * slots * count, so the scratch holds
  // the world's micro-batches in global order.
  RETURN_IF_ERROR(SubmitTraced(Stream::kComm, r, [this, &r, slots, world, stream] {
    RETURN_IF_ERROR(comm_->AllGather(r.bucket, scratch_, slots * r.count, stream));
    return device_->OrderedSum(Stream::kComm, scratch_, world * slots,
                               r.count, r.bucket);
  }));
  return r.shard_out != nullptr ? KeepShard(r) : absl::OkStatus();
}

}  // namespace trainc
