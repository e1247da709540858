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
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/comm/mpi/mpi_communicator.h"
#include "runtime/comm/nccl/nccl_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"
#include "runtime/device/device.h"
#include "runtime/exec/executor.h"
#include "runtime/launch/heartbeat.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/trace/tracer.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/overlap.h"
#include "runtime/train/schedule.h"

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

absl::StatusOr<std::string> ResolveDevice(const std::string& requested,
                                          int world_size) {
  // Not asked for cpu: counting GPUs loads the CUDA plugin where there is a
  // driver (cuda_device.h).
  if (requested == "cpu") return std::string("cpu");
  if (requested != "cuda" && requested != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device: '", requested, "' is not one of cpu, cuda, auto"));
  }
  const int gpus = CudaDeviceCount();
  if (requested == "auto") return std::string(gpus > 0 ? "cuda" : "cpu");
  if (gpus == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: no CUDA GPU is visible on this machine (",
        CudaUnavailableReason(), "; use --device cpu or auto)"));
  }
  return std::string("cuda");
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

// --resume: a checkpoint file, or a folder of them (the newest that loads).
absl::StatusOr<std::string> ResumeFrom(const std::string& path, const Plan& plan,
                                       Device& device, int rank, TrainingState* state,
                                       std::ostream& log) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    RETURN_IF_ERROR(
        LoadCheckpoint(path, plan, device, state, /*weights_only=*/false, rank));
    return path;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> candidates, CheckpointsNewestFirst(path));
  for (const std::string& candidate : candidates) {
    absl::Status loaded =
        LoadCheckpoint(candidate, plan, device, state, /*weights_only=*/false, rank);
    if (loaded.ok()) return candidate;
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

absl::StatusOr<PlanOptions> PlanOptionsForDevice(const std::string& device) {
  ASSIGN_OR_RETURN(std::string kind, ResolveDevice(device, 1));
  PlanOptions options;
  // bucket_mb = auto without a train { machine }: the device's profile.
  options.default_machine = kind == "cuda" ? "h100_nvlink_ib" : "cpu_loopback";
  if (kind == "cuda") {
    options.workspace = CudaWorkspaceBytes;
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
absl::Status InitializeParameters(const Plan& plan, Device& device) {
  SplitMix64 rng(static_cast<uint64_t>(plan.seed) * 0x9E3779B97F4A7C15ull +
                 0x5EEDull);
  std::vector<float> host;
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    host.assign(b.bytes / sizeof(float), 0.0f);
    if (b.init == "ones") {
      std::fill(host.begin(), host.end(), 1.0f);
    } else if (b.init == "uniform") {
      for (float& v : host) {
        // 24 random bits -> [0, 1), exactly representable in float.
        const double u = static_cast<double>(rng.Next() >> 40) / (1 << 24);
        v = static_cast<float>((2.0 * u - 1.0) * b.init_bound);
      }
    } else if (b.init == "normal") {
      // Box-Muller on 53-bit uniforms; u1 in (0, 1] keeps the log finite.
      for (size_t i = 0; i < host.size(); i += 2) {
        const double u1 = (static_cast<double>(rng.Next() >> 11) + 1.0) / 9007199254740992.0;
        const double u2 = static_cast<double>(rng.Next() >> 11) / 9007199254740992.0;
        const double r = std::sqrt(-2.0 * std::log(u1)) * b.init_bound;
        host[i] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
        if (i + 1 < host.size()) host[i + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
      }
    } else if (b.init != "zeros" && !b.init.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter ", b.name, ": unknown init '", b.init, "'"));
    }
    RETURN_IF_ERROR(device.Upload(b.offset, host.data(), b.bytes));
  }
  return absl::OkStatus();
}

// Sums `values` over every rank (host memory, through Gloo).
absl::Status SumOverRanks(Communicator& comm, std::vector<float>* values) {
  if (comm.world_size() == 1) return absl::OkStatus();
  return comm.AllReduceSum(values->data(), static_cast<int64_t>(values->size()),
                           nullptr);
}

absl::Status WriteTrace(const Plan& plan, const RankContext& rank,
                        const Tracer& tracer, Communicator& comm,
                        const std::string& path) {
  const std::string part = tracer.EventsJson(plan);
  if (rank.world_size == 1) {
    return MergeTraceParts(plan, {part}, tracer.steps_traced(), path);
  }
  if (rank.rendezvous_dir.empty()) {
    // No folder the ranks share (Redis rendezvous): each machine keeps its
    // ranks' traces, PATH.rank<N>.json.
    return MergeTraceParts(plan, {part}, tracer.steps_traced(),
                           absl::StrCat(path, ".rank", rank.rank, ".json"));
  }
  // Ranks meet in the rendezvous folder: each writes its part, rank 0
  // merges once every part is there.
  const std::string mine =
      absl::StrCat(rank.rendezvous_dir, "/trace.rank", rank.rank, ".json");
  {
    std::ofstream out(mine, std::ios::binary);
    out << part;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", mine));
  }
  RETURN_IF_ERROR(comm.Barrier());
  if (rank.rank != 0) return absl::OkStatus();
  std::vector<std::string> parts;
  for (int r = 0; r < rank.world_size; ++r) {
    const std::string p =
        absl::StrCat(rank.rendezvous_dir, "/trace.rank", r, ".json");
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) return absl::InternalError(absl::StrCat("cannot read ", p));
    parts.push_back(ss.str());
  }
  return MergeTraceParts(plan, parts, tracer.steps_traced(), path);
}

// The metrics log's first record: what was run, for a reader to label and
// compare runs by.
MetricsRecord RunRecord(const Plan& plan, const std::string& device,
                        int64_t total_steps, int64_t steps_per_epoch,
                        int64_t first_step) {
  MetricsRecord r{"run", first_step - 1, UnixSeconds()};
  r.info = {{"model", plan.model},
            {"source", plan.source},
            {"device", device},
            {"gpus", int64_t{plan.world_size}},
            {"micro_batch", int64_t{plan.micro_batch}},
            {"accumulate", int64_t{plan.accumulate}},
            {"global_batch", int64_t{plan.global_batch}},
            {"loss_terms", int64_t{plan.loss_terms}},
            {"steps", total_steps},
            {"steps_per_epoch", steps_per_epoch},
            {"optimizer", plan.optimizer.kind},
            {"lr", double{plan.optimizer.lr}},
            {"seed", int64_t{plan.seed}}};
  return r;
}

// With clipping or skip_nonfinite, after each step: whether the step was
// left out because its gradient norm is not finite (the optimizers left the
// weights and their state alone, plan.h). Without skip_nonfinite that is a
// divergence, found at its step (not at the next log line), as the same
// decision on every rank (the norm is the world's); so are
// kMaxSkippedInARow skipped steps in a row.
absl::StatusOr<bool> LeaveOutNonFiniteStep(const Plan& plan, Device& device, int64_t step,
                                           double norm, bool tty, int64_t* skipped_steps,
                                           int64_t* skipped_in_a_row, std::ostream& log) {
  if (std::isfinite(norm)) {
    *skipped_in_a_row = 0;
    return false;
  }
  if (!plan.skip_nonfinite) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: the gradient norm is %s%s: training diverged; stopping "
        "without saving (skip_nonfinite = true leaves such steps out)",
        step, std::isnan(norm) ? "nan" : "inf", FirstNonFiniteGradient(plan, device)));
  }
  ++*skipped_steps;
  if (++*skipped_in_a_row >= kMaxSkippedInARow) {
    return absl::DataLossError(absl::StrFormat(
        "step %d: %d steps in a row had a non-finite gradient (skip_nonfinite "
        "left them out)%s: training diverged; stopping without saving",
        step, *skipped_in_a_row, FirstNonFiniteGradient(plan, device)));
  }
  if (*skipped_steps <= 10 || *skipped_steps % 100 == 0) {
    log << absl::StrFormat(
               "%sstep %d: gradient norm %s: step skipped, weights unchanged "
               "(skip_nonfinite; %d so far)%s\n",
               tty ? "\r\033[K" : "", step, std::isnan(norm) ? "nan" : "inf", *skipped_steps,
               *skipped_steps == 10 ? "; reporting every 100th from now" : "")
        << std::flush;
  }
  return true;
}

// The checkpoint every checkpoints.every steps (and at the last), written
// by rank 0 (under ZeRO-1 every rank takes part in the gather), then the
// folder pruned. A full disk stops the run naming the newest whole one.
absl::Status SavePeriodicCheckpoint(const Plan& plan, Device& device, const Sharding* sharding,
                                    int rank, const TrainingState& now, bool tty,
                                    std::ostream& log) {
  const CheckpointConfig& periodic = plan.checkpoints;
  const std::string path = CheckpointPath(periodic.dir, now.step);
  absl::Status saved = SaveCheckpoint(path, plan, device, now, sharding);
  if (rank != 0) return saved;  // ZeRO-1: this rank's part of the gather
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
  log << absl::StrFormat("%scheckpoint %s\n", tty ? "\r\033[K" : "", path) << std::flush;
  return absl::OkStatus();
}

// A stop signal (preemption, Ctrl-C) reaches the ranks at different steps:
// they agree at the next check (one small sum over ranks, which also tells
// every rank which signal) and stop together at that step boundary, with
// one checkpoint. OK when no rank was asked to stop; CANCELLED, saying
// where the checkpoint is, when the run stops here.
absl::Status StopIfAsked(const Plan& plan, const TrainOptions& options, Executor& executor,
                         Device& device, Communicator& host_comm, const Sharding* sharding,
                         int rank, const TrainingState& now, int64_t total_steps) {
  constexpr std::array<int, 3> kStops = {SIGINT, SIGTERM, SIGHUP};
  std::vector<float> stop(kStops.size(), 0.0f);
  for (size_t k = 0; k < kStops.size(); ++k) stop[k] = g_stop_signal == kStops[k];
  RETURN_IF_ERROR(SumOverRanks(host_comm, &stop));
  for (size_t k = 0; k < kStops.size() && g_agreed_stop_signal == 0; ++k) {
    if (stop[k] > 0) g_agreed_stop_signal = kStops[k];
  }
  if (g_agreed_stop_signal == 0) return absl::OkStatus();
  const CheckpointConfig& periodic = plan.checkpoints;
  RETURN_IF_ERROR(executor.GatherParameters());
  const std::string path = StopCheckpointPath(plan, options, now.step);
  const bool written = periodic.every > 0 && now.step % periodic.every == 0;
  if (!written && rank != 0 && plan.zero > 0) {
    RETURN_IF_ERROR(SaveCheckpoint(path, plan, device, now, sharding));
  }
  if (rank == 0) {
    if (!written) {
      const std::string folder = std::filesystem::path(path).parent_path().string();
      RETURN_IF_ERROR(PrepareCheckpointFolder(folder.empty() ? "." : folder));
      RETURN_IF_ERROR(SaveCheckpoint(path, plan, device, now, sharding));
    }
    if (periodic.every > 0) RETURN_IF_ERROR(PruneCheckpoints(periodic.dir, periodic.keep));
  }
  RETURN_IF_ERROR(host_comm.Barrier());
  const int sig = g_agreed_stop_signal;
  return absl::CancelledError(absl::StrFormat(
      "stopped at step %d of %d (%s, signal %d on %s); checkpoint %s; "
      "continue with --resume %s",
      now.step, total_steps, strsignal(sig), sig,
      g_stop_signal != 0 ? "this rank" : "another rank", path,
      periodic.every > 0 ? periodic.dir : path));
}

// The world's loss sums of the steps up to `step` (the last one is
// `step`'s): a non-finite one that skip_nonfinite did not leave out stops
// the run on every rank alike, before anything is saved over a good
// checkpoint.
absl::Status CheckLossesFinite(const Plan& plan, Device& device, int64_t step,
                               const std::vector<float>& losses,
                               const std::vector<bool>& skipped) {
  for (size_t i = 0; i < losses.size(); ++i) {
    if (std::isfinite(losses[i]) || skipped[i]) continue;
    const int64_t bad = step - static_cast<int64_t>(losses.size()) + 1 + static_cast<int64_t>(i);
    return absl::DataLossError(absl::StrFormat(
        "step %d: the loss is %s%s: training diverged; stopping without "
        "saving (lower the learning rate, set clip_grad_norm, or "
        "skip_nonfinite = true to leave such steps out)",
        bad, std::isnan(losses[i]) ? "nan" : losses[i] > 0 ? "inf" : "-inf",
        FirstNonFiniteGradient(plan, device)));
  }
  return absl::OkStatus();
}

// The host communicator of one rank (host-side sums, barriers, NCCL's
// bootstrap): Gloo, or MPI with rank.comm == "mpi" (mpirun jobs). On the
// CPU it carries the gradients too; on CUDA NCCL does.
absl::StatusOr<std::unique_ptr<Communicator>> CreateHostCommunicator(const RankContext& rank) {
  std::unique_ptr<Communicator> host_comm;
  if (rank.comm == "mpi") {
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
  } else if (rank.comm == "gloo") {
    if (rank.world_size > 1 && rank.rendezvous_dir.empty() && rank.redis.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Gloo needs a rendezvous for ", rank.world_size, " ranks: set ",
          "TRAINC_RENDEZVOUS_DIR (a shared folder) or --rendezvous "
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
    gloo.hostname = rank.hostname;
    // A peer silent this long fails the collective: with the launcher's 5 s
    // grace period a stuck job ends within 30 s.
    gloo.timeout = absl::Seconds(20);
    ASSIGN_OR_RETURN(host_comm, GlooCommunicator::Create(gloo));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown communicator '", rank.comm, "' (gloo or mpi)"));
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
  return std::make_unique<CpuDevice>(cpu);
}

}  // namespace

absl::StatusOr<TrainSummary> TrainRank(const Plan& plan,
                                       const RankContext& rank,
                                       const TrainOptions& options,
                                       std::ostream& log_stream) {
  std::ostringstream discard;
  std::ostream& log = rank.rank == 0 ? log_stream : discard;
  if (plan.world_size != rank.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan is for ", plan.world_size, " rank(s) but the job has ",
        rank.world_size));
  }
  ASSIGN_OR_RETURN(const std::string device_kind,
                   ResolveDevice(options.device, rank.world_size));
  if (device_kind == "cuda" && rank.local_rank >= CudaDeviceCount()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank.rank, " needs GPU ", rank.local_rank, " but this machine has ",
        CudaDeviceCount()));
  }

  // Communicators: the host one (host-side sums, barriers, NCCL's
  // bootstrap); on CUDA NCCL carries the gradients.
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host_comm, CreateHostCommunicator(rank));
  std::unique_ptr<Communicator> nccl;
  std::unique_ptr<Device> device;
  if (device_kind == "cuda") {
    ASSIGN_OR_RETURN(device, CreateCudaDevice(rank.local_rank));
    ASSIGN_OR_RETURN(nccl, CreateNcclCommunicator(rank.rank, rank.world_size,
                                                  rank.local_rank, *host_comm));
  } else {
    device = CreateCpuDevice(options, log);
  }
  Communicator& grad_comm = nccl ? *nccl : *host_comm;
  // ZeRO-1 checkpoints: every rank's optimizer state shard, over the host
  // communicator (the device is idle then).
  Sharding zero_sharding;
  zero_sharding.rank = rank.rank;
  zero_sharding.all_gather = [&host_comm](const float* mine, float* whole,
                                          int64_t count) {
    return host_comm->AllGather(mine, whole, count, nullptr);
  };
  const Sharding* sharding = plan.zero > 0 ? &zero_sharding : nullptr;

  ExecutorOptions exec_options;
  exec_options.overlap = options.overlap;
  exec_options.capture = options.graph;
  Executor executor(plan, device.get(), &grad_comm, nullptr, exec_options);
  RETURN_IF_ERROR(executor.Prepare());

  // Data.
  ASSIGN_OR_RETURN(Dataset train, LoadTrainDataset(plan));
  std::optional<Dataset> eval;
  if (options.eval && !plan.data.eval_paths.empty()) {
    ASSIGN_OR_RETURN(eval, LoadEvalDataset(plan));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TrainBatchSource> batches,
                   TrainBatchSource::Create(&train, plan, rank.rank));
  ASSIGN_OR_RETURN(EvalHead head, FindEvalHead(plan));
  const int64_t steps_per_epoch = batches->steps_per_epoch();
  const int64_t total_steps =
      plan.steps > 0 ? plan.steps : plan.epochs * steps_per_epoch;
  const int64_t total_epochs =
      (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  const int64_t dropped = train.size() - steps_per_epoch * plan.global_batch;
  if (plan.schedule.kind == "cosine" && plan.schedule.warmup_steps >= total_steps) {
    // With `steps` the compiler warns at the setting; with epochs the step
    // count is known only now.
    log << absl::StrFormat(
        "warning: %s: schedule = cosine(warmup = %d) is as long as the whole run of %d "
        "steps (%d epoch(s) of %d): every step is warm-up, the last at lr * %d/%d, and "
        "the cosine never starts\n",
        plan.source, plan.schedule.warmup_steps, total_steps, plan.epochs, steps_per_epoch,
        total_steps, plan.schedule.warmup_steps);
  }

  // Weights.
  TrainingState state;
  std::string resumed_from;
  if (!options.resume.empty()) {
    ASSIGN_OR_RETURN(resumed_from,
                     ResumeFrom(options.resume, plan, *device, rank.rank, &state, log));
  } else if (!options.init_from.empty()) {
    RETURN_IF_ERROR(LoadCheckpoint(options.init_from, plan, *device, &state,
                                   /*weights_only=*/true));
    state = TrainingState();
  } else {
    RETURN_IF_ERROR(InitializeParameters(plan, *device));
  }
  RETURN_IF_ERROR(device->Synchronize());
  if (state.step >= total_steps) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is at step %d, and this run has %d steps: nothing to train "
        "(raise --steps or --epochs to continue it)",
        resumed_from, state.step, total_steps));
  }
  if (plan.checkpoints.every > 0 && rank.rank == 0) {
    RETURN_IF_ERROR(PrepareCheckpointFolder(plan.checkpoints.dir));
  }
  const StopSignalScope stop_signals;

  log << absl::StrFormat(
      "training %s on %d %s rank(s): global_batch %d = %d x %d micro_batch x "
      "%d accumulate | %d steps (%d/epoch, %d samples dropped per epoch) | "
      "arena %s per rank\n",
      plan.model, plan.world_size, device_kind, plan.global_batch,
      plan.world_size, plan.micro_batch, plan.accumulate, total_steps,
      steps_per_epoch, dropped, FormatBytes(plan.arena_bytes));
  if (state.step > 0) {
    log << absl::StrFormat("resumed from %s at step %d (epoch %d, step %d)\n",
                           resumed_from, state.step, state.epoch + 1,
                           state.step_in_epoch);
  }

  // The metrics log (rank 0). Whether there is one is the same on every
  // rank (one command line), and so is the schedule of loss sums it adds.
  const bool metrics_on =
      !options.metrics_path.empty() || !options.tensorboard_dir.empty();
  std::unique_ptr<MetricsLog> metrics;
  if (metrics_on && rank.rank == 0) {
    MetricsLogOptions metrics_options;
    metrics_options.jsonl_path = options.metrics_path;
    metrics_options.tensorboard_dir = options.tensorboard_dir;
    metrics_options.append = state.step > 0;  // a resumed run continues its log
    ASSIGN_OR_RETURN(metrics, MetricsLog::Open(metrics_options));
    WriteMetrics(*metrics, log,
                 RunRecord(plan, device_kind, total_steps, steps_per_epoch, state.step + 1));
  }

  // A few steps are traced (after the first, which warms caches) to measure
  // overlap; all of them go to --trace when asked.
  Tracer tracer(rank.rank, rank.job_start_ns ? rank.job_start_ns : TraceClockNs());
  const int64_t first_step = state.step + 1;
  const int64_t trace_begin =
      total_steps - first_step >= 2 ? first_step + 1 : first_step;
  const int64_t trace_end = trace_begin + std::max<int64_t>(1, options.trace_steps);

  // The launcher's watchdog hears from a pulse thread rather than from the
  // step loop: a rank blocked in a collective because a peer froze is alive
  // and must not be the one blamed. So silence means this process itself
  // is frozen or gone; a rank whose loop is stuck while the process lives
  // is caught by its peers' communicator timeout instead.
  Heartbeat heartbeat = Heartbeat::FromEnvironment();
  absl::Notification stop_pulse;
  std::thread pulse;
  if (heartbeat.enabled()) {
    pulse = std::thread([&heartbeat, &stop_pulse] {
      do {
        heartbeat.Beat();
      } while (!stop_pulse.WaitForNotificationWithTimeout(absl::Milliseconds(500)));
    });
  }
  struct JoinPulse {
    absl::Notification& stop;
    std::thread& thread;
    ~JoinPulse() {
      if (!thread.joinable()) return;
      stop.Notify();
      thread.join();
    }
  } join_pulse{stop_pulse, pulse};
  const bool tty = isatty(STDOUT_FILENO) && rank.rank == 0;
  const int64_t log_every =
      options.log_every > 0
          ? options.log_every
          : std::max<int64_t>(1, std::min<int64_t>(steps_per_epoch / 5, 200));
  TrainSummary summary;
  summary.arena_bytes = plan.arena_bytes;
  EvalResult last_eval;
  // Each step's local loss sum until the next sum over ranks (one
  // all-reduce for all of them), and on rank 0 the step's other metrics.
  std::vector<float> step_losses;
  std::vector<bool> step_skipped;  // skip_nonfinite, aligned with step_losses
  int64_t skipped_in_a_row = 0;
  std::vector<MetricsRecord> pending;
  // Per-step losses reach the metrics log at least this often (in steps)
  // even when progress lines are rarer.
  const int64_t metrics_every = std::min<int64_t>(log_every, 20);
  double last_loss = NAN;
  double last_grad_norm = -1;
  const Buffer* grad_sq = nullptr;
  for (const Buffer& b : plan.buffers) {
    if (b.kind == BufferKind::kStepScalar && b.name == "grad_sq") grad_sq = &b;
  }
  bool capture_failure_reported = false;
  const auto start = std::chrono::steady_clock::now();
  auto window_start = start;
  int64_t window_steps = 0;

  for (int64_t step = first_step; step <= total_steps; ++step) {
    const int64_t epoch = (step - 1) / steps_per_epoch;
    const int64_t in_epoch = (step - 1) % steps_per_epoch;
    const auto step_start = std::chrono::steady_clock::now();
    batches->SetPosition(epoch, in_epoch);
    const bool traced = step >= trace_begin && step < trace_end;
    executor.set_tracer(traced ? &tracer : nullptr);
    StepState step_state;
    step_state.step = step;
    step_state.lr = LearningRateAt(plan.schedule, plan.optimizer.lr, step,
                                   plan.schedule.total_steps > 0
                                       ? plan.schedule.total_steps
                                       : total_steps);
    ASSIGN_OR_RETURN(double loss_sum, executor.RunStep(step_state, *batches));
    ++summary.steps;
    step_losses.push_back(static_cast<float>(loss_sum));
    // With clipping or skip_nonfinite, the step's global gradient norm (the
    // same on every rank: it is computed from the reduced gradient), read
    // from the device once per step (4 bytes, after the step's own
    // synchronisation) to tell a non-finite step at once.
    std::optional<double> step_grad_norm;
    auto grad_norm = [&]() -> absl::StatusOr<double> {
      if (!step_grad_norm) {
        float sq = 0;
        RETURN_IF_ERROR(device->Download(grad_sq->offset, &sq, sizeof(sq)));
        step_grad_norm = std::sqrt(static_cast<double>(sq));
      }
      return *step_grad_norm;
    };
    bool skipped = false;
    if (grad_sq != nullptr) {
      ASSIGN_OR_RETURN(const double norm, grad_norm());
      ASSIGN_OR_RETURN(skipped, LeaveOutNonFiniteStep(plan, *device, step, norm, tty,
                                                      &summary.skipped_steps,
                                                      &skipped_in_a_row, log));
    }
    step_skipped.push_back(skipped);
    if (metrics) {
      const double ms = Seconds(std::chrono::steady_clock::now() - step_start) * 1e3;
      MetricsRecord r{"train", step, UnixSeconds()};
      r.info = {{"epoch", epoch + 1}};
      r.scalars = {{"loss", NAN},  // known at the next sum over ranks
                   {"lr", step_state.lr},
                   {"step_ms", ms},
                   {"samples_per_s", plan.global_batch / (ms / 1e3)}};
      if (plan.loss_terms > 1) {
        r.scalars.emplace_back("tokens_per_s",
                               plan.global_batch * plan.loss_terms / (ms / 1e3));
      }
      if (grad_sq != nullptr) {
        ASSIGN_OR_RETURN(const double norm, grad_norm());
        r.scalars.emplace_back("grad_norm", norm);
      }
      if (traced && plan.world_size > 1) {
        // This rank's all-reduce time in the step and how much of it no
        // compute hid.
        std::vector<TraceSpan> spans;
        for (const TraceSpan& span : tracer.spans()) {
          if (span.step == step) spans.push_back(span);
        }
        const OverlapStats o = ComputeOverlap(spans);
        if (o.comm_ns > 0) {
          r.scalars.emplace_back("allreduce_ms", o.comm_ns / 1e6);
          r.scalars.emplace_back("exposed_comm_ms", (o.comm_ns - o.hidden_ns) / 1e6);
        }
      }
      pending.push_back(std::move(r));
    }
    if (!executor.capture().failure.empty() && !capture_failure_reported) {
      log << absl::StrFormat(
          "%swarning: step %d could not be captured as a CUDA graph (%s); "
          "every step runs eagerly\n",
          tty ? "\r\033[K" : "", step, executor.capture().failure);
      capture_failure_reported = true;
    }
    ++window_steps;

    const bool epoch_end = in_epoch == steps_per_epoch - 1;
    const bool last = step == total_steps;
    // The loss sum is a collective, so whether to log must be the same
    // decision on every rank: only `tty` (rank 0's terminal) differs, and it
    // only redraws the live line, with no communication.
    const bool log_line = step % log_every == 0 || last || epoch_end;
    if (log_line || (metrics_on && step % metrics_every == 0)) {
      RETURN_IF_ERROR(SumOverRanks(*host_comm, &step_losses));
      RETURN_IF_ERROR(CheckLossesFinite(plan, *device, step, step_losses, step_skipped));
      const double terms = static_cast<double>(plan.global_batch) * plan.loss_terms;
      last_loss = step_losses.back() / terms;
      for (size_t i = 0; i < pending.size(); ++i) {
        pending[i].scalars[0].second = step_losses[i] / terms;
        WriteMetrics(*metrics, log, pending[i]);
      }
      step_losses.clear();
      step_skipped.clear();
      pending.clear();
    }
    if (log_line) {
      const auto now = std::chrono::steady_clock::now();
      const double step_ms = Seconds(now - window_start) / window_steps * 1e3;
      std::string norm;
      if (grad_sq != nullptr) {
        ASSIGN_OR_RETURN(last_grad_norm, grad_norm());
        norm = absl::StrFormat(" | grad norm %.3g", last_grad_norm);
      }
      // Language models also count tokens (loss terms) per second.
      const std::string tokens =
          plan.loss_terms > 1
              ? absl::StrCat(" | ", FormatRate(plan.global_batch * plan.loss_terms /
                                               (step_ms / 1e3)),
                             " tokens/s")
              : "";
      // Flushed: under the launcher stdout is a pipe or a file, and a
      // long run's progress must show as it happens.
      log << absl::StrFormat(
                 "%sstep %d/%d | epoch %d/%d | loss %.4f%s | %.2f ms/step | %s "
                 "samples/s%s | eta %s\n",
                 tty ? "\r\033[K" : "", step, total_steps, epoch + 1,
                 total_epochs, last_loss, norm, step_ms,
                 FormatRate(plan.global_batch / (step_ms / 1e3)), tokens,
                 FormatDuration(step_ms / 1e3 * (total_steps - step)))
          << std::flush;
      window_start = now;
      window_steps = 0;
    } else if (tty) {
      const double step_ms =
          Seconds(std::chrono::steady_clock::now() - window_start) /
          window_steps * 1e3;
      log << absl::StrFormat("\r\033[Kstep %d/%d | eta %s", step, total_steps,
                             FormatDuration(step_ms / 1e3 * (total_steps - step)))
          << std::flush;
    }
    const bool eval_due =
        options.eval_every > 0 && step % options.eval_every == 0;
    // ZeRO-1 with zero_gather = next_forward: the parameters are whole
    // only after this (a no-op otherwise); every rank gets here together.
    const CheckpointConfig& periodic = plan.checkpoints;
    const bool checkpoint_due = periodic.every > 0 && (step % periodic.every == 0 || last);
    if ((eval && (epoch_end || last || eval_due)) || checkpoint_due) {
      RETURN_IF_ERROR(executor.GatherParameters());
    }
    if (eval && (epoch_end || last || eval_due)) {
      ASSIGN_OR_RETURN(last_eval, Evaluate(plan, executor, *device, *host_comm,
                                           *eval, head));
      // "eval epoch 3" at an epoch's end, "eval step 200 (epoch 1)" between.
      const std::string when =
          epoch_end || last ? absl::StrCat("epoch ", epoch + 1)
                            : absl::StrCat("step ", step, " (epoch ", epoch + 1, ")");
      if (head.classification && head.rows_per_example > 1) {
        // A language model: the loss is per token; on bytes it is also
        // bits per byte (nats / ln 2).
        log << absl::StrFormat(
            "%seval %s | loss %.4f%s | next-token accuracy %.2f%% (%d tokens)\n",
            tty ? "\r\033[K" : "", when, last_eval.loss,
            plan.data.format == "text"
                ? absl::StrFormat(" | %.3f bits/byte", last_eval.loss / std::log(2.0))
                : "",
            100 * last_eval.accuracy, last_eval.examples);
      } else if (head.classification) {
        log << absl::StrFormat("%seval %s | loss %.4f | accuracy %.2f%% (%d examples)\n",
                               tty ? "\r\033[K" : "", when, last_eval.loss,
                               100 * last_eval.accuracy, last_eval.examples);
      } else {
        log << absl::StrFormat("%seval %s | loss %.5f (%d examples)\n",
                               tty ? "\r\033[K" : "", when, last_eval.loss,
                               last_eval.examples);
      }
      log << std::flush;
      if (metrics) {
        MetricsRecord r{"eval", step, UnixSeconds()};
        r.info = {{"epoch", epoch + 1},
                  {head.rows_per_example > 1 ? "tokens" : "examples",
                   last_eval.examples}};
        r.scalars = {{"loss", last_eval.loss}};
        if (head.classification) r.scalars.emplace_back("accuracy", last_eval.accuracy);
        if (head.rows_per_example > 1 && plan.data.format == "text") {
          r.scalars.emplace_back("bits_per_byte", last_eval.loss / std::log(2.0));
        }
        WriteMetrics(*metrics, log, r);
      }
    }

    // The full state every checkpoints.every steps and at the last.
    TrainingState now;
    now.step = step;
    now.epoch = step / steps_per_epoch;
    now.step_in_epoch = step % steps_per_epoch;
    if (checkpoint_due && (rank.rank == 0 || plan.zero > 0)) {
      RETURN_IF_ERROR(SavePeriodicCheckpoint(plan, *device, sharding, rank.rank, now, tty, log));
    }
    // A stop signal (preemption, Ctrl-C) reaches the ranks at different
    // steps: they agree at the next check and stop together at that step
    // boundary, with one checkpoint.
    if (!last && (plan.world_size == 1 || step % kStopCheckSteps == 0)) {
      RETURN_IF_ERROR(StopIfAsked(plan, options, executor, *device, *host_comm, sharding,
                                  rank.rank, now, total_steps));
    }
  }
  summary.seconds = Seconds(std::chrono::steady_clock::now() - start);
  summary.final_step = std::max(state.step, total_steps);
  summary.samples_per_second =
      summary.seconds > 0 ? summary.steps * plan.global_batch / summary.seconds : 0;
  summary.final_loss = last_loss;
  summary.grad_norm = last_grad_norm;
  summary.replayed_steps = executor.capture().replayed_steps;
  summary.eval_accuracy = last_eval.accuracy;
  summary.eval_loss = eval ? last_eval.loss : -1;

  const OverlapStats overlap = ComputeOverlap(tracer.spans());
  if (overlap.steps > 0) {
    summary.allreduce_ms = overlap.comm_ns / 1e6 / overlap.steps;
    summary.hidden_fraction = overlap.hidden_fraction();
  }
  if (metrics) {
    MetricsRecord r{"summary", summary.final_step, UnixSeconds()};
    r.info = {{"steps", summary.steps},
              {"seconds", summary.seconds},
              {"samples_per_s", summary.samples_per_second},
              {"final_loss", summary.final_loss}};
    if (eval) r.info.emplace_back("eval_loss", summary.eval_loss);
    if (summary.eval_accuracy >= 0) {
      r.info.emplace_back("eval_accuracy", summary.eval_accuracy);
    }
    if (summary.hidden_fraction >= 0 && plan.world_size > 1) {
      r.info.emplace_back("allreduce_ms", summary.allreduce_ms);
      r.info.emplace_back("hidden_fraction", summary.hidden_fraction);
    }
    WriteMetrics(*metrics, log, r);
    if (!metrics->jsonl_path().empty()) log << "metrics: " << metrics->jsonl_path() << "\n";
    if (!metrics->tensorboard_path().empty()) {
      log << "tensorboard: " << metrics->tensorboard_path()
          << " (tensorboard --logdir " << options.tensorboard_dir << ")\n";
    }
  }
  if (!options.trace_path.empty()) {
    RETURN_IF_ERROR(WriteTrace(plan, rank, tracer, *host_comm, options.trace_path));
    log << "trace: " << options.trace_path << " (" << tracer.steps_traced()
        << " steps; open in https://ui.perfetto.dev or tools/viz)\n";
  }
  if (!options.save_path.empty()) {
    RETURN_IF_ERROR(executor.GatherParameters());
    TrainingState out;
    out.step = summary.final_step;
    out.epoch = summary.final_step / steps_per_epoch;
    out.step_in_epoch = summary.final_step % steps_per_epoch;
    if (rank.rank == 0 || plan.zero > 0) {
      RETURN_IF_ERROR(SaveCheckpoint(options.save_path, plan, *device, out, sharding));
    }
    if (rank.rank == 0) {
      log << "checkpoint: " << options.save_path << " (step " << out.step << ")\n";
    }
    // The other ranks wait for this write at the barrier below.
  }

  log << "\nsummary\n";
  log << absl::StrFormat("  steps           %d (to step %d), %s\n", summary.steps,
                         summary.final_step, FormatDuration(summary.seconds));
  log << absl::StrFormat("  throughput      %s samples/s, %.2f ms/step\n",
                         FormatRate(summary.samples_per_second),
                         summary.steps ? summary.seconds * 1e3 / summary.steps : 0.0);
  log << absl::StrFormat("  final loss      %.4f\n", summary.final_loss);
  if (summary.grad_norm >= 0) {
    log << absl::StrFormat("  grad norm       %.4g (last step, before clipping to %g)\n",
                           summary.grad_norm, plan.clip_grad_norm);
  }
  if (summary.eval_accuracy >= 0) {
    log << absl::StrFormat("  eval accuracy   %.2f%% (eval loss %.4f)\n",
                           100 * summary.eval_accuracy, summary.eval_loss);
  } else if (summary.eval_loss >= 0) {
    log << absl::StrFormat("  eval loss       %.5f\n", summary.eval_loss);
  }
  log << absl::StrFormat("  arena           %s per rank (%s without reuse)\n",
                         FormatBytes(plan.arena_bytes),
                         FormatBytes(plan.memory.unshared_bytes));
  if (device->SupportsCapture()) {
    const CaptureInfo& capture = executor.capture();
    if (capture.replayed_steps > 0) {
      log << absl::StrFormat(
          "  cuda graph      %d of %d steps replayed (captured at step %d)\n",
          capture.replayed_steps, summary.steps, capture.captured_step);
    } else {
      log << absl::StrFormat("  cuda graph      not used: %s\n",
                             !capture.failure.empty() ? capture.failure
                             : !capture.unavailable.empty()
                                 ? capture.unavailable
                                 : "no untraced step after the warm-up step");
    }
  }
  if (summary.hidden_fraction >= 0 && plan.world_size > 1) {
    log << absl::StrFormat(
        "  all-reduce      %.3f ms/step, %.0f%% hidden behind backward (%s)\n",
        summary.allreduce_ms, 100 * summary.hidden_fraction,
        options.overlap ? "overlap on" : "overlap off");
  }
  if (dropped > 0) {
    log << absl::StrFormat(
        "  drop_last       %d samples per epoch not in a full global batch\n",
        dropped);
  }
  if (plan.skip_nonfinite) {
    log << absl::StrFormat("  skipped         %d step(s) with a non-finite gradient\n",
                           summary.skipped_steps);
  }
  // The ranks leave together, after rank 0's --save: one that closed its
  // sockets while a peer was still finishing the last collective would
  // fail that peer's run.
  if (plan.world_size > 1) RETURN_IF_ERROR(host_comm->Barrier());
  return summary;
}

}  // namespace trainc
