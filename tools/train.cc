// train: compile a .train file into a plan and train it.
//
//   bazel run //tools:train -- dsl_examples/fashion_mlp.train
//   bazel run //tools:train -- --compile-only FILE.train -o plan.txt
//
// With gpus = N > 1 and no cluster launcher, this process starts N workers
// (itself, once per rank) and waits for them; under torchrun, srun or
// mpirun each process is one rank already.
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/comm/mpi/mpi_communicator.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/rank_env.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/trace/tracer.h"
#include "tools/cli/option_parser.h"
#include "tools/hf/config_check.h"
#include "tools/restarts.h"
#include "runtime/train/trainer.h"

namespace trainc {

// The command line, for re-running this binary as each local worker.
int args_argc = 0;
char** args_argv = nullptr;

namespace {

struct Args {
  std::string file;
  bool compile_only = false;
  std::string output;
  Overrides overrides;
  TrainOptions train;
  bool metrics_given = false;  // --metrics or --no-metrics
  std::string rendezvous;      // --rendezvous redis://HOST:PORT/JOB
  CommKind comm = CommKind::kAuto;  // --comm gloo|mpi|auto
  int64_t watchdog = -1;            // --watchdog SECONDS; -1: the default
  int max_restarts = 0;             // --max_restarts N (the local launcher)
  int min_gpus = 0;                 // --min_gpus M; 0: never fewer ranks
};

// Set when a local job's rank failed and a checkpoint of the run can
// continue it: the exit code is then kResumableExitCode.
bool resumable_failure = false;

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& v) {
  int64_t n;
  if (!absl::SimpleAtoi(v, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, flag.empty() ? "" : ": ", "expected an integer, got '", v, "'"));
  }
  return n;
}

// The folder of `path` ("." for a bare name).
std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "."
         : slash == 0               ? "/"
                                    : path.substr(0, slash);
}

// An output file must be writable before the first step, not after the
// last: the path is not a folder, and its folder exists and is writable
// (or, when the writer makes missing folders, the nearest existing one).
absl::Status CheckOutputFile(const std::string& flag, const std::string& path,
                             bool makes_folders = false) {
  if (path.empty()) return absl::OkStatus();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": is a folder; give a file name"));
  }
  std::string dir = FolderOf(path);
  while (makes_folders && ::stat(dir.c_str(), &st) != 0 && dir != "." &&
         dir != "/") {
    dir = FolderOf(dir);
  }
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": the folder ", dir, " does not exist"));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, ": cannot write in ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The folders a run writes into while it goes (checkpoint_dir with
// checkpoint_every, --tensorboard) must be writable before any rank starts:
// a rank that fails there later is reported by its peers as a lost
// connection.
absl::Status CheckRunFolders(const Plan& plan, const TrainOptions& options) {
  if (plan.checkpoints.every > 0) {
    absl::Status folder = PrepareCheckpointFolder(plan.checkpoints.dir);
    if (!folder.ok()) {
      return absl::Status(folder.code(), absl::StrCat("checkpoint_dir: ", folder.message()));
    }
  }
  if (!options.tensorboard_dir.empty()) {
    const std::string& dir = options.tensorboard_dir;
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    std::string probe = dir + "/.write-test.XXXXXX";
    const int fd = error ? -1 : ::mkstemp(probe.data());
    if (fd < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tensorboard ", dir, ": cannot write in it: ",
          error ? error.message() : std::strerror(errno)));
    }
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return absl::OkStatus();
}

// --watchdog's default under mpirun, whose collectives never time out.
constexpr int64_t kMpiWatchdogSeconds = 600;

// "--zero 0|1|2|3": a train { } field with the values the front end's
// checker accepts (FieldChoices), so that --help cannot offer others.
std::string Choices(const std::string& field) {
  return absl::StrCat("--", field, " ", absl::StrJoin(FieldChoices(field), "|"));
}

// A --FLAG PATH option's setter: the value, as given.
OptionParser::SetValue Into(std::string* out) {
  return [out](const std::string& v) {
    *out = v;
    return absl::OkStatus();
  };
}

// A positive count: --trace-steps, --eval-every, --log-every.
OptionParser::SetValue AtLeastOne(int64_t* out) {
  return [out](const std::string& v) -> absl::Status {
    ASSIGN_OR_RETURN(*out, ParseInt("", v));
    if (*out < 1) return absl::InvalidArgumentError("must be >= 1");
    return absl::OkStatus();
  };
}

// A count in [low, high]: --blas-threads, --max_restarts, --min_gpus.
OptionParser::SetValue InRange(int* out, int low, int high) {
  return [out, low, high](const std::string& v) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t n, ParseInt("", v));
    if (n < low || n > high) {
      return absl::InvalidArgumentError(absl::StrCat("must be in [", low, ", ", high, "]"));
    }
    *out = static_cast<int>(n);
    return absl::OkStatus();
  };
}

// "Run:", first part: the device, and what the run reads and writes
// (checkpoints, traces, metrics).
void AddRunFileOptions(Args* args, OptionParser& parser) {
  TrainOptions* train = &args->train;
  parser
      .Group("Run:")
      .Value({"--device"}, absl::StrJoin(EnumNames<DeviceKind>(), "|"),
             "where to run (default auto: CUDA if a GPU is seen); with "
             "--compile-only, what to compile for (cuda needs no GPU then)",
             EnumInto(&train->device))
      .Value({"--save"}, "PATH", "write a safetensors checkpoint at the end",
             Into(&train->save_path))
      .Value({"--init-from"}, "PATH",
             "start from a checkpoint's weights, or a Hugging Face GPT2LMHeadModel or "
             "LlamaForCausalLM folder (config.json + model.safetensors)",
             Into(&train->init_from))
      .Value({"--resume"}, "PATH|DIR",
             "continue a checkpoint: weights, optimizer, step, data position; given a "
             "folder (checkpoint_dir), the newest checkpoint in it that loads",
             Into(&train->resume))
      .Value({"--trace"}, "PATH",
             "write a Chrome trace (Perfetto, tools/viz) of a few steps",
             Into(&train->trace_path))
      .Value({"--trace-steps"}, "N",
             absl::StrCat("steps to trace (default ", train->trace_steps, ")"),
             AtLeastOne(&train->trace_steps))
      .Value({"--metrics"}, "PATH",
             "write metrics as JSON lines as the run goes: one per step (loss, lr, step "
             "time, throughput), per evaluation, and the run's settings and summary "
             "(default with --save: beside it, model.metrics.jsonl)",
             [args](const std::string& v) -> absl::Status {
               if (v.empty()) return absl::InvalidArgumentError("needs a path");
               args->train.metrics_path = v;
               args->metrics_given = true;
               return absl::OkStatus();
             })
      .Switch({"--no-metrics"}, "no metrics file beside --save",
              [args] {
                args->train.metrics_path.clear();
                args->metrics_given = true;
              })
      .Value({"--tensorboard"}, "DIR", "the same scalars as a TensorBoard event file in DIR",
             [train](const std::string& v) -> absl::Status {
               if (v.empty()) return absl::InvalidArgumentError("needs a folder");
               train->tensorboard_dir = v;
               return absl::OkStatus();
             });
}

// "Run:", second part: how the steps run (overlap, graphs, evaluation,
// progress, the watchdog, threads) and how the ranks meet.
void AddRunExecutionOptions(Args* args, OptionParser& parser) {
  TrainOptions* train = &args->train;
  parser
      .Switch({"--no-overlap"}, "issue all-reduces after the whole backward (baseline)",
              [train] { train->overlap = false; })
      .Switch({"--no-graph"}, "CUDA: launch every kernel of every step (no CUDA graph)",
              [train] { train->graph = false; })
      .Switch({"--no-eval"}, "skip evaluation", [train] { train->eval = false; })
      .Value({"--eval-every"}, "N", "also evaluate every N steps (default: each epoch's end)",
             AtLeastOne(&train->eval_every))
      .Value({"--log-every"}, "N", "steps between progress lines (default: ~5 per epoch)",
             AtLeastOne(&train->log_every))
      .Value({"--watchdog"}, "SECONDS",
             absl::StrCat("stop the job when no step (evaluation, checkpoint) has finished "
                          "for SECONDS on some rank: a peer is stopped or a collective hangs "
                          "(default ", kMpiWatchdogSeconds, " under mpirun, whose collectives "
                          "never time out; 0: off)"),
             [args](const std::string& v) -> absl::Status {
               ASSIGN_OR_RETURN(args->watchdog, ParseInt("", v));
               if (args->watchdog < 0) return absl::InvalidArgumentError("must be >= 0");
               return absl::OkStatus();
             })
      .Value({"--blas-threads"}, "N",
             absl::StrCat("OpenBLAS and oneDNN threads per rank (default ", train->blas_threads,
                          ")"),
             InRange(&train->blas_threads, 1, 1024))
      .Value({"--blas"}, absl::StrJoin(EnumNames<cpu::BlasChoice>(), "|"),
             "CPU: the library of the matrix products (default auto: oneDNN when "
             "its kernels are AVX-512 ones or OpenBLAS runs a fallback far below the "
             "CPU's instruction set, else OpenBLAS; TRAINC_BLAS sets what auto means)",
             EnumInto(&train->blas))
      .Value({"--comm"}, absl::StrJoin(EnumNames<CommKind>(), "|"),
             "the ranks' communicator (default auto: mpi when started by mpirun, else "
             "gloo). mpi: Open MPI's shared-memory collectives, for jobs started as "
             "mpirun -np N train FILE (no rendezvous needed); gloo: TCP, the local "
             "launcher's and torchrun's",
             [args](const std::string& v) -> absl::Status {
               const std::optional<CommKind> comm = ParseEnum<CommKind>(v);
               if (!comm) {
                 const std::vector<std::string> names = EnumNames<CommKind>();
                 return absl::InvalidArgumentError(absl::StrCat(
                     "expected ", absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ",
                     names.back(), ", got '", v, "'"));
               }
               args->comm = *comm;
               return absl::OkStatus();
             })
      .Value({"--max_restarts", "--max-restarts"}, "N",
             "local job: when a rank dies, hangs or fails, stop the others and start every "
             "rank again from the newest checkpoint the run wrote (checkpoint_every), else "
             "from the beginning, at most N times (default 0). Beyond that, or when N is 0, a "
             "failed run that has a checkpoint exits 75",
             InRange(&args->max_restarts, 0, 1000000))
      .Value({"--min_gpus", "--min-gpus"}, "M",
             "local job: when a rank still fails after the restarts, go on with fewer ranks "
             "(not fewer than M) from the newest checkpoint, with the same global batch (more "
             "accumulation; bit for bit with deterministic = true), leaving its GPU out",
             InRange(&args->min_gpus, 1, 65536))
      .Value({"--rendezvous"}, "redis://HOST:PORT/JOB",
             "ranks meet through a Redis server (machines with no shared folder; also "
             "TRAINC_RENDEZVOUS); JOB names the job and must be new",
             [args](const std::string& v) -> absl::Status {
               args->rendezvous = v;
               return ParseRedisUrl(v, "--rendezvous").status();
             });
}

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(Args* args) {
  OptionParser parser;
  parser.Usage({"train [options] FILE.train|PLAN"})
      .Description(
          "Compiles a .train file into a static execution plan and trains it: with\n"
          "`gpus = N`, N ranks (processes) on this machine, or under torchrun / srun /\n"
          "mpirun one rank per process. A PLAN file (from --compile-only -o) trains\n"
          "the same way without recompiling.\n")
      .Group("Compile:")
      .Switch({"--compile-only"}, "print the spec and plan summary, do not train",
              [args] { args->compile_only = true; })
      .Value({"-o", "--output"}, "PATH", "write the plan file (with --compile-only)",
             Into(&args->output))
      .Group("Override train { } fields (checked by the same rules as the file):",
             absl::StrCat(
                 "--gpus N  --micro_batch N  --accumulate N  --global_batch N\n"
                 "--epochs N  --steps N  --lr X  --seed N  --bucket_mb X|auto  --machine "
                 "PROFILE\n",
                 Choices("deterministic"), "  ", Choices("tf32"), "  ", Choices("precision"),
                 "\n", Choices("recompute"),
                 " (every repeat block's activations recomputed)\n", Choices("zero"), "  ",
                 Choices("zero_accumulate"), "\n", Choices("zero_gather"), "  ",
                 Choices("grad_comm"), "\n", Choices("fusion"), "  ", Choices("skip_nonfinite"),
                 "\n"
             "--memory 80GiB (fit each device: ZeRO stage, recompute, and with\n"
             "  --micro_batch auto the micro-batch, for the least predicted step)\n"
             "--checkpoint_every N  --checkpoint_keep K  --checkpoint_dir DIR\n"
             "(any train { } field but optimizer and schedule works as --FIELD VALUE,\n"
             "and so does a model constant: --width 256 for `const width = 128`)\n"))
      .TrainOverrides(&args->overrides);
  AddRunFileOptions(args, parser);
  AddRunExecutionOptions(args, parser);
  parser.Epilogue(
      "Long runs: with checkpoint_every = N in train { } (or --checkpoint_every N)\n"
      "the full state is written every N steps and at the end to checkpoint_dir\n"
      "(default checkpoints/<model>) as step-<N>.safetensors, atomically, keeping\n"
      "the newest checkpoint_keep (default 3). SIGTERM, SIGINT or SIGHUP (Slurm\n"
      "preemption, Ctrl-C) stop every rank at the same step boundary within 10\n"
      "steps and write one checkpoint (there, else at --save, else in\n"
      "checkpoints/<model>); the exit code is 128 + the signal. A second signal\n"
          "stops at once.\n");
  return parser;
}

// The --help text.
std::string Usage() {
  Args unused;
  return MakeParser(&unused).Help();
}

absl::StatusOr<std::optional<Args>> ParseArgs(int argc, char** argv) {
  Args args;
  const OptionParser parser = MakeParser(&args);
  std::vector<std::string> positional;
  ASSIGN_OR_RETURN(const bool help, parser.Parse(argc, argv, &positional));
  if (help) return std::optional<Args>();
  if (positional.size() != 1) {
    return absl::InvalidArgumentError(
        positional.empty() ? "no input file (see --help)"
                           : absl::StrCat("one input file expected, got ",
                                          positional.size()));
  }
  args.file = positional[0];
  // Recorded in the trace and metrics log: tools/viz draws the plan that ran.
  args.train.input_path = args.file;
  args.train.overrides = args.overrides;
  if (!args.train.resume.empty() && !args.train.init_from.empty()) {
    return absl::InvalidArgumentError(
        "--init-from and --resume: give one (--resume already restores the "
        "weights, the optimizer state and the data position)");
  }
  if (!args.metrics_given) {
    args.train.metrics_path = DefaultMetricsPath(args.train.save_path);
  }
  if (!args.compile_only) {
    RETURN_IF_ERROR(CheckOutputFile("--save", args.train.save_path));
    RETURN_IF_ERROR(CheckOutputFile("--trace", args.train.trace_path));
    RETURN_IF_ERROR(CheckOutputFile("--metrics", args.train.metrics_path,
                                    /*makes_folders=*/true));
  }
  return std::optional<Args>(args);
}

// A .train file goes through the front end and the planner; anything else
// is read as a plan file.
absl::StatusOr<Plan> LoadPlan(const Args& args, bool print_spec) {
  if (!absl::EndsWith(args.file, ".train")) {
    ASSIGN_OR_RETURN(Plan plan, ReadPlanFile(args.file));
    for (const auto& [field, value] : args.overrides) {
      if (field != "steps") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", field, ": a plan file is already compiled; only --steps "
            "applies (recompile the .train file to change it)"));
      }
      ASSIGN_OR_RETURN(plan.steps, ParseInt("--steps", value));
      plan.epochs = 0;
    }
    if (IsHfFolder(args.train.init_from)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--init-from ", args.train.init_from, ": a Hugging Face folder's config.json is "
          "checked against the .train model, which a plan file does not carry; give the "
          ".train file (and its options) instead of ", args.file));
    }
    return plan;
  }
  FrontendResult result = CompileFile(args.file, args.overrides);
  if (!result.diagnostics.empty()) {
    std::cerr << FormatDiagnostics(result.diagnostics, result.source);
  }
  if (!result.spec) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.file, ": compilation failed"));
  }
  if (print_spec) std::cout << DescribeSpec(*result.spec) << "\n";
  if (IsHfFolder(args.train.init_from)) {  // before any rank starts
    if (absl::Status s = hf::CheckHfConfig(args.train.init_from, result.spec->model, args.file);
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--init-from ", args.train.init_from, ": ", s.message()));
    }
  }
  ASSIGN_OR_RETURN(PlanOptions options,
                   PlanOptionsForDevice(args.train.device, args.compile_only));
  options.overlap = args.train.overlap;  // bucket_mb = auto costs what will run
  return BuildPlan(*result.spec, options);
}

// What one rank needs besides its arena and the data: the binary, its
// libraries (CUDA's included) and buffers; a default-example rank peaks at
// ~230 MiB resident, the mapped data set included.
constexpr int64_t kProcessBytes = int64_t{256} << 20;

// Bytes of MemAvailable in /proc/meminfo, or -1.
int64_t AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

// A local job's ranks must fit in memory: each its arena (on the host for
// CPU ranks) and process, the images once (the machine's ranks map one
// pixel cache). Refused before any rank starts, rather than an out-of-memory
// kill that says only "signal 9".
absl::Status CheckMemoryFits(const Plan& plan, bool on_gpus) {
  const int64_t available = AvailableMemory();
  if (available < 0) return absl::OkStatus();
  int64_t data = 0;
  if (plan.data.format == DataFormat::kIdx) {
    for (const std::vector<std::string>* paths : {&plan.data.train_paths, &plan.data.eval_paths}) {
      if (paths->empty()) continue;
      std::error_code error;
      // The images decompressed: the gzip's size is a lower bound; the
      // pixel cache (or the file itself) gives the exact figure later.
      const int64_t size = static_cast<int64_t>(std::filesystem::file_size((*paths)[0], error));
      if (!error) data += absl::EndsWith((*paths)[0], ".gz") ? 4 * size : size;
    }
  }
  const int64_t per_rank = kProcessBytes + (on_gpus ? 0 : plan.arena_bytes);
  const int64_t need = plan.world_size * per_rank + data;
  if (need <= available) return absl::OkStatus();
  auto gib = [](int64_t b) { return absl::StrFormat("%.1f GiB", b / 1073741824.0); };
  return absl::ResourceExhaustedError(absl::StrCat(
      plan.world_size, plan.world_size == 1 ? " rank needs about " : " ranks need about ",
      gib(need), " of memory (per rank: arena ",
      gib(on_gpus ? 0 : plan.arena_bytes), " + process ", gib(kProcessBytes), "; data ",
      gib(data), " shared) but this machine has ", gib(available),
      " available: use fewer --gpus, a smaller --micro_batch, or a larger machine"));
}

// A rank that torchrun (--max-restarts: TORCHELASTIC_RESTART_COUNT > 0)
// or Slurm (a requeued job: SLURM_RESTART_COUNT > 0) started again
// continues from the newest checkpoint in checkpoint_every's folder, when
// there is one and neither --resume nor --init-from was given.
void ResumeAfterOuterRestart(const Plan& plan, int rank, TrainOptions* options) {
  if (plan.checkpoints.every == 0 || !options->resume.empty() || !options->init_from.empty()) {
    return;
  }
  for (const char* env : {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"}) {
    const char* value = std::getenv(env);
    int restarts = 0;
    if (value == nullptr || !absl::SimpleAtoi(value, &restarts) || restarts <= 0) continue;
    absl::StatusOr<std::vector<std::string>> found = CheckpointsNewestFirst(plan.checkpoints.dir);
    if (!found.ok() || found->empty()) return;
    options->resume = plan.checkpoints.dir;
    if (rank == 0) {
      std::cout << "restarted (" << env << "=" << restarts << "): resuming from the newest "
                << "checkpoint in " << plan.checkpoints.dir << "\n";
    }
    return;
  }
}

// A local job (no cluster launcher, gpus = N > 1): N workers of this
// binary, restarted (--max_restarts) or fewer (--min_gpus) when one fails.
absl::Status LaunchLocalJob(const Args& args, const Plan& plan) {
  // A local job: check what can be checked before starting any worker.
  // --device auto runs on the GPUs where there are any, so it is held to
  // the file's gpus = N as well.
  // (--device cpu does not count GPUs: that would load the CUDA plugin.)
  const int gpus_here = args.train.device == DeviceKind::kCpu ? 0 : CudaDeviceCount();
  const bool on_gpus = args.train.device == DeviceKind::kCuda ||
                       (args.train.device == DeviceKind::kAuto && gpus_here > 0);
  if (on_gpus && gpus_here < plan.world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "gpus = ", plan.world_size, " but this machine has ", gpus_here,
        " CUDA GPU(s) (use --gpus ", std::max(gpus_here, 1),
        " or --device cpu)"));
  }
  RETURN_IF_ERROR(CheckMemoryFits(plan, on_gpus));
  if (args.min_gpus > 0 && !absl::EndsWith(args.file, ".train")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_gpus: a job on fewer ranks is compiled again from the .train file; ", args.file,
        " is a plan file"));
  }
  std::cout << "launching " << plan.world_size << " ranks\n" << std::flush;
  setenv("TRAINC_JOB_START_NS", absl::StrCat(TraceClockNs()).c_str(), 1);
  RestartingJob job;
  job.world_size = static_cast<int>(plan.world_size);
  for (int i = 0; i < args_argc; ++i) job.argv.push_back(args_argv[i]);
  if (plan.checkpoints.every > 0) job.checkpoint_dir = plan.checkpoints.dir;
  job.max_restarts = args.max_restarts;
  job.min_gpus = args.min_gpus;
  job.global_batch = plan.global_batch;
  job.micro_batch = plan.micro_batch;
  job.on_gpus = on_gpus;
  job.log = &std::cerr;
  if (args.max_restarts > 0 && plan.checkpoints.every == 0) {
    std::cout << "note: --max_restarts " << args.max_restarts
              << " without checkpoint_every: a restart starts from the beginning "
                 "(--checkpoint_every N restarts from the newest checkpoint)\n"
              << std::flush;
  }
  return LaunchWithRestarts(job, &resumable_failure);
}

absl::Status Run(const Args& args) {
  // For this process and the local workers it starts (they inherit it).
  if (!args.rendezvous.empty()) setenv(kRendezvousEnv, args.rendezvous.c_str(), 1);
  ASSIGN_OR_RETURN(std::optional<RankInfo> worker, RankFromEnvironment());
  const bool under_mpirun = worker && worker->source == "mpirun";
  if (args.comm == CommKind::kMpi && !under_mpirun) {
    return absl::FailedPreconditionError(
        "--comm mpi: this process was not started by mpirun (run e.g. "
        "mpirun -np 2 train FILE; the local launcher's ranks use --comm gloo)");
  }
  const CommKind comm = args.comm != CommKind::kAuto ? args.comm
                        : under_mpirun                ? CommKind::kMpi
                                                      : CommKind::kGloo;
  ASSIGN_OR_RETURN(Plan plan, LoadPlan(args, args.compile_only));

  if (args.compile_only) {
    std::cout << PlanSummary(plan);
    if (!args.output.empty()) {
      RETURN_IF_ERROR(WritePlanFile(plan, args.output));
      std::cout << "plan written to " << args.output << "\n";
    }
    return absl::OkStatus();
  }

  if (!worker || worker->rank == 0) RETURN_IF_ERROR(CheckRunFolders(plan, args.train));
  if (worker) {
    RankContext rank;
    rank.rank = worker->rank;
    rank.world_size = worker->world_size;
    rank.local_rank = worker->local_rank;
    rank.comm = comm;
    if (worker->rendezvous_kind == RendezvousKind::kRedis) {
      rank.redis = worker->rendezvous;
      rank.job = worker->job;
    } else if (worker->rendezvous_kind == RendezvousKind::kTcpStore) {
      // MASTER_ADDR: rank 0 serves the job's store (runtime/store).
      rank.store = worker->rendezvous;
      rank.store_origin = worker->rendezvous_origin;
      rank.job = worker->job;
      if (const char* secret = std::getenv(kJobSecretEnv)) rank.job_secret = secret;
    } else {
      rank.rendezvous_dir = worker->rendezvous;
    }
    if (const char* host = std::getenv("TRAINC_HOSTNAME")) rank.hostname = host;
    if (const char* t = std::getenv("TRAINC_JOB_START_NS")) {
      absl::SimpleAtoi(t, &rank.job_start_ns);
    }
    TrainOptions options = args.train;
    ResumeAfterOuterRestart(plan, worker->rank, &options);
    // Open MPI's collectives have no timeout: under mpirun a stopped peer
    // would hold the job forever. This rank leaving ends it (mpirun stops
    // the others); MPI is left unfinalised, as for any failure.
    options.watchdog_seconds =
        args.watchdog >= 0 ? args.watchdog : (comm == CommKind::kMpi ? kMpiWatchdogSeconds : 0);
    options.on_stall = [](const std::string& message) {
      std::cerr << "train: error: " << message << std::flush;
      std::cout << std::flush;
      SkipMpiFinalizeAtExit();
      std::_Exit(1);
    };
    return TrainRank(plan, rank, options, std::cout).status();
  }
  if (plan.world_size == 1) {
    // One CPU rank is held to the same arithmetic as a local job's ranks.
    if (args.train.device == DeviceKind::kCpu ||
        (args.train.device == DeviceKind::kAuto && CudaDeviceCount() == 0)) {
      RETURN_IF_ERROR(CheckMemoryFits(plan, /*on_gpus=*/false));
    }
    return TrainRank(plan, RankContext(), args.train, std::cout).status();
  }
  return LaunchLocalJob(args, plan);
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  // `bazel run` starts us in the runfiles tree; paths on the command line
  // are the user's, relative to where they typed it.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(wd) != 0) perror("chdir BUILD_WORKING_DIRECTORY");
  }
  auto args = trainc::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "train: " << args.status().message() << "\n";
    return 2;
  }
  if (!args->has_value()) {
    std::cout << trainc::Usage();
    return 0;
  }
  trainc::args_argc = argc;
  trainc::args_argv = argv;
  absl::Status status = trainc::Run(**args);
  // Under mpirun: a failed rank must not wait in MPI_Finalize for peers
  // that may be stuck in a collective; mpirun ends the job instead.
  if (!status.ok()) trainc::SkipMpiFinalizeAtExit();
  if (absl::IsCancelled(status)) {
    // Stopped by a signal at a step boundary, checkpoint written (or the
    // launcher relaying one): the shell's convention, 128 + the signal.
    std::cerr << absl::StrCat("train: ", status.message(), "\n") << std::flush;
    int sig = trainc::ReceivedStopSignal();
    if (sig == 0) sig = trainc::JobStopSignal();
    return 128 + (sig != 0 ? sig : SIGTERM);
  }
  if (!status.ok()) {
    // One write: a rank the launcher stops meanwhile (a peer failed) must
    // not leave half a line ("train: error: " and nothing after it).
    std::cerr << absl::StrCat("train: error: ", status.message(), "\n") << std::flush;
    return trainc::resumable_failure ? trainc::kResumableExitCode : 1;
  }
  return 0;
}
