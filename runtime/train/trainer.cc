#include "runtime/train/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "compiler/plan/plan_io.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/comm/mpi/mpi_communicator.h"
#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "runtime/fault/fault.h"
#include "runtime/launch/heartbeat.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/position/position.h"
#include "runtime/position/redis_positions.h"
#include "runtime/store/store_protocol.h"
#include "runtime/trace/plan_identity.h"
#include "runtime/trace/tracer.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/handshake.h"
#include "runtime/train/watchdog.h"
#include "runtime/train/overlap.h"
#include "runtime/train/schedule.h"
#include "runtime/train/trace_files.h"

namespace trainc {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string FormatDuration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.0fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
}

std::string FormatRate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrFormat("%.2f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.1f KiB", bytes / 1024.0);
}

// kCpu or kCuda.
absl::StatusOr<DeviceKind> ResolveDevice(DeviceKind requested, int world_size) {
  // Not asked for cpu: counting GPUs loads the CUDA plugin where there is a
  // driver (cuda_device.h).
  if (requested == DeviceKind::kCpu) return DeviceKind::kCpu;
  const int gpus = CudaDeviceCount();
  if (requested == DeviceKind::kAuto) return gpus > 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
  if (gpus == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: no CUDA GPU is visible on this machine (",
        CudaUnavailableReason(), "; use --device cpu or auto)"));
  }
  return DeviceKind::kCuda;
}

// SIGTERM, SIGINT or SIGHUP received during TrainRank (Slurm preemption,
// Ctrl-C, the launcher passing either on), or 0. A second one ends the
// process at once, unless it is the local launcher (this process's parent)
// passing on the stop this rank already has: a terminal's Ctrl-C, `timeout`
// and `scancel` signal the launcher and every rank at once, and the
// launcher's SIGTERM that follows is the same request, not a second one.
// The launcher's own relay may also arrive first (it runs on another core
// while the kernel is still signalling the group), so only signals from
// elsewhere count towards "a second one": the launcher escalates by itself.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_outside_signals = 0;  // stop signals not from the launcher
// The signal the ranks agreed to stop on (every rank's, this one's or not).
int g_agreed_stop_signal = 0;

void OnStopSignal(int sig, siginfo_t* info, void*) {
  const bool from_launcher =
      info != nullptr && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (!from_launcher) {
    g_outside_signals = g_outside_signals + 1;
    if (g_outside_signals > 1) {
      ::signal(sig, SIG_DFL);
      ::raise(sig);
      return;
    }
  }
  if (g_stop_signal == 0 || !from_launcher) g_stop_signal = sig;
}

// The stop handlers for one TrainRank; the previous ones come back after.
class StopSignalScope {
 public:
  StopSignalScope() {
    g_stop_signal = 0;
    g_outside_signals = 0;
    g_agreed_stop_signal = 0;
    struct sigaction action = {};
    action.sa_sigaction = OnStopSignal;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], &action, &previous_[i]);
    }
  }
  ~StopSignalScope() {
    for (size_t i = 0; i < kSignals.size(); ++i) {
      ::sigaction(kSignals[i], &previous_[i], nullptr);
    }
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};
  std::array<struct sigaction, 3> previous_;
};

// The first parameter (in model order) whose reduced gradient of the last
// step holds a non-finite value, as "; first non-finite gradient: NAME", or
// "" when there is none or it cannot be read. Read once, on the way out.
std::string FirstNonFiniteGradient(const Plan& plan, Device& device) {
  for (int id : plan.parameter_buffers) {
    const std::string name = "grad/" + plan.buffers[id].name;
    for (const Buffer& g : plan.buffers) {
      if (g.kind != BufferKind::kGradient || g.name != name) continue;
      if (g.first_use >= 0) return "";  // ZeRO-2: the arena reused its bytes
      std::vector<float> values(g.bytes / 4);
      if (!device.Download(g.offset, values.data(), g.bytes).ok()) return "";
      for (float v : values) {
        if (!std::isfinite(v)) {
          return absl::StrCat("; first non-finite gradient: ", plan.buffers[id].name);
        }
      }
      break;  // slot 0: the reduced gradient
    }
  }
  return "";
}

// The process's resident set (/proc/self/statm's second field, in pages),
// or 0 where there is none.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// skip_nonfinite gives up after this many skipped steps in a row.
constexpr int64_t kMaxSkippedInARow = 100;

// Ranks agree to stop this often (in steps): one 4-byte sum over ranks.
constexpr int64_t kStopCheckSteps = 10;

// Metrics are not worth the run: a write that fails (a full disk) is a
// warning, that output stops, and training goes on to its checkpoint.
void WriteMetrics(MetricsLog& metrics, std::ostream& log, const MetricsRecord& record) {
  const absl::Status written = metrics.Write(record);
  if (!written.ok()) log << "warning: " << written.message() << "; training goes on\n";
}

// Where a run stopped by a signal writes its checkpoint: the run's
// checkpoint folder (checkpoint_every, or a checkpoint_dir given without
// it), else --save, else checkpoints/<model> (the folder's default).
std::string StopCheckpointPath(const Plan& plan, const TrainOptions& options, int64_t step) {
  const bool default_dir = plan.checkpoints.dir == absl::StrCat("checkpoints/", plan.model);
  if (plan.checkpoints.every > 0 || !default_dir) {
    return CheckpointPath(plan.checkpoints.dir, step);
  }
  if (!options.save_path.empty()) return options.save_path;
  return CheckpointPath(absl::StrCat("checkpoints/", plan.model), step);
}

// --resume: a checkpoint file, or a folder of them: the newest that loads.
// One that cannot be used (no training state, another seed, non-finite
// values) is skipped with a warning; one of another model stops the search:
// the folder holds another run's checkpoints (or this run's options are not
// its own), and resuming from an older one would silently drop that run's
// newer steps and then overwrite its checkpoints.
absl::StatusOr<std::string> ResumeFrom(const std::string& path, const Plan& plan,
                                       Device& device, int rank, TrainingState* state,
                                       std::ostream& log) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error) || IsHfFolder(path)) {
    // (LoadCheckpoint says that a Hugging Face folder has no training state.)
    RETURN_IF_ERROR(
        LoadCheckpoint(path, plan, device, state, /*weights_only=*/false, rank));
    return path;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> candidates, CheckpointsNewestFirst(path));
  for (const std::string& candidate : candidates) {
    absl::Status loaded =
        LoadCheckpoint(candidate, plan, device, state, /*weights_only=*/false, rank);
    if (loaded.ok()) return candidate;
    if (IsCheckpointOfAnotherModel(loaded)) {
      return absl::Status(
          loaded.code(),
          absl::StrCat("--resume ", path, ": ", loaded.message(),
                       "; the older checkpoints in ", path,
                       " are not tried in its place (resume with that run's .train file and "
                       "options, or name an older checkpoint file)"));
    }
    log << "warning: skipping " << candidate << ": " << loaded.message() << "\n";
  }
  return absl::NotFoundError(absl::StrCat(
      "--resume ", path, ": no checkpoint (step-<N>.safetensors) in this folder",
      candidates.empty() ? "" : " loads"));
}

}  // namespace

int ReceivedStopSignal() {
  return g_agreed_stop_signal != 0 ? g_agreed_stop_signal : g_stop_signal;
}

absl::StatusOr<PlanOptions> PlanOptionsForDevice(DeviceKind device, bool compile_only) {
  const bool for_cuda = compile_only && device == DeviceKind::kCuda;
  ASSIGN_OR_RETURN(const DeviceKind kind,
                   for_cuda ? DeviceKind::kCuda : ResolveDevice(device, 1));
  PlanOptions options;
  // bucket_mb = auto without a train { machine }: the device's profile.
  options.default_machine = DefaultMachineOfDevice(EnumName(kind));
  if (kind == DeviceKind::kCuda) {
    options.workspace = CudaWorkspaceBytes;
    options.bf16_staging = CudaBf16StagingBytes;
  } else {
    options.workspace = cpu::WorkspaceBytes;
    options.writes_next_outputs = cpu::ConvAbsorbsNextRelu;
  }
  return options;
}

namespace {

// Parameters are initialised like PyTorch's modules (see Buffer::init) from
// one portable generator seeded by the plan, so every rank and every
// platform starts from the same weights.
absl::Status InitializeParameters(const Plan& plan, Device& device, int rank) {
  SplitMix64 rng(static_cast<uint64_t>(plan.seed) * 0x9E3779B97F4A7C15ull +
                 0x5EEDull);
  std::vector<float> host;
  for (size_t i = 0; i < plan.parameter_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.parameter_buffers[i]];
    host.assign(b.bytes / sizeof(float), 0.0f);
    switch (b.init) {
      case ParamInit::kNone:  // not expected of a parameter: zeros
      case ParamInit::kZeros:
        break;
      case ParamInit::kOnes:
        std::fill(host.begin(), host.end(), 1.0f);
        break;
      case ParamInit::kUniform:
        for (float& v : host) {
          // 24 random bits -> [0, 1), exactly representable in float.
          const double u = static_cast<double>(rng.Next() >> 40) / (1 << 24);
          v = static_cast<float>((2.0 * u - 1.0) * b.init_bound);
        }
        break;
      case ParamInit::kNormal:
        // Box-Muller on 53-bit uniforms; u1 in (0, 1] keeps the log finite.
        for (size_t i = 0; i < host.size(); i += 2) {
          const double u1 = (static_cast<double>(rng.Next() >> 11) + 1.0) / 9007199254740992.0;
          const double u2 = static_cast<double>(rng.Next() >> 11) / 9007199254740992.0;
          const double r = std::sqrt(-2.0 * std::log(u1)) * b.init_bound;
          host[i] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
          if (i + 1 < host.size()) host[i + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
        }
        break;
    }
    // Every rank draws every value (the generator stays in step); ZeRO-3
    // keeps its shard.
    RETURN_IF_ERROR(UploadParameter(plan, device, static_cast<int>(i), host, rank));
  }
  return absl::OkStatus();
}

// Sums `values` over every rank (host memory, through Gloo).
absl::Status SumOverRanks(Communicator& comm, std::vector<float>* values) {
  if (comm.world_size() == 1) return absl::OkStatus();
  return comm.AllReduceSum(values->data(), static_cast<int64_t>(values->size()),
                           nullptr);
}

// The metrics log's first record: what was run, for a reader to label and
// compare runs by.
MetricsRecord RunRecord(const Plan& plan, DeviceKind device,
                        int64_t total_steps, int64_t steps_per_epoch,
                        int64_t first_step, const PlanIdentity& identity) {
  MetricsRecord r{"run", first_step - 1, UnixSeconds()};
  r.info = {{"model", plan.model},
            {"source", plan.source},
            {"device", std::string(EnumName(device))},
            {"gpus", int64_t{plan.world_size}},
            {"micro_batch", int64_t{plan.micro_batch}},
            {"accumulate", int64_t{plan.accumulate}},
            {"global_batch", int64_t{plan.global_batch}},
            {"loss_terms", int64_t{plan.loss_terms}},
            {"steps", total_steps},
            {"steps_per_epoch", steps_per_epoch},
            {"optimizer", std::string(EnumName(plan.optimizer.kind))},
            {"lr", double{plan.optimizer.lr}},
            {"seed", int64_t{plan.seed}},
            {"plan", JsonText{PlanIdentityJson(identity)}}};
  return r;
}

// The host communicator of one rank (host-side sums, barriers, NCCL's
// bootstrap): Gloo, or MPI with rank.comm kMpi (mpirun jobs). On the
// CPU it carries the gradients too; on CUDA NCCL does.
absl::StatusOr<std::unique_ptr<Communicator>> CreateHostCommunicator(const RankContext& rank,
                                                                    const Plan& plan) {
  std::unique_ptr<Communicator> host_comm;
  if (rank.comm == CommKind::kMpi) {
    if (!StartedByMpirun()) {
      return absl::FailedPreconditionError(
          "--comm mpi needs a job started by mpirun (e.g. mpirun -np 2 train FILE)");
    }
    ASSIGN_OR_RETURN(host_comm, MpiCommunicator::Create());
    if (host_comm->rank() != rank.rank || host_comm->world_size() != rank.world_size) {
      return absl::InternalError(absl::StrCat(
          "MPI says rank ", host_comm->rank(), " of ", host_comm->world_size(),
          " but the environment says ", rank.rank, " of ", rank.world_size));
    }
  } else if (rank.comm == CommKind::kGloo) {
    if (rank.world_size > 1 && rank.rendezvous_dir.empty() && rank.redis.empty() &&
        rank.store.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Gloo needs a rendezvous for ", rank.world_size, " ranks: set MASTER_ADDR and "
          "MASTER_PORT, TRAINC_RENDEZVOUS_DIR (a shared folder) or --rendezvous "
          "redis://HOST:PORT/JOB, or under mpirun use --comm mpi"));
    }
    GlooOptions gloo;
    gloo.rank = rank.rank;
    gloo.world_size = rank.world_size;
    gloo.file_store_dir = rank.rendezvous_dir;
    if (!rank.redis.empty()) {
      const size_t colon = rank.redis.rfind(':');
      gloo.redis_host = rank.redis.substr(0, colon);
      gloo.redis_port = std::atoi(rank.redis.c_str() + colon + 1);
      gloo.store_prefix = absl::StrCat("trainc/", rank.job);
    }
    if (!rank.store.empty()) {
      const size_t colon = rank.store.rfind(':');
      gloo.store_host = rank.store.substr(0, colon);
      gloo.store_port = std::atoi(rank.store.c_str() + colon + 1);
      gloo.store_origin = rank.store_origin;
      // Without a secret the plan stands in: a process that did not
      // compile this job's plan cannot make the token.
      gloo.store_key = store::JobKey(
          rank.job_secret.empty() ? absl::StrCat("plan ", PlanHash(plan)) : rank.job_secret,
          rank.job);
    }
    gloo.hostname = rank.hostname;
    // A peer silent this long fails the collective: with the launcher's 5 s
    // grace period a stuck job ends within 30 s.
    gloo.timeout = absl::Seconds(20);
    ASSIGN_OR_RETURN(host_comm, GlooCommunicator::Create(gloo));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown communicator '", EnumName(rank.comm), "' (gloo or mpi)"));
  }
  return host_comm;
}

// The CPU device of one rank, its threads from --blas-threads.
std::unique_ptr<Device> CreateCpuDevice(const TrainOptions& options, std::ostream& log) {
  CpuDeviceOptions cpu;
  cpu.blas_threads = options.blas_threads;
  // torchrun (and some Slurm setups) export OMP_NUM_THREADS=1; the CPU
  // backend's threads come from --blas-threads instead, whatever it says.
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && options.blas_threads > 0 &&
      std::string(omp) != std::to_string(options.blas_threads)) {
    log << "note: OMP_NUM_THREADS=" << omp << " (set by a launcher?) is not used: "
        << "OpenBLAS and oneDNN run " << options.blas_threads
        << " thread(s) per rank (--blas-threads)\n";
  }
  // An OpenBLAS that does not know this CPU model runs far slower kernels.
  const std::string blas_warning = cpu::BlasFallbackWarning(cpu::DescribeBlas());
  if (!blas_warning.empty()) log << blas_warning << "\n";
  return std::make_unique<CpuDevice>(cpu);
}

// The launcher's watchdog hears from a pulse thread rather than from the
// step loop: a rank blocked in a collective because a peer froze is alive
// and must not be the one blamed. So silence means this process itself
// is frozen or gone; a rank whose loop is stuck while the process lives
// is caught by its peers' communicator timeout instead.
class HeartbeatPulse {
 public:
  // Beats every 500 ms from a thread of its own until destroyed, when
  // `heartbeat` is enabled (the local launcher started this process), and
  // calls `after_beat` (when given) after each beat.
  HeartbeatPulse(Heartbeat heartbeat, std::function<void()> after_beat)
      : heartbeat_(std::move(heartbeat)), after_beat_(std::move(after_beat)) {
    if (!heartbeat_.enabled()) return;
    thread_ = std::thread([this] {
      do {
        heartbeat_.Beat();
        if (after_beat_) after_beat_();
      } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(500)));
    });
  }
  HeartbeatPulse(const HeartbeatPulse&) = delete;
  HeartbeatPulse& operator=(const HeartbeatPulse&) = delete;
  ~HeartbeatPulse() {
    if (!thread_.joinable()) return;
    stop_.Notify();
    thread_.join();
  }

 private:
  Heartbeat heartbeat_;
  const std::function<void()> after_beat_;
  absl::Notification stop_;
  std::thread thread_;
};

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
  // The device (--device resolved), the host communicator, NCCL for the
  // gradients on CUDA, and the executor over them, prepared.
  absl::Status SetUpDevice();
  // Ranks that meet through Redis: this rank's position published there.
  void PublishPositionsToRedis();
  // The training data and its batches, the eval set (unless --no-eval or
  // the file has none), and the run's length in steps and epochs.
  absl::Status SetUpData();
  // The weights: --resume (with optimizer state and data position),
  // --init-from (weights only) or seeded initialisation; then the periodic
  // checkpoints' folder.
  absl::Status SetUpWeights();
  // With more than one rank: the plan handshake (handshake.h).
  absl::Status Handshake();
  // Once the stop handlers are in: the header lines, the metrics log, the
  // tracer, the heartbeat and the step loop's clocks.
  absl::Status StartRun();
  void LogRunHeader();
  // The metrics log (rank 0) and its first record. Whether there is one is
  // the same on every rank (one command line), and so is the schedule of
  // loss sums it adds.
  absl::Status OpenMetricsLog();

  // --- Step.
  // One optimizer step, then each phase that is due after it.
  absl::Status TrainStep(int64_t step_number);
  // Where step `step_number` sits; sets the data position, the tracer and
  // the learning rate for it.
  StepInfo BeginStep(int64_t step_number);
  // The step itself through the executor; keeps its local loss sum and,
  // with clipping or skip_nonfinite, reads its gradient norm.
  absl::Status RunOptimizerStep(StepInfo& step);
  // With clipping or skip_nonfinite, after each step: whether the step was
  // left out because its gradient norm is not finite (the optimizers left
  // the weights and their state alone, plan.h). Without skip_nonfinite
  // that is a divergence, found at its step (not at the next log line), as
  // the same decision on every rank (the norm is the world's); so are
  // kMaxSkippedInARow skipped steps in a row.
  absl::StatusOr<bool> LeaveOutNonFiniteStep(int64_t step, double norm);
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
  // all-reduce for all of them), checked, and the pending records written.
  absl::Status SumLossesIfDue(const StepInfo& step);
  // The world's loss sums of the steps up to `step` (the last one is
  // `step`'s): a non-finite one that skip_nonfinite did not leave out stops
  // the run on every rank alike, before anything is saved over a good
  // checkpoint.
  absl::Status CheckLossesFinite(int64_t step) const;
  // The progress line, or on rank 0's terminal the live line between them.
  void LogProgress(const StepInfo& step);

  // --- Evaluation (the parameters gathered): the eval set scored, logged
  // and recorded.
  absl::Status EvaluateAt(const StepInfo& step);
  void LogEvaluation(const StepInfo& step);
  void RecordStop(const absl::Status& why, int64_t step);
  std::string Where() const;
  // Every rank's position, from wherever the ranks publish (only this
  // rank's when nowhere they share); `behind` as in JudgePositions.
  std::vector<RankPosition> AllPositions(int behind = -1) const;
  // --trace when the run stops (an error, a stall, the launcher's stop
  // note): the traced steps and where each rank was. Once, from whichever
  // thread comes first; no collective, since a peer may be gone.
  void WriteStopTrace(const std::string& why);
  double EvalBitsPerByte() const;

  // --- Checkpoint.
  // The training state after `step`: what a checkpoint written then holds.
  TrainingState StateAfter(int64_t step) const;
  // The checkpoint every checkpoints.every steps (and at the last), written
  // by rank 0 (under ZeRO-1 every rank takes part in the gather), then the
  // folder pruned. A full disk stops the run naming the newest whole one.
  absl::Status SavePeriodicCheckpoint(const TrainingState& now);

  // --- Stop.
  // A stop signal (preemption, Ctrl-C) reaches the ranks at different
  // steps: they agree at the next check (one small sum over ranks, which
  // also tells every rank which signal) and stop together at that step
  // boundary, with one checkpoint. OK when no rank was asked to stop;
  // CANCELLED, saying where the checkpoint is, when the run stops here.
  absl::Status StopIfAsked(const TrainingState& now);

  // --- Summary, after the last step.
  // The summary's numbers, its metrics record, the trace, the --save
  // checkpoint and the printed summary; then the ranks leave together.
  absl::StatusOr<TrainSummary> Finish();
  void FillSummary();
  void RecordSummaryMetrics();
  // --save: the final weights and state (rank 0; every rank under ZeRO-1).
  absl::Status SaveFinalCheckpoint();
  void LogSummary();

  // What starts a line of the log: on rank 0's terminal, the erasing of
  // the live progress line.
  const char* LineStart() const { return tty_ ? "\r\033[K" : ""; }

  const Plan& plan_;
  const RankContext& rank_;
  const TrainOptions& options_;
  std::ostringstream discard_;  // the log of ranks other than 0
  std::ostream& log_;

  // Set up by SetUpDevice.
  DeviceKind device_kind_ = DeviceKind::kCpu;  // kCpu or kCuda
  // The host communicator: host-side sums, barriers, NCCL's bootstrap.
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> nccl_;  // CUDA: the gradients' communicator
  std::unique_ptr<Device> device_;
  // ZeRO-1 checkpoints: every rank's optimizer state shard, over the host
  // communicator (the device is idle then).
  Sharding zero_sharding_;
  const Sharding* sharding_ = nullptr;  // &zero_sharding_ under ZeRO-1
  std::unique_ptr<PositionBoard> position_;  // where this rank is (the launcher reads it)
  std::string shared_positions_;  // every rank's positions, when this rank prints the table
  std::string launcher_positions_;  // the local launcher's positions folder (it prints the table)
  // Ranks that meet through Redis publish there (and print the table).
  std::unique_ptr<RedisPositions> redis_positions_;
  std::unique_ptr<Executor> executor_;

  // Set up by SetUpData.
  std::optional<Dataset> train_data_;
  std::optional<Dataset> eval_data_;  // none: no evaluation
  std::unique_ptr<TrainBatchSource> batches_;
  // TRAINC_FAULT=loader_sleep on this rank: batches_ behind a sleep.
  std::unique_ptr<SleepingBatchSource> sleeping_batches_;
  BatchSource* step_batches_ = nullptr;  // what the steps read
  // Otherwise: the batches of step n are step_views_[n % 2], and the next
  // step's are fed while step n runs (Executor::RunStep's `next`).
  std::unique_ptr<StepBatches> step_views_[2];
  EvalHead eval_head_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t total_epochs_ = 0;
  int64_t dropped_per_epoch_ = 0;  // samples not in a full global batch

  // Set up by SetUpWeights: the state the run starts from (step 0 unless
  // resumed) and the checkpoint it was resumed from.
  TrainingState initial_state_;
  std::string resumed_from_;

  // Installed by Run once set-up is done.
  std::optional<StopSignalScope> stop_signals_;

  // Set up by StartRun.
  bool metrics_on_ = false;             // on every rank alike
  std::unique_ptr<MetricsLog> metrics_;  // rank 0's, when metrics_on_
  // A few steps are traced (after the first, which warms caches) to
  // measure overlap; all of them go to --trace when asked.
  absl::Mutex stop_trace_mu_;
  bool stop_trace_written_ ABSL_GUARDED_BY(stop_trace_mu_) = false;
  std::optional<Tracer> tracer_;
  // The plan that ran, as the trace and the metrics log record it; set
  // before either is written.
  PlanIdentity identity_;
  int64_t first_step_ = 1;
  int64_t trace_begin_ = 1;  // the traced steps: [trace_begin_, trace_end_)
  int64_t trace_end_ = 1;
  std::optional<HeartbeatPulse> pulse_;
  std::optional<StepWatchdog> watchdog_;  // --watchdog
  bool tty_ = false;  // rank 0 writes to a terminal: a live progress line
  int64_t log_every_ = 1;  // steps between progress lines
  // Per-step losses reach the metrics log at least this often (in steps)
  // even when progress lines are rarer.
  int64_t metrics_every_ = 1;
  const Buffer* grad_sq_ = nullptr;  // clipping or skip_nonfinite
  std::chrono::steady_clock::time_point run_start_;

  // Kept by the steps.
  TrainSummary summary_;
  EvalResult last_eval_;
  // Each step's local loss sum until the next sum over ranks (one
  // all-reduce for all of them), and on rank 0 the step's other metrics.
  std::vector<float> step_losses_;
  std::vector<bool> step_skipped_;  // skip_nonfinite, aligned with step_losses_
  std::vector<MetricsRecord> pending_metrics_;
  int64_t skipped_in_a_row_ = 0;
  double last_loss_ = NAN;        // the world's mean, at the last sum
  double last_grad_norm_ = -1;    // at the last progress line
  bool capture_failure_reported_ = false;
  // The steps since the last progress line, and when that line was.
  std::chrono::steady_clock::time_point window_start_;
  int64_t window_steps_ = 0;
};

absl::StatusOr<TrainSummary> Trainer::Run() {
  RETURN_IF_ERROR(SetUpDevice());
  RETURN_IF_ERROR(SetUpData());
  RETURN_IF_ERROR(SetUpWeights());
  RETURN_IF_ERROR(Handshake());
  stop_signals_.emplace();
  RETURN_IF_ERROR(StartRun());
  for (int64_t step = first_step_; step <= total_steps_; ++step) {
    if (absl::Status s = TrainStep(step); !s.ok()) {
      RecordStop(s, step);
      WriteStopTrace(std::string(s.message()));
      if (shared_positions_.empty() && !redis_positions_) return s;
      return absl::Status(s.code(), absl::StrCat(s.message(), "\n", Where()));
    }
  }
  position_->Stage(RankStage::kDone, total_steps_);
  return Finish();
}

// This rank's position, or with a shared folder every rank's table.
std::string Trainer::Where() const {
  if (shared_positions_.empty() && !redis_positions_) return position_->Where();
  return absl::StrCat(position_->Where(), "\n", FormatPositionTable(AllPositions()));
}

std::vector<RankPosition> Trainer::AllPositions(int behind) const {
  const std::string& dir = !shared_positions_.empty() ? shared_positions_ : launcher_positions_;
  if (!dir.empty()) return ReadPositions(dir, rank_.world_size, behind);
  if (redis_positions_) return redis_positions_->ReadAll(rank_.world_size, behind);
  return JudgePositions({position_->Sample(rank_.rank)}, behind);
}

void Trainer::WriteStopTrace(const std::string& why) {
  if (options_.trace_path.empty() || !tracer_) return;
  absl::MutexLock lock(&stop_trace_mu_);
  if (stop_trace_written_) return;
  stop_trace_written_ = true;
  TraceStop stop{why, rank_.rank, {}};
  int behind = -1;
  if (std::optional<StopNote> note;
      !launcher_positions_.empty() && (note = ReadStopNote(launcher_positions_))) {
    stop.reason = note->reason;  // the launcher's verdict on the job
    behind = note->behind;
  }
  const int64_t now = TraceClockNs() - tracer_->job_start_ns();
  for (const RankPosition& p : AllPositions(behind)) stop.positions.push_back(ToTrace(p, now));
  // The other ranks' traced steps, from the parts they left at the end of
  // their traced window (a rank stopped before it has none there).
  std::vector<std::string> parts = {tracer_->EventsJson(plan_)};
  if (!rank_.rendezvous_dir.empty() && rank_.world_size > 1) {
    absl::StatusOr<std::vector<std::string>> theirs =
        ReadTraceParts(rank_, /*required=*/false, /*skip=*/rank_.rank);
    if (theirs.ok()) parts.insert(parts.end(), theirs->begin(), theirs->end());
  }
  const std::string path = TracePath(rank_, options_.trace_path);
  const absl::Status written =
      MergeTraceParts(plan_, parts, tracer_->steps_traced(), path, &stop, &identity_);
  std::cerr << (written.ok() ? absl::StrCat("train: the stopped job's trace: ", path)
                             : absl::StrCat("train: warning: ", written.message()))
            << std::endl;
}

// A run that stops on an error leaves, in the metrics log, where this rank
// was (tools/viz and people read it after the fact).
void Trainer::RecordStop(const absl::Status& why, int64_t step) {
  if (!metrics_) return;
  MetricsRecord r{"stopped", step, UnixSeconds()};
  r.info = {{"rank", int64_t{rank_.rank}},
            {"where", position_->Where()},
            {"error", std::string(why.message())}};
  WriteMetrics(*metrics_, log_, r);
}

// --- Set-up.

absl::Status Trainer::SetUpDevice() {
  if (plan_.world_size != rank_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan is for ", plan_.world_size, " rank(s) but the job has ",
        rank_.world_size));
  }
  ASSIGN_OR_RETURN(device_kind_, ResolveDevice(options_.device, rank_.world_size));
  if (device_kind_ == DeviceKind::kCuda && rank_.local_rank >= CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank_.rank, " needs GPU ", rank_.local_rank, " but this machine has ",
        CudaDeviceCount()));
  }
  ASSIGN_OR_RETURN(host_comm_, CreateHostCommunicator(rank_, plan_));
  if (device_kind_ == DeviceKind::kCuda) {
    ASSIGN_OR_RETURN(device_, CreateCudaDevice(rank_.local_rank));
    ASSIGN_OR_RETURN(nccl_, CreateNcclCommunicator(rank_.rank, rank_.world_size,
                                                   rank_.local_rank, *host_comm_));
  } else {
    device_ = CreateCpuDevice(options_, log_);
  }
  if (options_.wrap_device) device_ = options_.wrap_device(std::move(device_));
  Communicator& grad_comm = nccl_ ? *nccl_ : *host_comm_;
  zero_sharding_.rank = rank_.rank;
  zero_sharding_.all_gather = [this](const float* mine, float* whole, int64_t count) {
    return host_comm_->AllGather(mine, whole, count, nullptr);
  };
  sharding_ = plan_.zero > 0 ? &zero_sharding_ : nullptr;

  // Under a cluster launcher (torchrun, srun) with a shared rendezvous
  // folder, the ranks publish there, and a failing rank prints every
  // rank's position itself (the local launcher does it for its own jobs).
  const char* launcher_positions = std::getenv(kPositionDirEnv);
  if ((launcher_positions == nullptr || *launcher_positions == '\0') &&
      !rank_.rendezvous_dir.empty() && rank_.world_size > 1) {
    std::error_code ignored;
    const std::string dir = rank_.rendezvous_dir + "/positions";
    if (std::filesystem::create_directories(dir, ignored) || std::filesystem::is_directory(dir)) {
      shared_positions_ = dir;
    }
  }
  if (launcher_positions != nullptr) launcher_positions_ = launcher_positions;
  ASSIGN_OR_RETURN(position_, PositionBoard::ForRank(rank_.rank, shared_positions_));
  // A shared board beats, so that a frozen rank shows in the table.
  if (!shared_positions_.empty() || !launcher_positions_.empty()) position_->StartPulse();
  ExecutorOptions exec_options;
  exec_options.overlap = options_.overlap;
  exec_options.capture = options_.graph;
  exec_options.position = position_.get();
  executor_ = std::make_unique<Executor>(plan_, device_.get(), &grad_comm, nullptr,
                                         exec_options);
  RETURN_IF_ERROR(executor_->Prepare());  // (sets the board's labels)
  PublishPositionsToRedis();
  return absl::OkStatus();
}

void Trainer::PublishPositionsToRedis() {
  if (rank_.redis.empty() || rank_.world_size == 1) return;
  const size_t colon = rank_.redis.rfind(':');
  absl::StatusOr<std::unique_ptr<RedisPositions>> redis = RedisPositions::Connect(
      rank_.redis.substr(0, colon), std::atoi(rank_.redis.c_str() + colon + 1), rank_.job);
  if (!redis.ok()) {
    // Only the table is lost: training goes on.
    log_ << "warning: " << redis.status().message() << "; a failure will say only where this "
         << "rank was\n";
    return;
  }
  redis_positions_ = *std::move(redis);
  redis_positions_->StartPublishing(position_.get(), rank_.rank);
}

absl::Status Trainer::SetUpData() {
  ASSIGN_OR_RETURN(train_data_, LoadTrainDataset(plan_));
  if (options_.eval && !plan_.data.eval_paths.empty()) {
    ASSIGN_OR_RETURN(eval_data_, LoadEvalDataset(plan_));
  }
  ASSIGN_OR_RETURN(batches_, TrainBatchSource::Create(&*train_data_, plan_, rank_.rank));
  step_batches_ = batches_.get();
  for (auto& view : step_views_) view = std::make_unique<StepBatches>(batches_.get());
  ASSIGN_OR_RETURN(const Fault fault, FaultFromEnvironment());
  if (fault.kind == Fault::Kind::kLoaderSleep && fault.rank == rank_.rank) {
    sleeping_batches_ = std::make_unique<SleepingBatchSource>(batches_.get(), fault, std::cerr);
    step_batches_ = sleeping_batches_.get();
  }
  ASSIGN_OR_RETURN(eval_head_, FindEvalHead(plan_));
  steps_per_epoch_ = batches_->steps_per_epoch();
  total_steps_ = plan_.steps > 0 ? plan_.steps : plan_.epochs * steps_per_epoch_;
  total_epochs_ = (total_steps_ + steps_per_epoch_ - 1) / steps_per_epoch_;
  dropped_per_epoch_ = train_data_->size() - steps_per_epoch_ * plan_.global_batch;
  if (plan_.schedule.kind == ScheduleKind::kCosine &&
      plan_.schedule.warmup_steps >= total_steps_) {
    // With `steps` the compiler warns at the setting; with epochs the step
    // count is known only now.
    log_ << absl::StrFormat(
        "warning: %s: schedule = cosine(warmup = %d) is as long as the whole run of %d "
        "steps (%d epoch(s) of %d): every step is warm-up, the last at lr * %d/%d, and "
        "the cosine never starts\n",
        plan_.source, plan_.schedule.warmup_steps, total_steps_, plan_.epochs,
        steps_per_epoch_, total_steps_, plan_.schedule.warmup_steps);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetUpWeights() {
  if (!options_.resume.empty()) {
    ASSIGN_OR_RETURN(resumed_from_, ResumeFrom(options_.resume, plan_, *device_, rank_.rank,
                                               &initial_state_, log_));
  } else if (!options_.init_from.empty()) {
    RETURN_IF_ERROR(LoadCheckpoint(options_.init_from, plan_, *device_, &initial_state_,
                                   /*weights_only=*/true, rank_.rank));
    initial_state_ = TrainingState();
  } else {
    RETURN_IF_ERROR(InitializeParameters(plan_, *device_, rank_.rank));
  }
  RETURN_IF_ERROR(device_->Synchronize());
  if (initial_state_.step >= total_steps_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is at step %d, and this run has %d steps: nothing to train "
        "(raise --steps or --epochs to continue it)",
        resumed_from_, initial_state_.step, total_steps_));
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
                   FingerprintRank(plan_, *train_data_, *device_, initial_state_));
  return AgreeBeforeFirstStep(*host_comm_, mine);
}

absl::Status Trainer::StartRun() {
  LogRunHeader();
  identity_ = IdentifyPlan(plan_, options_.input_path, options_.overrides);
  identity_.device = EnumName(device_kind_);
  identity_.overlap = options_.overlap;
  RETURN_IF_ERROR(OpenMetricsLog());
  tracer_.emplace(rank_.rank, rank_.job_start_ns ? rank_.job_start_ns : TraceClockNs());
  first_step_ = initial_state_.step + 1;
  trace_begin_ = total_steps_ - first_step_ >= 2 ? first_step_ + 1 : first_step_;
  trace_end_ = trace_begin_ + std::max<int64_t>(1, options_.trace_steps);
  // With --trace under the local launcher: a rank the launcher stops
  // while it waits in a collective writes its trace from this thread.
  std::function<void()> stop_note_watch;
  if (!options_.trace_path.empty() && !launcher_positions_.empty()) {
    stop_note_watch = [this] {
      if (ReadStopNote(launcher_positions_)) WriteStopTrace("stopped by the launcher");
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
        [this] { return Where(); });
  }
  tty_ = isatty(STDOUT_FILENO) && rank_.rank == 0;
  log_every_ = options_.log_every > 0
                   ? options_.log_every
                   : std::max<int64_t>(1, std::min<int64_t>(steps_per_epoch_ / 5, 200));
  summary_.arena_bytes = plan_.arena_bytes;
  metrics_every_ = std::min<int64_t>(log_every_, 20);
  for (const Buffer& b : plan_.buffers) {
    if (b.kind == BufferKind::kStepScalar && b.name == "grad_sq") grad_sq_ = &b;
  }
  run_start_ = std::chrono::steady_clock::now();
  window_start_ = run_start_;
  return absl::OkStatus();
}

void Trainer::LogRunHeader() {
  log_ << absl::StrFormat(
      "training %s on %d %s rank(s): global_batch %d = %d x %d micro_batch x "
      "%d accumulate | %d steps (%d/epoch, %d samples dropped per epoch) | "
      "arena %s per rank\n",
      plan_.model, plan_.world_size, EnumName(device_kind_), plan_.global_batch,
      plan_.world_size, plan_.micro_batch, plan_.accumulate, total_steps_,
      steps_per_epoch_, dropped_per_epoch_, FormatBytes(plan_.arena_bytes));
  // memory = ...: the plan kept (the whole table is in --compile-only).
  for (absl::string_view line : absl::StrSplit(plan_.memory_choice, '\n')) {
    if (absl::StartsWith(line, "memory ") || absl::StartsWith(line, "  -> ")) {
      log_ << line << "\n";
    }
  }
  if (!plan_.zero_accumulate_choice.empty()) log_ << plan_.zero_accumulate_choice << "\n";
  if (initial_state_.step > 0) {
    log_ << absl::StrFormat("resumed from %s at step %d (epoch %d, step %d)\n",
                            resumed_from_, initial_state_.step, initial_state_.epoch + 1,
                            initial_state_.step_in_epoch);
  }
}

absl::Status Trainer::OpenMetricsLog() {
  metrics_on_ = !options_.metrics_path.empty() || !options_.tensorboard_dir.empty();
  if (!metrics_on_ || rank_.rank != 0) return absl::OkStatus();
  MetricsLogOptions metrics_options;
  metrics_options.jsonl_path = options_.metrics_path;
  metrics_options.tensorboard_dir = options_.tensorboard_dir;
  metrics_options.append = initial_state_.step > 0;  // a resumed run continues its log
  ASSIGN_OR_RETURN(metrics_, MetricsLog::Open(metrics_options));
  WriteMetrics(*metrics_, log_,
               RunRecord(plan_, device_kind_, total_steps_, steps_per_epoch_,
                         initial_state_.step + 1, identity_));
  return absl::OkStatus();
}

// --- Step.

absl::Status Trainer::TrainStep(int64_t step_number) {
  StepInfo step = BeginStep(step_number);
  position_->Stage(RankStage::kStep, step.number);
  RETURN_IF_ERROR(RunOptimizerStep(step));
  if (step.traced && step.number == trace_end_ - 1) KeepTracePart();
  if (metrics_) RecordStepMetrics(step);
  ReportCaptureFailure(step.number);
  ++window_steps_;
  RETURN_IF_ERROR(SumLossesIfDue(step));
  LogProgress(step);

  if (watchdog_) watchdog_->StepDone(step.number);
  const bool eval_due =
      eval_data_.has_value() &&
      (step.epoch_end || step.last ||
       (options_.eval_every > 0 && step.number % options_.eval_every == 0));
  const CheckpointConfig& periodic = plan_.checkpoints;
  const bool checkpoint_due =
      periodic.every > 0 && (step.number % periodic.every == 0 || step.last);
  // ZeRO-1 with zero_gather = next_forward: the parameters are whole
  // only after this (a no-op otherwise); every rank gets here together.
  if (eval_due || checkpoint_due) RETURN_IF_ERROR(executor_->GatherParameters());
  if (eval_due) {
    position_->Stage(RankStage::kEvaluating, step.number);
    RETURN_IF_ERROR(EvaluateAt(step));
  }
  if (watchdog_ && eval_due) watchdog_->StepDone(step.number);

  const TrainingState now = StateAfter(step.number);
  if (checkpoint_due && (rank_.rank == 0 || plan_.zero > 0)) {
    position_->Stage(RankStage::kCheckpointing, step.number);
    RETURN_IF_ERROR(SavePeriodicCheckpoint(now));
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
  step.epoch = (step_number - 1) / steps_per_epoch_;
  step.in_epoch = (step_number - 1) % steps_per_epoch_;
  step.epoch_end = step.in_epoch == steps_per_epoch_ - 1;
  step.last = step_number == total_steps_;
  step.progress_line = step_number % log_every_ == 0 || step.last || step.epoch_end;
  step.start = std::chrono::steady_clock::now();
  batches_->SetPosition(step.epoch, step.in_epoch);
  if (sleeping_batches_) sleeping_batches_->SetStep(step_number);
  step_views_[step_number % 2]->SetStep(step_number);
  step_views_[(step_number + 1) % 2]->SetStep(step_number + 1);
  step.traced = step_number >= trace_begin_ && step_number < trace_end_;
  executor_->set_tracer(step.traced ? &*tracer_ : nullptr);
  step.lr = LearningRateAt(plan_.schedule, plan_.optimizer.lr, step_number,
                           plan_.schedule.total_steps > 0 ? plan_.schedule.total_steps
                                                          : total_steps_);
  return step;
}

absl::Status Trainer::RunOptimizerStep(StepInfo& step) {
  StepState step_state;
  step_state.step = step.number;
  step_state.lr = step.lr;
  // The next step's batches are fed while this one runs; not under an
  // injected loader fault, whose sleep belongs to its own step.
  BatchSource& batches =
      sleeping_batches_ ? *step_batches_ : *step_views_[step.number % 2];
  BatchSource* next =
      sleeping_batches_ || step.last ? nullptr : step_views_[(step.number + 1) % 2].get();
  ASSIGN_OR_RETURN(const double loss_sum, executor_->RunStep(step_state, batches, next));
  // After one step every arena page has been written: the arena is in.
  if (++summary_.steps == 1) {
    summary_.resident_bytes = ResidentBytes();
    summary_.device_host_bytes = device_->HostBytes();
    summary_.comm_host_bytes = host_comm_->HostBytes() + (nccl_ ? nccl_->HostBytes() : 0);
  }
  step_losses_.push_back(static_cast<float>(loss_sum));
  bool skipped = false;
  if (grad_sq_ != nullptr) {
    // Read from the device once per step (4 bytes, after the step's own
    // synchronisation) to tell a non-finite step at once.
    float sq = 0;
    RETURN_IF_ERROR(device_->Download(grad_sq_->offset, &sq, sizeof(sq)));
    step.grad_norm = std::sqrt(static_cast<double>(sq));
    ASSIGN_OR_RETURN(skipped, LeaveOutNonFiniteStep(step.number, step.grad_norm));
  }
  step_skipped_.push_back(skipped);
  return absl::OkStatus();
}

absl::StatusOr<bool> Trainer::LeaveOutNonFiniteStep(int64_t step, double norm) {
  if (std::isfinite(norm)) {
    skipped_in_a_row_ = 0;
    return false;
  }
  if (!plan_.skip_nonfinite) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: the gradient norm is %s%s: training diverged; stopping "
        "without saving (skip_nonfinite = true leaves such steps out)",
        step, std::isnan(norm) ? "nan" : "inf", FirstNonFiniteGradient(plan_, *device_)));
  }
  const int64_t skipped = ++summary_.skipped_steps;  // this one included
  if (++skipped_in_a_row_ >= kMaxSkippedInARow) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: %d steps in a row had a non-finite gradient (skip_nonfinite "
        "left them out)%s: training diverged; stopping without saving",
        step, skipped_in_a_row_, FirstNonFiniteGradient(plan_, *device_)));
  }
  if (skipped <= 10 || skipped % 100 == 0) {
    log_ << absl::StrFormat(
                "%sstep %d: gradient norm %s: step skipped, weights unchanged "
                "(skip_nonfinite; %d so far)%s\n",
                LineStart(), step, std::isnan(norm) ? "nan" : "inf", skipped,
                skipped == 10 ? "; reporting every 100th from now" : "")
         << std::flush;
  }
  return true;
}

void Trainer::RecordStepMetrics(const StepInfo& step) {
  const double ms = Seconds(std::chrono::steady_clock::now() - step.start) * 1e3;
  MetricsRecord r{"train", step.number, UnixSeconds()};
  r.info = {{"epoch", step.epoch + 1}};
  r.scalars = {{"loss", NAN},  // known at the next sum over ranks
               {"lr", step.lr},
               {"step_ms", ms},
               {"samples_per_s", plan_.global_batch / (ms / 1e3)}};
  if (plan_.loss_terms > 1) {
    r.scalars.emplace_back("tokens_per_s", plan_.global_batch * plan_.loss_terms / (ms / 1e3));
  }
  if (grad_sq_ != nullptr) r.scalars.emplace_back("grad_norm", step.grad_norm);
  if (step.traced && plan_.world_size > 1) {
    // This rank's all-reduce time in the step and how much of it no
    // compute hid.
    std::vector<TraceSpan> spans;
    for (const TraceSpan& span : tracer_->spans()) {
      if (span.step == step.number) spans.push_back(span);
    }
    const OverlapStats o = ComputeOverlap(spans);
    if (o.comm_ns > 0) {
      r.scalars.emplace_back("allreduce_ms", o.comm_ns / 1e6);
      r.scalars.emplace_back("exposed_comm_ms", (o.comm_ns - o.hidden_ns) / 1e6);
    }
  }
  pending_metrics_.push_back(std::move(r));
}

void Trainer::KeepTracePart() {
  if (options_.trace_path.empty() || rank_.rendezvous_dir.empty() || rank_.world_size == 1) {
    return;
  }
  // Best effort: Finish writes it again, and says so if it cannot.
  (void)WriteTracePart(rank_, tracer_->EventsJson(plan_));
}

void Trainer::ReportCaptureFailure(int64_t step) {
  if (executor_->capture().failure.empty() || capture_failure_reported_) return;
  log_ << absl::StrFormat(
      "%swarning: step %d could not be captured as a CUDA graph (%s); "
      "every step runs eagerly\n",
      LineStart(), step, executor_->capture().failure);
  capture_failure_reported_ = true;
}

absl::Status Trainer::SumLossesIfDue(const StepInfo& step) {
  if (!step.progress_line && !(metrics_on_ && step.number % metrics_every_ == 0)) {
    return absl::OkStatus();
  }
  position_->CommBegin(HostCollective::kLossSum);
  RETURN_IF_ERROR(SumOverRanks(*host_comm_, &step_losses_));
  position_->CommEnd();
  RETURN_IF_ERROR(CheckLossesFinite(step.number));
  const double terms = static_cast<double>(plan_.global_batch) * plan_.loss_terms;
  last_loss_ = step_losses_.back() / terms;
  for (size_t i = 0; i < pending_metrics_.size(); ++i) {
    pending_metrics_[i].scalars[0].second = step_losses_[i] / terms;
    WriteMetrics(*metrics_, log_, pending_metrics_[i]);
  }
  step_losses_.clear();
  step_skipped_.clear();
  pending_metrics_.clear();
  return absl::OkStatus();
}

absl::Status Trainer::CheckLossesFinite(int64_t step) const {
  const std::vector<float>& losses = step_losses_;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (std::isfinite(losses[i]) || step_skipped_[i]) continue;
    const int64_t bad = step - static_cast<int64_t>(losses.size()) + 1 + static_cast<int64_t>(i);
    return absl::DataLossError(absl::StrFormat(
        "step %d: the loss is %s%s: training diverged; stopping without "
        "saving (lower the learning rate, set clip_grad_norm, or "
        "skip_nonfinite = true to leave such steps out)",
        bad, std::isnan(losses[i]) ? "nan" : losses[i] > 0 ? "inf" : "-inf",
        FirstNonFiniteGradient(plan_, *device_)));
  }
  return absl::OkStatus();
}

void Trainer::LogProgress(const StepInfo& step) {
  if (!step.progress_line && !tty_) return;
  const auto now = std::chrono::steady_clock::now();
  const double step_ms = Seconds(now - window_start_) / window_steps_ * 1e3;
  const std::string eta = FormatDuration(step_ms / 1e3 * (total_steps_ - step.number));
  if (!step.progress_line) {  // rank 0's terminal: redraw the live line
    log_ << absl::StrFormat("\r\033[Kstep %d/%d | eta %s", step.number, total_steps_, eta)
         << std::flush;
    return;
  }
  std::string norm;
  if (grad_sq_ != nullptr) {
    last_grad_norm_ = step.grad_norm;
    norm = absl::StrFormat(" | grad norm %.3g", last_grad_norm_);
  }
  // Language models also count tokens (loss terms) per second.
  const std::string tokens =
      plan_.loss_terms > 1
          ? absl::StrCat(" | ",
                         FormatRate(plan_.global_batch * plan_.loss_terms / (step_ms / 1e3)),
                         " tokens/s")
          : "";
  // Flushed: under the launcher stdout is a pipe or a file, and a long
  // run's progress must show as it happens.
  log_ << absl::StrFormat(
              "%sstep %d/%d | epoch %d/%d | loss %.4f%s | %.2f ms/step | %s "
              "samples/s%s | eta %s\n",
              LineStart(), step.number, total_steps_, step.epoch + 1, total_epochs_,
              last_loss_, norm, step_ms, FormatRate(plan_.global_batch / (step_ms / 1e3)),
              tokens, eta)
       << std::flush;
  window_start_ = now;
  window_steps_ = 0;
}

// --- Evaluation.

absl::Status Trainer::EvaluateAt(const StepInfo& step) {
  ASSIGN_OR_RETURN(last_eval_, Evaluate(plan_, *executor_, *device_, *host_comm_,
                                        *eval_data_, eval_head_));
  LogEvaluation(step);
  if (!metrics_) return absl::OkStatus();
  const bool language_model = eval_head_.rows_per_example > 1;
  MetricsRecord r{"eval", step.number, UnixSeconds()};
  r.info = {{"epoch", step.epoch + 1},
            {language_model ? "tokens" : "examples", last_eval_.examples}};
  r.scalars = {{"loss", last_eval_.loss}};
  if (eval_head_.classification) r.scalars.emplace_back("accuracy", last_eval_.accuracy);
  if (language_model && EvalBitsPerByte() > 0) {
    r.scalars.emplace_back("bits_per_byte", EvalBitsPerByte());
  }
  WriteMetrics(*metrics_, log_, r);
  return absl::OkStatus();
}

// Bits per byte of text of the last evaluation: nats per token / ln 2 over
// the eval text's bytes per token (1 for bytes; the whole eval stream's
// ratio under a tokenizer); 0 when unknown (llm.c shards).
double Trainer::EvalBitsPerByte() const {
  const double bytes_per_token = eval_data_ ? eval_data_->bytes_per_token() : 0.0;
  if (bytes_per_token <= 0) return 0;
  return last_eval_.loss / std::log(2.0) / bytes_per_token;
}

void Trainer::LogEvaluation(const StepInfo& step) {
  // "eval epoch 3" at an epoch's end, "eval step 200 (epoch 1)" between.
  const std::string when =
      step.epoch_end || step.last
          ? absl::StrCat("epoch ", step.epoch + 1)
          : absl::StrCat("step ", step.number, " (epoch ", step.epoch + 1, ")");
  if (eval_head_.classification && eval_head_.rows_per_example > 1) {
    // A language model: the loss is per token; on text it is also bits
    // per byte, comparable across tokenizers.
    log_ << absl::StrFormat(
        "%seval %s | loss %.4f%s | next-token accuracy %.2f%% (%d tokens)\n",
        LineStart(), when, last_eval_.loss,
        EvalBitsPerByte() > 0 ? absl::StrFormat(" | %.3f bits/byte", EvalBitsPerByte()) : "",
        100 * last_eval_.accuracy, last_eval_.examples);
  } else if (eval_head_.classification) {
    log_ << absl::StrFormat("%seval %s | loss %.4f | accuracy %.2f%% (%d examples)\n",
                            LineStart(), when, last_eval_.loss, 100 * last_eval_.accuracy,
                            last_eval_.examples);
  } else {
    log_ << absl::StrFormat("%seval %s | loss %.5f (%d examples)\n", LineStart(), when,
                            last_eval_.loss, last_eval_.examples);
  }
  log_ << std::flush;
}

// --- Checkpoint.

TrainingState Trainer::StateAfter(int64_t step) const {
  TrainingState state;
  state.step = step;
  state.epoch = step / steps_per_epoch_;
  state.step_in_epoch = step % steps_per_epoch_;
  return state;
}

absl::Status Trainer::SavePeriodicCheckpoint(const TrainingState& now) {
  const CheckpointConfig& periodic = plan_.checkpoints;
  const std::string path = CheckpointPath(periodic.dir, now.step);
  absl::Status saved = SaveCheckpoint(path, plan_, *device_, now, sharding_);
  if (rank_.rank != 0) return saved;  // ZeRO-1: this rank's part of the gather
  if (!saved.ok()) {
    // A full disk: the writes were temporary files, now gone; the
    // checkpoints already there are whole.
    absl::StatusOr<std::vector<std::string>> kept = CheckpointsNewestFirst(periodic.dir);
    return absl::Status(saved.code(), absl::StrCat(
        "step ", now.step, ": checkpoint not written: ", saved.message(), "; ",
        kept.ok() && !kept->empty()
            ? absl::StrCat("the newest whole one is ", kept->front(),
                           " (continue with --resume ", periodic.dir, ")")
            : std::string("no earlier checkpoint")));
  }
  RETURN_IF_ERROR(PruneCheckpoints(periodic.dir, periodic.keep));
  log_ << absl::StrFormat("%scheckpoint %s\n", LineStart(), path) << std::flush;
  return absl::OkStatus();
}

// --- Stop.

absl::Status Trainer::StopIfAsked(const TrainingState& now) {
  constexpr std::array<int, 3> kStops = {SIGINT, SIGTERM, SIGHUP};
  std::vector<float> stop(kStops.size(), 0.0f);
  for (size_t k = 0; k < kStops.size(); ++k) stop[k] = g_stop_signal == kStops[k];
  position_->CommBegin(HostCollective::kStopVote);
  RETURN_IF_ERROR(SumOverRanks(*host_comm_, &stop));
  position_->CommEnd();
  for (size_t k = 0; k < kStops.size() && g_agreed_stop_signal == 0; ++k) {
    if (stop[k] > 0) g_agreed_stop_signal = kStops[k];
  }
  if (g_agreed_stop_signal == 0) return absl::OkStatus();
  const CheckpointConfig& periodic = plan_.checkpoints;
  RETURN_IF_ERROR(executor_->GatherParameters());
  const std::string path = StopCheckpointPath(plan_, options_, now.step);
  const bool written = periodic.every > 0 && now.step % periodic.every == 0;
  if (!written && rank_.rank != 0 && plan_.zero > 0) {
    RETURN_IF_ERROR(SaveCheckpoint(path, plan_, *device_, now, sharding_));
  }
  if (rank_.rank == 0) {
    if (!written) {
      const std::string folder = std::filesystem::path(path).parent_path().string();
      RETURN_IF_ERROR(PrepareCheckpointFolder(folder.empty() ? "." : folder));
      RETURN_IF_ERROR(SaveCheckpoint(path, plan_, *device_, now, sharding_));
    }
    if (periodic.every > 0) RETURN_IF_ERROR(PruneCheckpoints(periodic.dir, periodic.keep));
  }
  RETURN_IF_ERROR(host_comm_->Barrier());
  const int sig = g_agreed_stop_signal;
  return absl::CancelledError(absl::StrFormat(
      "stopped at step %d of %d (%s, signal %d on %s); checkpoint %s; "
      "continue with --resume %s",
      now.step, total_steps_, strsignal(sig), sig,
      g_stop_signal != 0 ? "this rank" : "another rank", path,
      periodic.every > 0 ? periodic.dir : path));
}

// --- Summary.

absl::StatusOr<TrainSummary> Trainer::Finish() {
  FillSummary();
  if (metrics_) RecordSummaryMetrics();
  if (!options_.trace_path.empty()) {
    RETURN_IF_ERROR(
        WriteTrace(plan_, rank_, *tracer_, *host_comm_, options_.trace_path, identity_));
    log_ << "trace: " << options_.trace_path << " (" << tracer_->steps_traced()
         << " steps; open in https://ui.perfetto.dev or tools/viz)\n";
  }
  if (!options_.save_path.empty()) RETURN_IF_ERROR(SaveFinalCheckpoint());
  LogSummary();
  // The ranks leave together, after rank 0's --save: one that closed its
  // sockets while a peer was still finishing the last collective would
  // fail that peer's run.
  if (plan_.world_size > 1) RETURN_IF_ERROR(host_comm_->Barrier());
  return summary_;
}

void Trainer::FillSummary() {
  summary_.seconds = Seconds(std::chrono::steady_clock::now() - run_start_);
  summary_.final_step = std::max(initial_state_.step, total_steps_);
  summary_.samples_per_second =
      summary_.seconds > 0 ? summary_.steps * plan_.global_batch / summary_.seconds : 0;
  summary_.final_loss = last_loss_;
  summary_.grad_norm = last_grad_norm_;
  summary_.replayed_steps = executor_->capture().replayed_steps;
  summary_.eval_accuracy = last_eval_.accuracy;
  summary_.eval_loss = eval_data_ ? last_eval_.loss : -1;
  const OverlapStats overlap = ComputeOverlap(tracer_->spans());
  if (overlap.steps > 0) {
    summary_.allreduce_ms = overlap.comm_ns / 1e6 / overlap.steps;
    summary_.hidden_fraction = overlap.hidden_fraction();
  }
}

void Trainer::RecordSummaryMetrics() {
  MetricsRecord r{"summary", summary_.final_step, UnixSeconds()};
  r.info = {{"steps", summary_.steps},
            {"seconds", summary_.seconds},
            {"samples_per_s", summary_.samples_per_second},
            {"final_loss", summary_.final_loss}};
  if (summary_.resident_bytes > 0) {
    r.info.emplace_back("resident_bytes", static_cast<double>(summary_.resident_bytes));
    r.info.emplace_back("device_host_bytes", static_cast<double>(summary_.device_host_bytes));
    r.info.emplace_back("comm_host_bytes", static_cast<double>(summary_.comm_host_bytes));
  }
  if (eval_data_) r.info.emplace_back("eval_loss", summary_.eval_loss);
  if (summary_.eval_accuracy >= 0) {
    r.info.emplace_back("eval_accuracy", summary_.eval_accuracy);
  }
  if (summary_.hidden_fraction >= 0 && plan_.world_size > 1) {
    r.info.emplace_back("allreduce_ms", summary_.allreduce_ms);
    r.info.emplace_back("hidden_fraction", summary_.hidden_fraction);
  }
  WriteMetrics(*metrics_, log_, r);
  if (!metrics_->jsonl_path().empty()) log_ << "metrics: " << metrics_->jsonl_path() << "\n";
  if (!metrics_->tensorboard_path().empty()) {
    log_ << "tensorboard: " << metrics_->tensorboard_path()
         << " (tensorboard --logdir " << options_.tensorboard_dir << ")\n";
  }
}

absl::Status Trainer::SaveFinalCheckpoint() {
  RETURN_IF_ERROR(executor_->GatherParameters());
  const TrainingState out = StateAfter(summary_.final_step);
  if (rank_.rank == 0 || plan_.zero > 0) {
    RETURN_IF_ERROR(SaveCheckpoint(options_.save_path, plan_, *device_, out, sharding_));
  }
  if (rank_.rank == 0) {
    log_ << "checkpoint: " << options_.save_path << " (step " << out.step << ")\n";
  }
  // The other ranks wait for this write at Finish's barrier.
  return absl::OkStatus();
}

void Trainer::LogSummary() {
  log_ << "\nsummary\n";
  log_ << absl::StrFormat("  steps           %d (to step %d), %s\n", summary_.steps,
                          summary_.final_step, FormatDuration(summary_.seconds));
  log_ << absl::StrFormat("  throughput      %s samples/s, %.2f ms/step\n",
                          FormatRate(summary_.samples_per_second),
                          summary_.steps ? summary_.seconds * 1e3 / summary_.steps : 0.0);
  log_ << absl::StrFormat("  final loss      %.4f\n", summary_.final_loss);
  if (summary_.grad_norm >= 0) {
    log_ << absl::StrFormat("  grad norm       %.4g (last step, before clipping to %g)\n",
                            summary_.grad_norm, plan_.clip_grad_norm);
  }
  if (summary_.eval_accuracy >= 0) {
    log_ << absl::StrFormat("  eval accuracy   %.2f%% (eval loss %.4f)\n",
                            100 * summary_.eval_accuracy, summary_.eval_loss);
  } else if (summary_.eval_loss >= 0) {
    log_ << absl::StrFormat("  eval loss       %.5f\n", summary_.eval_loss);
  }
  if (device_kind_ == DeviceKind::kCpu) {
    log_ << "  matrix products " << cpu::BlasSummary(cpu::DescribeBlas()) << "\n";
  }
  log_ << absl::StrFormat("  arena           %s per rank (%s without reuse)\n",
                          FormatBytes(plan_.arena_bytes),
                          FormatBytes(plan_.memory.unshared_bytes));
  if (summary_.resident_bytes > 0) {
    const TrainSummary& s = summary_;
    log_ << absl::StrFormat(
        "  resident        %s after the first step (rank %d's process): %s the device's "
        "arena, staging and scratch + %s the communicators' buffers + %s the rest (code, "
        "data, libraries)\n",
        FormatBytes(s.resident_bytes), rank_.rank, FormatBytes(s.device_host_bytes),
        FormatBytes(s.comm_host_bytes),
        FormatBytes(s.resident_bytes - s.device_host_bytes - s.comm_host_bytes));
  }
  if (device_->SupportsCapture()) {
    const CaptureInfo& capture = executor_->capture();
    if (capture.replayed_steps > 0) {
      log_ << absl::StrFormat(
          "  cuda graph      %d of %d steps replayed (captured at step %d)\n",
          capture.replayed_steps, summary_.steps, capture.captured_step);
    } else {
      log_ << absl::StrFormat("  cuda graph      not used: %s\n",
                              !capture.failure.empty() ? capture.failure
                              : !capture.unavailable.empty()
                                  ? capture.unavailable
                                  : "no untraced step after the warm-up step");
    }
  }
  if (summary_.hidden_fraction >= 0 && plan_.world_size > 1) {
    log_ << absl::StrFormat(
        "  all-reduce      %.3f ms/step, %.0f%% hidden behind backward (%s)\n",
        summary_.allreduce_ms, 100 * summary_.hidden_fraction,
        options_.overlap ? "overlap on" : "overlap off");
  }
  if (dropped_per_epoch_ > 0) {
    log_ << absl::StrFormat(
        "  drop_last       %d samples per epoch not in a full global batch\n",
        dropped_per_epoch_);
  }
  if (plan_.skip_nonfinite) {
    log_ << absl::StrFormat("  skipped         %d step(s) with a non-finite gradient\n",
                            summary_.skipped_steps);
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
