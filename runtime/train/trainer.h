// Trainer: one rank's training run over a Plan, from initial weights to the
// final summary.
//
//   RankContext rank = ...;              // from RankFromEnvironment(), or rank 0 of 1
//   TrainOptions options;                // from the command line
//   absl::StatusOr<TrainSummary> summary = TrainRank(plan, rank, options);
//
// What it does, in order: picks the device (cpu or cuda) and the
// communicators (Gloo, plus NCCL on CUDA), loads the data, initialises the
// parameters (seeded, identical on every rank) or loads a checkpoint, then
// runs optimizer steps through the Executor, logging progress and the loss
// (rank 0; per step to the metrics log), evaluating after each epoch,
// tracing a few steps to measure how much all-reduce time the backward
// pass hid, and finally saves a
// checkpoint and prints the summary. It never remakes a decision the plan
// made.
#ifndef TRAINC_RUNTIME_TRAIN_TRAINER_H_
#define TRAINC_RUNTIME_TRAIN_TRAINER_H_

#include <cstdint>
#include <ostream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "runtime/cpu/gemm.h"
#include "runtime/device/device.h"

namespace trainc {

// --device: where the ranks run. kAuto: CUDA if a GPU is seen, else the
// CPU.
enum class DeviceKind { kAuto, kCpu, kCuda };
template <>
struct EnumTable<DeviceKind> {
  static constexpr EnumNameEntry<DeviceKind> kEntries[] = {
      {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}, {DeviceKind::kAuto, "auto"}};
};

// --comm: the ranks' host communicator. kGloo: TCP (needs a rendezvous);
// kMpi: Open MPI's shared memory (the job must have been started by
// mpirun, no rendezvous). kAuto, the flag's default: mpi under mpirun,
// else gloo; a rank is always given gloo or mpi.
enum class CommKind { kAuto, kGloo, kMpi };
template <>
struct EnumTable<CommKind> {
  static constexpr EnumNameEntry<CommKind> kEntries[] = {
      {CommKind::kGloo, "gloo"}, {CommKind::kMpi, "mpi"}, {CommKind::kAuto, "auto"}};
};

struct RankContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // Gloo file-store folder shared by the job's ranks; empty for one rank.
  std::string rendezvous_dir;
  // Or a Redis server "host:port" and the job's key prefix (redis://
  // rendezvous, TRAINC_RENDEZVOUS).
  std::string redis;
  std::string job;
  // Or the job's store "host:port" (MASTER_ADDR): rank 0 serves it
  // (runtime/store), where the port came from, and the secret (with `job`)
  // of the token the ranks prove to it; empty: the plan's hash.
  std::string store;
  std::string store_origin;
  std::string job_secret;
  // Address this rank's Gloo transport listens on (other machines' ranks
  // must reach it); loopback suits one machine.
  std::string hostname = "127.0.0.1";
  // kGloo or kMpi (see CommKind): the host communicator, and on the CPU
  // the gradients' (tools/train --comm).
  CommKind comm = CommKind::kGloo;
  // steady_clock ns shared by the local job's ranks: time zero of traces.
  int64_t job_start_ns = 0;
};

struct TrainOptions {
  DeviceKind device = DeviceKind::kAuto;
  std::string save_path;        // checkpoint written at the end (rank 0)
  std::string init_from;        // weights only
  std::string resume;           // weights, optimizer state, step, data position
  std::string trace_path;       // Chrome trace of `trace_steps` steps
  // Metrics as JSON lines (runtime/metrics/METRICS_FORMAT.md), rank 0: the
  // command line defaults it to beside save_path. Empty: none.
  std::string metrics_path;
  std::string tensorboard_dir;  // TensorBoard event file of the same scalars
  int64_t trace_steps = 3;
  bool overlap = true;          // false: all-reduces after the whole backward
  bool graph = true;            // CUDA: replay each step as one CUDA graph
  bool eval = true;             // evaluate after each epoch and at the end
  int64_t eval_every = 0;       // > 0: also every this many steps
  int64_t log_every = 0;        // steps between progress lines; 0: automatic
  int blas_threads = 1;         // CPU: OpenBLAS threads per rank
  // CPU: the matrix products' library (--blas; runtime/cpu/gemm.h).
  cpu::BlasChoice blas = cpu::BlasChoice::kAuto;
  // > 0: a watchdog (runtime/train/watchdog.h) calls `on_stall` when no
  // step (or evaluation, or checkpoint) has finished for this many seconds.
  int64_t watchdog_seconds = 0;
  std::function<void(const std::string& message)> on_stall;
  // Tests: given the device the run would use, returns the one it runs on
  // (a wrapper that records what each step read, or that captures steps on
  // the CPU as a CUDA graph would). Empty: the device as it is.
  std::function<std::unique_ptr<Device>(std::unique_ptr<Device>)> wrap_device;
  // What the run was started from, recorded with the plan's hash in the
  // trace and the metrics log (runtime/trace/plan_identity.h) so that
  // tools/viz draws the plan that ran: the .train or plan file as typed
  // (empty: the plan's source) and its --FIELD VALUE overrides.
  std::string input_path;
  std::vector<std::pair<std::string, std::string>> overrides;
};

struct TrainSummary {
  int64_t steps = 0;            // optimizer steps run by this call
  int64_t final_step = 0;       // global step reached (resume counts)
  double seconds = 0;
  double samples_per_second = 0;
  double final_loss = 0;        // mean over the last step's global batch
  double grad_norm = -1;        // clipping: the last logged step's norm
  double eval_accuracy = -1;    // < 0: no classification eval ran
  double eval_loss = -1;
  int64_t arena_bytes = 0;
  double allreduce_ms = 0;      // per step, measured on traced steps
  double hidden_fraction = -1;  // of all-reduce time overlapped by compute
  int64_t replayed_steps = 0;   // steps run as one captured graph
  int64_t skipped_steps = 0;    // skip_nonfinite: steps left out
  // This rank's resident memory after its first step (Linux: the process's
  // arena, data, code and libraries; 0 where it cannot be read).
  int64_t resident_bytes = 0;
  // At the same moment: what the device allocated in host memory for the
  // plan (the CPU device's arena, staging and scratch) and what the
  // communicators' cached collectives hold; the rest of resident_bytes is
  // code, data and libraries.
  int64_t device_host_bytes = 0;
  int64_t comm_host_bytes = 0;
};

// What the planner must know of the backend `device` (as --device) that
// will run the plan: the workspace its
// convolution and pooling libraries need (oneDNN, cuDNN), the bf16
// staging it keeps, and the machine profile bucket_mb = auto costs on when
// the file names none (DefaultMachineOfDevice, compiler/planner/planner.h).
// `compile_only` (--compile-only): --device cuda needs no visible GPU; what
// only a GPU can tell (cuDNN's workspace sizes) then fails, saying so.
absl::StatusOr<PlanOptions> PlanOptionsForDevice(DeviceKind device, bool compile_only = false);

// The signal (SIGTERM, SIGINT, SIGHUP) that stopped the last TrainRank, or
// 0. Such a run stops on every rank at one step boundary, writes one
// checkpoint and returns Cancelled, saying where; a second signal ends the
// process at once.
int ReceivedStopSignal();

// Runs the training of one rank. Progress and the summary go to `log` on
// rank 0 only. Collective: every rank of the job must call it.
absl::StatusOr<TrainSummary> TrainRank(const Plan& plan,
                                       const RankContext& rank,
                                       const TrainOptions& options,
                                       std::ostream& log);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_TRAINER_H_
