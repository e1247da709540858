#include "runtime/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/exec/executor.h"
#include "runtime/launch/heartbeat.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/position/position.h"
#include "runtime/trace/plan_identity.h"
#include "runtime/trace/tracer.h"
#include "runtime/train/divergence.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/handshake.h"
#include "runtime/train/heartbeat_pulse.h"
#include "runtime/train/overlap.h"
#include "runtime/train/rank_devices.h"
#include "runtime/train/rank_positions.h"
#include "runtime/train/run_checkpoints.h"
#include "runtime/train/run_data.h"
#include "runtime/train/run_log.h"
#include "runtime/train/run_metrics.h"
#include "runtime/train/schedule.h"
#include "runtime/train/starting_point.h"
#include "runtime/train/stop_signals.h"
#include "runtime/train/stragglers.h"
#include "runtime/train/trace_files.h"
#include "runtime/train/watchdog.h"

namespace trainc {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// The process's resident set (/proc/self/statm's second field, in pages),
// or 0 where there is none.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// Ranks agree to stop this often (in steps): one 4-byte sum over ranks.
constexpr int64_t kStopCheckSteps = 10;

// Sums `values` over every rank (host memory, through Gloo).
absl::Status SumOverRanks(Communicator& comm, std::vector<float>* values) {
  if (comm.world_size() == 1) return absl::OkStatus();
  return comm.AllReduceSum(values->data(), static_cast<int64_t>(values->size()),
                           nullptr);
}

// Where one optimizer step sits in the run, and what it measured, for the
// phases that follow it in the same step.
struct StepInfo {
  int64_t number = 0;    // the global step, from 1
  int64_t epoch = 0;     // from 0
  int64_t in_epoch = 0;  // the step's place in its epoch, from 0
  bool epoch_end = false;
  bool last = false;     // the run's last step
  // A progress line follows: every log_every steps, at an epoch's end and
  // at the last step. The loss sum is a collective, so whether to log must
  // be the same decision on every rank: only `tty` (rank 0's terminal)
  // differs, and it only redraws the live line, with no communication.
  bool progress_line = false;
  bool traced = false;   // one of the steps the tracer records
  std::chrono::steady_clock::time_point start;
  double lr = 0;
  // With clipping or skip_nonfinite, the step's global gradient norm (the
  // same on every rank: it is computed from the reduced gradient).
  double grad_norm = NAN;
};

// A few steps are traced (after the first, which warms caches) to measure
// overlap; all of them go to --trace when asked, and to a stop trace when
// the run stops.
struct StepTracing {
  std::optional<Tracer> tracer;
  // The plan that ran, as the trace and the metrics log record it; set
  // before either is written.
  PlanIdentity identity;
  int64_t begin = 1;  // the traced steps: [begin, end)
  int64_t end = 1;
  absl::Mutex stop_mu;
  bool stop_written ABSL_GUARDED_BY(stop_mu) = false;
};

// The steps since the last sum over ranks: each one's local loss sum (one
// all-reduce for all of them), whether skip_nonfinite left it out, and on
// rank 0 with metrics its record, whose loss the sum fills in.
struct PendingSteps {
  std::vector<float> losses;
  std::vector<bool> skipped;
  std::vector<MetricsRecord> metrics;
};

// One rank's training run, TrainRank's work, in phases: set-up (device and
// communicators, data, weights, then the run's logs), the steps, each
// followed by its evaluation, checkpoint and stop check when due, and the
// summary. The members are what the phases share, declared in the order
// set-up makes them so that they are released in reverse (the heartbeat
// thread joined first, the communicators closed last). A Trainer runs once.
class Trainer {
 public:
  Trainer(const Plan& plan, const RankContext& rank, const TrainOptions& options,
          std::ostream& log_stream)
      : plan_(plan),
        rank_(rank),
        options_(options),
        log_(rank.rank == 0 ? log_stream : discard_) {}
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole run; the first error ends it (see TrainRank).
  absl::StatusOr<TrainSummary> Run();

 private:
  // --- Set-up, in this order.
  // The device and communicators (rank_devices.h), this rank's position
  // board (rank_positions.h), and the executor over them, prepared.
  absl::Status SetUpDevice();
  // The weights (starting_point.h), checked against the run's length;
  // then the periodic checkpoints' folder.
  absl::Status SetUpWeights();
  // With more than one rank: the plan handshake (handshake.h).
  absl::Status Handshake();
  // Once the stop handlers are in: the header lines, the metrics log, the
  // tracer, the heartbeat and the step loop's clocks.
  absl::Status StartRun();
  // The metrics log (rank 0) and its first record. Whether there is one is
  // the same on every rank (one command line), and so is the schedule of
  // loss sums it adds.
  absl::Status OpenMetricsLog();
  // The heartbeat's pulse and --watchdog.
  void StartWatchers();

  // --- Step.
  // One optimizer step, then each phase that is due after it.
  absl::Status TrainStep(int64_t step_number);
  // Where step `step_number` sits; sets the data position, the tracer and
  // the learning rate for it.
  StepInfo BeginStep(int64_t step_number);
  // The step itself through the executor; keeps its local loss sum and,
  // with clipping or skip_nonfinite, reads its gradient norm (a non-finite
  // one is left out or stops the run: divergence.h).
  absl::Status RunOptimizerStep(StepInfo& step);
  // Rank 0 with metrics: the step's record, its loss filled in at the next
  // sum over ranks.
  void RecordStepMetrics(const StepInfo& step);
  // With --trace and a rendezvous folder, at the end of the traced steps:
  // this rank's events there, for a stop trace another rank may write.
  void KeepTracePart();
  // Once per run: a step that could not be captured as a CUDA graph.
  void ReportCaptureFailure(int64_t step);
  // At a progress line, and with metrics at least every metrics_every
  // steps: the world's loss sums of the steps since the last such sum (one
  // all-reduce for all of them), checked (divergence.h), and the pending
  // records written.
  absl::Status SumLossesIfDue(const StepInfo& step);
  // After each step: its times (runtime/exec's StepTimes), for the next
  // sum over ranks.
  void KeepStepTimes(const StepInfo& step);
  // At each sum over ranks, with every rank's times since the last: a rank
  // newly found slower than the others (stragglers.h) is named in the log
  // and the metrics log.
  void NameStragglers(const StepInfo& step, const std::vector<RankStepTimes>& per_rank);
  // The progress line, or on rank 0's terminal the live line between them.
  void LogProgress(const StepInfo& step);

  // --- Evaluation (the parameters gathered): the eval set scored, logged
  // and recorded.
  absl::Status EvaluateAt(const StepInfo& step);
  double EvalBitsPerByte() const;

  // --- Stop.
  // A stop signal (preemption, Ctrl-C) reaches the ranks at different
  // steps: they agree at the next check (one small sum over ranks, which
  // also tells every rank which signal) and stop together at that step
  // boundary, with one checkpoint. OK when no rank was asked to stop;
  // CANCELLED, saying where the checkpoint is, when the run stops here.
  absl::Status StopIfAsked(const TrainingState& now);
  // A run that stops on an error leaves, in the metrics log, where this
  // rank was (tools/viz and people read it after the fact).
  void RecordStop(const absl::Status& why, int64_t step);
  // --trace when the run stops (trace_files.h): once, from whichever
  // thread comes first.
  void WriteStopTrace(const std::string& why);

  // --- Summary, after the last step.
  // The summary's numbers, its metrics record, the trace, the --save
  // checkpoint and the printed summary; then the ranks leave together.
  absl::StatusOr<TrainSummary> Finish();
  void FillSummary();
  void RecordSummaryMetrics();

  const Plan& plan_;
  const RankContext& rank_;
  const TrainOptions& options_;
  std::ostringstream discard_;  // the log of ranks other than 0
  std::ostream& log_;

  // Set up by SetUpDevice.
  RankDevices devices_;
  RankPositions positions_;
  std::unique_ptr<Executor> executor_;
  // Set up by RunData::Load.
  RunData data_;
  // Set up by SetUpWeights.
  StartingPoint start_;

  // Installed by Run once set-up is done.
  std::optional<StopSignalScope> stop_signals_;

  // Set up by StartRun.
  bool metrics_on_ = false;             // on every rank alike
  std::unique_ptr<MetricsLog> metrics_;  // rank 0's, when metrics_on_
  StepTracing tracing_;
  int64_t first_step_ = 1;
  std::optional<HeartbeatPulse> pulse_;
  std::optional<StepWatchdog> watchdog_;  // --watchdog
  ProgressWindow progress_;
  // Per-step losses reach the metrics log at least this often (in steps)
  // even when progress lines are rarer.
  int64_t metrics_every_ = 1;
  const Buffer* grad_sq_ = nullptr;  // clipping or skip_nonfinite
  std::chrono::steady_clock::time_point run_start_;

  // Kept by the steps.
  TrainSummary summary_;
  EvalResult last_eval_;
  PendingSteps pending_;
  NonFiniteSteps nonfinite_;
  double last_loss_ = NAN;        // the world's mean, at the last sum
  double last_grad_norm_ = -1;    // at the last progress line
  bool capture_failure_reported_ = false;
  // This rank's step times since the last sum over ranks (which carries
  // them to every rank), and the ranks named slower than the others.
  std::vector<RankStepTimes> own_times_;
  StragglerWatch stragglers_{static_cast<int>(plan_.world_size)};
};

absl::StatusOr<TrainSummary> Trainer::Run() {
  RETURN_IF_ERROR(SetUpDevice());
  RETURN_IF_ERROR(data_.Load(plan_, rank_, options_, log_));
  RETURN_IF_ERROR(SetUpWeights());
  RETURN_IF_ERROR(Handshake());
  stop_signals_.emplace();
  RETURN_IF_ERROR(StartRun());
  for (int64_t step = first_step_; step <= data_.total_steps; ++step) {
    if (absl::Status s = TrainStep(step); !s.ok()) {
      RecordStop(s, step);
      WriteStopTrace(std::string(s.message()));
      if (!positions_.Shared()) return s;
      return absl::Status(s.code(), absl::StrCat(s.message(), "\n", positions_.Where()));
    }
  }
  positions_.board().Stage(RankStage::kDone, data_.total_steps);
  return Finish();
}

// --- Set-up.

absl::Status Trainer::SetUpDevice() {
  RETURN_IF_ERROR(CreateRankDevices(plan_, rank_, options_, log_, &devices_));
  RETURN_IF_ERROR(positions_.Open(rank_));
  ExecutorOptions exec_options;
  exec_options.overlap = options_.overlap;
  exec_options.capture = options_.graph;
  exec_options.position = &positions_.board();
  executor_ = std::make_unique<Executor>(plan_, devices_.device.get(), &devices_.grad_comm(),
                                         nullptr, exec_options);
  RETURN_IF_ERROR(executor_->Prepare());  // (sets the board's labels)
  positions_.PublishToRedis(rank_, log_);
  return absl::OkStatus();
}

absl::Status Trainer::SetUpWeights() {
  ASSIGN_OR_RETURN(start_,
                   LoadStartingPoint(plan_, options_, *devices_.device, rank_.rank, log_));
  if (start_.state.step >= data_.total_steps) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is at step %d, and this run has %d steps: nothing to train "
        "(raise --steps or --epochs to continue it)",
        start_.resumed_from, start_.state.step, data_.total_steps));
  }
  if (plan_.checkpoints.every > 0 && rank_.rank == 0) {
    RETURN_IF_ERROR(PrepareCheckpointFolder(plan_.checkpoints.dir));
  }
  return absl::OkStatus();
}

// Every rank shows the others what it is about to run (handshake.h): a
// rank started with other settings, data or weights stops the job here.
absl::Status Trainer::Handshake() {
  if (rank_.world_size == 1) return absl::OkStatus();
  ASSIGN_OR_RETURN(const RankFingerprint mine,
                   FingerprintRank(plan_, *data_.train, *devices_.device, start_.state));
  return AgreeBeforeFirstStep(*devices_.host_comm, mine);
}

absl::Status Trainer::StartRun() {
  LogRunHeader(log_, plan_, devices_.kind, data_, start_);
  tracing_.identity = IdentifyPlan(plan_, options_.input_path, options_.overrides);
  tracing_.identity.device = EnumName(devices_.kind);
  tracing_.identity.overlap = options_.overlap;
  RETURN_IF_ERROR(OpenMetricsLog());
  tracing_.tracer.emplace(rank_.rank, rank_.job_start_ns ? rank_.job_start_ns : TraceClockNs());
  first_step_ = start_.state.step + 1;
  tracing_.begin = data_.total_steps - first_step_ >= 2 ? first_step_ + 1 : first_step_;
  tracing_.end = tracing_.begin + std::max<int64_t>(1, options_.trace_steps);
  StartWatchers();
  progress_.tty = isatty(STDOUT_FILENO) && rank_.rank == 0;
  progress_.every =
      options_.log_every > 0
          ? options_.log_every
          : std::max<int64_t>(1, std::min<int64_t>(data_.steps_per_epoch / 5, 200));
  summary_.arena_bytes = plan_.arena_bytes;
  metrics_every_ = std::min<int64_t>(progress_.every, 20);
  for (const Buffer& b : plan_.buffers) {
    if (b.kind == BufferKind::kStepScalar && b.name == "grad_sq") grad_sq_ = &b;
  }
  run_start_ = std::chrono::steady_clock::now();
  progress_.start = run_start_;
  return absl::OkStatus();
}

void Trainer::StartWatchers() {
  // With --trace under the local launcher: a rank the launcher stops
  // while it waits in a collective writes its trace from this thread.
  std::function<void()> stop_note_watch;
  if (!options_.trace_path.empty() && !positions_.launcher_dir().empty()) {
    stop_note_watch = [this] {
      if (ReadStopNote(positions_.launcher_dir())) WriteStopTrace("stopped by the launcher");
    };
  }
  pulse_.emplace(Heartbeat::FromEnvironment(), std::move(stop_note_watch));
  if (options_.watchdog_seconds > 0 && options_.on_stall) {
    watchdog_.emplace(
        absl::Seconds(options_.watchdog_seconds), rank_.rank,
        [this](const std::string& why) {
          WriteStopTrace(why);
          options_.on_stall(why);
        },
        [this] { return positions_.Where(); });
  }
}

absl::Status Trainer::OpenMetricsLog() {
  metrics_on_ = !options_.metrics_path.empty() || !options_.tensorboard_dir.empty();
  if (!metrics_on_ || rank_.rank != 0) return absl::OkStatus();
  MetricsLogOptions metrics_options;
  metrics_options.jsonl_path = options_.metrics_path;
  metrics_options.tensorboard_dir = options_.tensorboard_dir;
  metrics_options.append = start_.state.step > 0;  // a resumed run continues its log
  ASSIGN_OR_RETURN(metrics_, MetricsLog::Open(metrics_options));
  WriteMetrics(*metrics_, log_,
               RunRecord(plan_, devices_.kind, data_.total_steps, data_.steps_per_epoch,
                         start_.state.step + 1, tracing_.identity));
  return absl::OkStatus();
}

// --- Step.

absl::Status Trainer::TrainStep(int64_t step_number) {
  StepInfo step = BeginStep(step_number);
  positions_.board().Stage(RankStage::kStep, step.number);
  RETURN_IF_ERROR(RunOptimizerStep(step));
  KeepStepTimes(step);
  if (step.traced && step.number == tracing_.end - 1) KeepTracePart();
  if (metrics_) RecordStepMetrics(step);
  ReportCaptureFailure(step.number);
  ++progress_.steps;
  RETURN_IF_ERROR(SumLossesIfDue(step));
  LogProgress(step);

  if (watchdog_) watchdog_->StepDone(step.number);
  const bool eval_due =
      data_.eval.has_value() &&
      (step.epoch_end || step.last ||
       (options_.eval_every > 0 && step.number % options_.eval_every == 0));
  const CheckpointConfig& periodic = plan_.checkpoints;
  const bool checkpoint_due =
      periodic.every > 0 && (step.number % periodic.every == 0 || step.last);
  // ZeRO-1 with zero_gather = next_forward: the parameters are whole
  // only after this (a no-op otherwise); every rank gets here together.
  if (eval_due || checkpoint_due) RETURN_IF_ERROR(executor_->GatherParameters());
  if (eval_due) {
    positions_.board().Stage(RankStage::kEvaluating, step.number);
    RETURN_IF_ERROR(EvaluateAt(step));
  }
  if (watchdog_ && eval_due) watchdog_->StepDone(step.number);

  const TrainingState now = StateAfter(step.number, data_.steps_per_epoch);
  if (checkpoint_due && (rank_.rank == 0 || plan_.zero > 0)) {
    positions_.board().Stage(RankStage::kCheckpointing, step.number);
    RETURN_IF_ERROR(SavePeriodicCheckpoint(plan_, *devices_.device, now, devices_.sharding,
                                           rank_.rank, log_, progress_.LineStart()));
    if (watchdog_) watchdog_->StepDone(step.number);
  }
  // A stop signal is looked for after every step of a one-rank run, and
  // every kStopCheckSteps steps (a sum over ranks) of a larger one; never
  // after the last step, which ends the run anyway.
  if (!step.last && (plan_.world_size == 1 || step.number % kStopCheckSteps == 0)) {
    RETURN_IF_ERROR(StopIfAsked(now));
  }
  return absl::OkStatus();
}

StepInfo Trainer::BeginStep(int64_t step_number) {
  StepInfo step;
  step.number = step_number;
  step.epoch = (step_number - 1) / data_.steps_per_epoch;
  step.in_epoch = (step_number - 1) % data_.steps_per_epoch;
  step.epoch_end = step.in_epoch == data_.steps_per_epoch - 1;
  step.last = step_number == data_.total_steps;
  step.progress_line = step_number % progress_.every == 0 || step.last || step.epoch_end;
  step.start = std::chrono::steady_clock::now();
  data_.SetStep(step_number, step.epoch, step.in_epoch);
  step.traced = step_number >= tracing_.begin && step_number < tracing_.end;
  executor_->set_tracer(step.traced ? &*tracing_.tracer : nullptr);
  step.lr = LearningRateAt(plan_.schedule, plan_.optimizer.lr, step_number,
                           plan_.schedule.total_steps > 0 ? plan_.schedule.total_steps
                                                          : data_.total_steps);
  return step;
}

absl::Status Trainer::RunOptimizerStep(StepInfo& step) {
  StepState step_state;
  step_state.step = step.number;
  step_state.lr = step.lr;
  ASSIGN_OR_RETURN(const double loss_sum,
                   executor_->RunStep(step_state, data_.Batches(step.number),
                                      data_.NextBatches(step.number, step.last)));
  // After one step every arena page has been written: the arena is in.
  if (++summary_.steps == 1) {
    summary_.resident_bytes = ResidentBytes();
    summary_.device_host_bytes = devices_.device->HostBytes();
    summary_.comm_host_bytes = devices_.CommHostBytes();
  }
  pending_.losses.push_back(static_cast<float>(loss_sum));
  bool skipped = false;
  if (grad_sq_ != nullptr) {
    // Read from the device once per step (4 bytes, after the step's own
    // synchronisation) to tell a non-finite step at once.
    float sq = 0;
    RETURN_IF_ERROR(devices_.device->Download(grad_sq_->offset, &sq, sizeof(sq)));
    step.grad_norm = std::sqrt(static_cast<double>(sq));
    ASSIGN_OR_RETURN(skipped, nonfinite_.LeaveOut(plan_, *devices_.device, step.number,
                                                  step.grad_norm, log_,
                                                  progress_.LineStart()));
  }
  pending_.skipped.push_back(skipped);
  return absl::OkStatus();
}

void Trainer::RecordStepMetrics(const StepInfo& step) {
  const double ms = Seconds(std::chrono::steady_clock::now() - step.start) * 1e3;
  std::vector<TraceSpan> spans;
  if (step.traced && plan_.world_size > 1) {
    for (const TraceSpan& span : tracing_.tracer->spans()) {
      if (span.step == step.number) spans.push_back(span);
    }
  }
  pending_.metrics.push_back(TrainRecord(
      plan_, step.number, step.epoch, step.lr, ms,
      grad_sq_ != nullptr ? std::optional<double>(step.grad_norm) : std::nullopt, spans));
}

void Trainer::KeepTracePart() {
  if (options_.trace_path.empty() || rank_.rendezvous_dir.empty() || rank_.world_size == 1) {
    return;
  }
  // Best effort: Finish writes it again, and says so if it cannot.
  (void)WriteTracePart(rank_, tracing_.tracer->EventsJson(plan_));
}

void Trainer::ReportCaptureFailure(int64_t step) {
  if (executor_->capture().failure.empty() || capture_failure_reported_) return;
  log_ << absl::StrFormat(
      "%swarning: step %d could not be captured as a CUDA graph (%s); "
      "every step runs eagerly\n",
      progress_.LineStart(), step, executor_->capture().failure);
  capture_failure_reported_ = true;
}

absl::Status Trainer::SumLossesIfDue(const StepInfo& step) {
  if (!step.progress_line && !(metrics_on_ && step.number % metrics_every_ == 0)) {
    return absl::OkStatus();
  }
  // Every rank's step times ride along (its own slots; zeros elsewhere).
  const size_t losses = pending_.losses.size();
  if (plan_.world_size > 1) {
    pending_.losses.resize(losses + 3 * plan_.world_size, 0.0f);
    const RankStepTimes median = MedianStepTimes(own_times_);
    float* mine = &pending_.losses[losses + 3 * rank_.rank];
    mine[0] = static_cast<float>(median.busy_ms);
    mine[1] = static_cast<float>(median.data_ms);
    mine[2] = static_cast<float>(median.waiting_ms);
  }
  positions_.board().CommBegin(HostCollective::kLossSum);
  RETURN_IF_ERROR(SumOverRanks(*devices_.host_comm, &pending_.losses));
  positions_.board().CommEnd();
  std::vector<RankStepTimes> per_rank(plan_.world_size > 1 ? plan_.world_size : 0);
  for (size_t r = 0; r < per_rank.size(); ++r) {
    const float* t = &pending_.losses[losses + 3 * r];
    per_rank[r] = {t[0], t[1], t[2]};
  }
  pending_.losses.resize(losses);
  RETURN_IF_ERROR(CheckLossesFinite(plan_, *devices_.device, step.number, pending_.losses,
                                    pending_.skipped));
  const double terms = static_cast<double>(plan_.global_batch) * plan_.loss_terms;
  last_loss_ = pending_.losses.back() / terms;
  for (size_t i = 0; i < pending_.metrics.size(); ++i) {
    pending_.metrics[i].scalars[0].second = pending_.losses[i] / terms;
    WriteMetrics(*metrics_, log_, pending_.metrics[i]);
  }
  pending_ = PendingSteps();
  if (!per_rank.empty()) NameStragglers(step, per_rank);
  return absl::OkStatus();
}

void Trainer::KeepStepTimes(const StepInfo& step) {
  // One rank has no peers to be slower than (and nothing would clear the
  // list); the run's first step warms caches and libraries, unevenly.
  if (plan_.world_size == 1 || step.number == first_step_) return;
  const StepTimes& t = executor_->step_times();
  own_times_.push_back(
      {(t.data_ns + t.compute_cpu_ns) / 1e6, t.data_ns / 1e6, t.waiting_ns / 1e6});
}

void Trainer::NameStragglers(const StepInfo& step, const std::vector<RankStepTimes>& per_rank) {
  const std::vector<Straggler> named =
      stragglers_.Add(step.number, static_cast<int64_t>(own_times_.size()), per_rank);
  own_times_.clear();
  for (const Straggler& s : named) {
    log_ << progress_.LineStart() << "straggler: " << Describe(s) << "\n" << std::flush;
    if (metrics_) WriteMetrics(*metrics_, log_, StragglerRecord(step.number, s));
  }
}

void Trainer::LogProgress(const StepInfo& step) {
  if (!step.progress_line && !progress_.tty) return;
  std::string norm;
  if (step.progress_line && grad_sq_ != nullptr) {
    last_grad_norm_ = step.grad_norm;
    norm = absl::StrFormat(" | grad norm %.3g", last_grad_norm_);
  }
  progress_.Log(log_, plan_, step.number, step.epoch, step.progress_line, data_.total_steps,
                data_.total_epochs, last_loss_, norm);
}

// --- Evaluation.

absl::Status Trainer::EvaluateAt(const StepInfo& step) {
  ASSIGN_OR_RETURN(last_eval_, Evaluate(plan_, *executor_, *devices_.device,
                                        *devices_.host_comm, *data_.eval, data_.eval_head));
  // "eval epoch 3" at an epoch's end, "eval step 200 (epoch 1)" between.
  const std::string when =
      step.epoch_end || step.last
          ? absl::StrCat("epoch ", step.epoch + 1)
          : absl::StrCat("step ", step.number, " (epoch ", step.epoch + 1, ")");
  LogEvaluation(log_, progress_.LineStart(), when, data_.eval_head, last_eval_,
                EvalBitsPerByte());
  if (!metrics_) return absl::OkStatus();
  WriteMetrics(*metrics_, log_,
               EvalRecord(step.number, step.epoch, data_.eval_head, last_eval_,
                          EvalBitsPerByte()));
  return absl::OkStatus();
}

// Bits per byte of text of the last evaluation: nats per token / ln 2 over
// the eval text's bytes per token (1 for bytes; the whole eval stream's
// ratio under a tokenizer); 0 when unknown (llm.c shards).
double Trainer::EvalBitsPerByte() const {
  const double bytes_per_token = data_.eval ? data_.eval->bytes_per_token() : 0.0;
  if (bytes_per_token <= 0) return 0;
  return last_eval_.loss / std::log(2.0) / bytes_per_token;
}

// --- Stop.

absl::Status Trainer::StopIfAsked(const TrainingState& now) {
  std::vector<float> stop = StopVote();
  positions_.board().CommBegin(HostCollective::kStopVote);
  RETURN_IF_ERROR(SumOverRanks(*devices_.host_comm, &stop));
  positions_.board().CommEnd();
  const int sig = AgreeOnStop(stop);
  if (sig == 0) return absl::OkStatus();
  RETURN_IF_ERROR(executor_->GatherParameters());
  ASSIGN_OR_RETURN(const std::string path,
                   SaveStopCheckpoint(plan_, options_, *devices_.device, now,
                                      devices_.sharding, rank_.rank));
  RETURN_IF_ERROR(devices_.host_comm->Barrier());
  const CheckpointConfig& periodic = plan_.checkpoints;
  return absl::CancelledError(absl::StrFormat(
      "stopped at step %d of %d (%s, signal %d on %s); checkpoint %s; "
      "continue with --resume %s",
      now.step, data_.total_steps, strsignal(sig), sig,
      ThisRankWasSignalled() ? "this rank" : "another rank", path,
      periodic.every > 0 ? periodic.dir : path));
}

void Trainer::RecordStop(const absl::Status& why, int64_t step) {
  if (!metrics_) return;
  MetricsRecord r{"stopped", step, UnixSeconds()};
  r.info = {{"rank", int64_t{rank_.rank}},
            {"where", positions_.board().Where()},
            {"error", std::string(why.message())}};
  WriteMetrics(*metrics_, log_, r);
}

void Trainer::WriteStopTrace(const std::string& why) {
  if (options_.trace_path.empty() || !tracing_.tracer) return;
  absl::MutexLock lock(&tracing_.stop_mu);
  if (tracing_.stop_written) return;
  tracing_.stop_written = true;
  trainc::WriteStopTrace(plan_, rank_, *tracing_.tracer, positions_, options_.trace_path,
                         tracing_.identity, why);
}

// --- Summary.

absl::StatusOr<TrainSummary> Trainer::Finish() {
  FillSummary();
  if (metrics_) RecordSummaryMetrics();
  if (!options_.trace_path.empty()) {
    RETURN_IF_ERROR(WriteTrace(plan_, rank_, *tracing_.tracer, *devices_.host_comm,
                               options_.trace_path, tracing_.identity));
    log_ << "trace: " << options_.trace_path << " (" << tracing_.tracer->steps_traced()
         << " steps; open in https://ui.perfetto.dev or tools/viz)\n";
  }
  if (!options_.save_path.empty()) {
    RETURN_IF_ERROR(executor_->GatherParameters());
    // The other ranks wait for this write at the barrier below.
    RETURN_IF_ERROR(SaveFinalCheckpoint(
        plan_, options_.save_path, *devices_.device,
        StateAfter(summary_.final_step, data_.steps_per_epoch), devices_.sharding,
        rank_.rank, log_));
  }
  SummaryContext context;
  context.device = devices_.kind;
  context.blas = cpu::WithBlasEnv(options_.blas).value_or(options_.blas);
  context.rank = rank_.rank;
  context.overlap = options_.overlap;
  context.dropped_per_epoch = data_.dropped_per_epoch;
  if (devices_.device->SupportsCapture()) context.capture = &executor_->capture();
  context.stragglers = &stragglers_.named();
  LogSummary(log_, plan_, summary_, context);
  // The ranks leave together, after rank 0's --save: one that closed its
  // sockets while a peer was still finishing the last collective would
  // fail that peer's run.
  if (plan_.world_size > 1) RETURN_IF_ERROR(devices_.host_comm->Barrier());
  return summary_;
}

void Trainer::FillSummary() {
  summary_.seconds = Seconds(std::chrono::steady_clock::now() - run_start_);
  summary_.final_step = std::max(start_.state.step, data_.total_steps);
  summary_.samples_per_second =
      summary_.seconds > 0 ? summary_.steps * plan_.global_batch / summary_.seconds : 0;
  summary_.final_loss = last_loss_;
  summary_.grad_norm = last_grad_norm_;
  summary_.replayed_steps = executor_->capture().replayed_steps;
  summary_.skipped_steps = nonfinite_.skipped();
  summary_.eval_accuracy = last_eval_.accuracy;
  summary_.eval_loss = data_.eval ? last_eval_.loss : -1;
  const OverlapStats overlap = ComputeOverlap(tracing_.tracer->spans());
  if (overlap.steps > 0) {
    summary_.allreduce_ms = overlap.comm_ns / 1e6 / overlap.steps;
    summary_.hidden_fraction = overlap.hidden_fraction();
  }
}

void Trainer::RecordSummaryMetrics() {
  WriteMetrics(*metrics_, log_, SummaryRecord(plan_, summary_, data_.eval.has_value()));
  if (!metrics_->jsonl_path().empty()) log_ << "metrics: " << metrics_->jsonl_path() << "\n";
  if (!metrics_->tensorboard_path().empty()) {
    log_ << "tensorboard: " << metrics_->tensorboard_path()
         << " (tensorboard --logdir " << options_.tensorboard_dir << ")\n";
  }
}

}  // namespace

absl::StatusOr<TrainSummary> TrainRank(const Plan& plan,
                                       const RankContext& rank,
                                       const TrainOptions& options,
                                       std::ostream& log) {
  Trainer trainer(plan, rank, options, log);
  return trainer.Run();
}

}  // namespace trainc
