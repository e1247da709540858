// cpu_bench: step time of trainc on the CPU, one rank and two, next to
// PyTorch on the same machine.
//
//   bazel run //tools/bench:cpu_bench [-- --steps 300 --gpt-steps 40]
//   bazel run //tools/bench:cpu_bench -- --only gpt [--no-torch]
//   bazel run //tools/bench:cpu_bench -- --only cnn
//   bazel run //tools/bench:cpu_bench -- --blas onednn   # or openblas; default auto
//
// The GPT and Llama also run one rank under precision = bf16, with the
// linear products on oneDNN's bf16 kernels where the CPU has them and
// widened to f32 (TRAINC_BF16_GEMM=widened; runtime/cpu/bf16_matmul.h).
//
// Three models, each compiled by the real front end (CompileFile with
// overrides) and planner (BuildPlan), run by the shared Executor on a
// CpuDevice with synthetic data (one random batch uploaded every
// micro-step: data loading is not what this measures):
//
//   mlp  the default example (dsl_examples/fashion_mlp.train: a
//        784-256-128-10 MLP, AdamW) at a global batch of 256 samples;
//   gpt  dsl_examples/tiny_gpt.train (GPT-2's block, 4 layers x 128 wide,
//        vocab 256, context 64, tied output weight, AdamW 1e-3, betas
//        (0.9, 0.95), weight decay 0.1 on matrices) at a global batch of 32
//        sequences = 2,048 tokens, random token ids in [0, 256);
//   cnn  dsl_examples/fashion_cnn.train (two 3x3 conv + ReLU + 2x2
//        max-pool blocks on oneDNN, 3136-256-10 head, dropout) at a
//        global batch of 256 images.
//
//   1 rank    gpus 1, micro_batch = global batch, accumulate 1
//   2 ranks   gpus 2, micro_batch = global batch / 2, accumulate 1, the
//             file's buckets, with overlap (ExecutorOptions::overlap) and,
//             for the MLP, without; for the MLP and the GPT also with
//             zero = 1 (all-gathers at the step's end, and at the next
//             step's start: zero_gather = next_forward), zero = 2, zero = 3,
//             grad_comm = bf16 and
//             zero + bf16, with the bytes each rank
//             sends per step (measured on the loopback interface, and the
//             plan's count)
//
// Two ranks are two processes: this binary re-executes itself through
// LaunchLocalWorkers, each worker builds a GlooCommunicator from the
// launcher's rendezvous folder and rank 0 prints its median step time on
// stdout, which the launcher writes to a file that this process reads.
// PyTorch's figures come from tools/bench/torch_cpu_bench.py (eager, one
// thread; DDP over Gloo, two processes of one thread; the same models,
// batches and optimizers).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/comm/mpi/mpi_communicator.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/exec/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/rank_env.h"
#include "tools/bench/bench_data.h"
#include "tools/bench/plan_file.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

constexpr char kTorchScript[] = "tools/bench/torch_cpu_bench.py";
// What a worker prints for the launcher's output file to be parsed.
constexpr char kResultTag[] = "CPU_BENCH_RESULT";

// One benchmarked model.
struct ModelConfig {
  const char* key;           // "mlp", "gpt" or "cnn": --only, --worker-model
  const char* train_file;
  int global_batch;          // samples (sequences) per optimizer step
  int32_t id_range;          // i32 inputs and labels: random ids in [0, n)
  bool per_token;            // rate in tokens/s (else samples/s)
  const char* torch_prefix;  // torch_cpu_bench.py's result names
  const char* description;   // for the table's section line
  int ctx = 0;               // > 0: the model's constant ctx (--ctx), one rank only
};

// key, train_file, global_batch, id_range (classes), per_token, torch names
constexpr ModelConfig kMlp = {"mlp", "dsl_examples/fashion_mlp.train", 256,
                              10, false, "torch_",
                              "784-256-128-10 MLP, adamw"};
// id_range: the vocabulary (token ids in [0, 256), inputs and targets).
constexpr ModelConfig kGpt = {
    "gpt", "dsl_examples/tiny_gpt.train", 32, 256, true, "torch_gpt_",
    "4 layers x 128, ctx 64, vocab 256, tied head, adamw 1e-3, "
    "betas (0.9, 0.95), wd 0.1 on matrices"};
constexpr ModelConfig kCnn = {
    "cnn", "dsl_examples/fashion_cnn.train", 256, 10, false, "torch_cnn_",
    "conv 32 3x3, pool, conv 64 3x3, pool, 3136-256-10, dropout 0.3, adamw; "
    "oneDNN"};
// The compute-heavy MLP of issue 14: 4.5 GFLOP per step.
constexpr ModelConfig kWide = {"wide", "dsl_examples/wide_mlp.train", 256, 10,
                               false, "torch_wide_",
                               "784-1024-1024-1024-10 MLP, adamw"};
// The tiny GPT at context 1024 (2 sequences: the same 2,048 tokens per step),
// where attention's T x T probabilities would dominate memory: one rank,
// ms/step and the process's peak RSS, beside PyTorch's materialized
// softmax(q k^T) v (Debian's torch 1.13 has no scaled_dot_product_attention).
constexpr ModelConfig kGpt1024 = {
    "gpt1024", "dsl_examples/tiny_gpt.train", 2, 256, true, "torch_gpt_",
    "tiny_gpt with --ctx 1024", 1024};
// dsl_examples/llama_tiny.train (6 x 256, GQA, RoPE, SwiGLU, RMSNorm).
constexpr ModelConfig kLlama = {
    "llama", "dsl_examples/llama_tiny.train", 32, 256, true, "torch_llama_",
    "6 layers x 256, 8 heads over 2 kv heads, rope, swiglu 688, rmsnorm, ctx 64, "
    "untied head, adamw 2e-3"};
// Measured first, so this process's peak RSS after it is its own.
constexpr const ModelConfig* kModels[] = {&kGpt1024, &kMlp, &kGpt, &kLlama, &kCnn, &kWide};

const ModelConfig* FindModel(const std::string& key) {
  for (const ModelConfig* m : kModels) {
    if (key == m->key) return m;
  }
  return nullptr;
}

// --cpu-time: TimeSteps reads the process's CPU clock (one rank: the
// compute thread's work, and the comm thread's, which only waits).
bool cpu_time_steps = false;

struct Args {
  int steps = 300;
  int warmup = 30;
  int gpt_steps = 40;
  int gpt_warmup = 5;
  int cnn_steps = 20;
  int cnn_warmup = 3;
  int wide_steps = 30;
  int wide_warmup = 3;
  std::string only;  // empty: both models
  bool torch = true;
  bool one_rank = false;  // --one-rank: no two-rank rows
  bool bf16 = true;       // --no-bf16: no precision = bf16 rows
  // Internal, for the re-executed workers: "overlap" or "no-overlap", and
  // the model's key (they take --steps and --warmup as given).
  std::string worker_mode;
  std::string worker_model = "mlp";
};

// --blas, through the environment: the re-executed workers and every
// CpuDevice read it (runtime/cpu/gemm.h).
absl::Status SetBlasEnv(const std::string& v) {
  cpu::BlasChoice blas;
  if (absl::Status s = EnumInto(&blas)(v); !s.ok()) return s;
  setenv("TRAINC_BLAS", v.c_str(), 1);
  return absl::OkStatus();
}

// The command line's table, setting `*args`; its Help() is --help.
// A flag's parser: a positive integer into *out.
std::function<absl::Status(const std::string&)> Positive(int* out) {
  return [out](const std::string& v) -> absl::Status {
    if (!absl::SimpleAtoi(v, out) || *out < 1) {
      return absl::InvalidArgumentError(absl::StrCat("not a positive integer: ", v));
    }
    return absl::OkStatus();
  };
}

// --steps, --warmup and their per-model variants.
void AddStepCounts(OptionParser& parser, Args* args) {
  parser
      .Value({"--steps"}, "N", "timed steps per MLP configuration (default 300)",
             Positive(&args->steps))
      .Value({"--warmup"}, "N", "untimed MLP steps first (default 30)", Positive(&args->warmup))
      .Value({"--gpt-steps"}, "N", "timed steps per GPT configuration (default 40)",
             Positive(&args->gpt_steps))
      .Value({"--gpt-warmup"}, "N", "untimed GPT steps first (default 5)",
             Positive(&args->gpt_warmup))
      .Value({"--cnn-steps"}, "N", "timed steps per CNN configuration (default 20)",
             Positive(&args->cnn_steps))
      .Value({"--cnn-warmup"}, "N", "untimed CNN steps first (default 3)",
             Positive(&args->cnn_warmup))
      .Value({"--wide-steps"}, "N", "timed steps per wide-MLP configuration (default 30)",
             Positive(&args->wide_steps))
      .Value({"--wide-warmup"}, "N", "untimed wide-MLP steps first (default 3)",
             Positive(&args->wide_warmup));
}

OptionParser MakeParser(Args* args) {
  auto model = [](std::string* out) {
    return [out](const std::string& v) -> absl::Status {
      if (FindModel(v) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("mlp, gpt, gpt1024, llama, cnn or wide, not ", v));
      }
      *out = v;
      return absl::OkStatus();
    };
  };
  OptionParser parser;
  parser.Usage({"cpu_bench [options]"})
      .Description(
          "Step time on the CPU of four models, each at one rank and at two ranks\n"
          "(processes, Gloo over loopback), beside PyTorch eager and DDP\n"
          "(tools/bench/torch_cpu_bench.py, one thread per rank):\n"
          "  mlp  the default example (fashion_mlp.train: 784-256-128-10 MLP, AdamW),\n"
          "       global batch 256; two ranks with and without overlapping the\n"
          "       all-reduces with the backward pass, and with ZeRO-1 (zero = 1; its\n"
          "       all-gathers at the step's end or the next step's start), ZeRO-2,\n"
          "       ZeRO-3 and bf16 gradients (grad_comm = bf16): ms/step and\n"
          "       bytes sent per step;\n"
          "  gpt  tiny_gpt.train (4 layers x 128 wide, context 64, AdamW), global\n"
          "       batch 32 sequences x 64 tokens; ZeRO and bf16 rows as the MLP's;\n"
          "  cnn  fashion_cnn.train (two 3x3 conv + max-pool blocks, oneDNN), global\n"
          "       batch 256 images;\n"
          "  wide wide_mlp.train (784-1024-1024-1024-10, AdamW: 4.5 GFLOP per step,\n"
          "       11.6 MB of gradients), global batch 256; no PyTorch reference;\n"
          "  llama llama_tiny.train (6 layers x 256, grouped-query attention, RoPE,\n"
          "       SwiGLU), global batch 32 x 64 tokens;\n"
          "  gpt1024 tiny_gpt.train at context 1024, 2 sequences, one rank: ms/step\n"
          "       and peak RSS beside PyTorch's materialized attention.\n"
          "Where Open MPI's mpirun is installed, the mlp, gpt and wide models also\n"
          "run two ranks over MPI's shared memory (runtime/comm/mpi).\n"
          "Synthetic data; each figure is the median step time of the timed steps;\n"
          "\"ratio\" is our step time / PyTorch's (below 1: faster than PyTorch).\n");
  AddStepCounts(parser, args);
  parser
      .Value({"--only"}, "M", "only the model M (mlp, gpt, gpt1024, llama, cnn or wide)",
             model(&args->only))
      .Switch({"--no-torch"}, "do not run the PyTorch reference", [args] { args->torch = false; })
      .Switch({"--one-rank"}, "only the one-rank rows (fp32, and bf16 for the gpt and llama)",
              [args] { args->one_rank = true; })
      .Switch({"--no-bf16"}, "no precision = bf16 rows (the gpt and llama)",
              [args] { args->bf16 = false; })
      .Switch({"--cpu-time"},
              "one-rank steps in the process's CPU time (for a shared machine)",
              [] { cpu_time_steps = true; })
      .Value({"--blas"}, absl::StrJoin(EnumNames<cpu::BlasChoice>(), "|"),
             "the matrix products' library, as train's --blas (sets TRAINC_BLAS)", SetBlasEnv)
      // What RunTwoRanks passes its workers; not for people.
      .Value({"--worker-mode"}, "MODE", "",
             [args](const std::string& v) {
               args->worker_mode = v;
               return absl::OkStatus();
             })
      .Value({"--worker-model"}, "M", "", model(&args->worker_model));
  return parser;
}

// A two-rank variant: overlap on or off, ZeRO-1 (its all-gathers at the
// step's end or the next step's start), bf16 gradients. Workers get it as
// --worker-mode "overlap[,zeroN][,bf16][,mpi][,next_forward]" or "no-overlap".
struct Variant {
  bool overlap = true;
  int zero = 0;  // the ZeRO stage
  bool bf16 = false;
  bool mpi = false;  // Open MPI's shared memory (mpirun) instead of Gloo
  bool next_forward = false;  // zero_gather = next_forward
  bool precision_bf16 = false;  // precision = bf16 (one rank only)

  std::string Mode() const {
    return absl::StrCat(overlap ? "overlap" : "no-overlap",
                        zero > 0 ? absl::StrCat(",zero", zero) : "",
                        bf16 ? ",bf16" : "", mpi ? ",mpi" : "",
                        next_forward ? ",next_forward" : "");
  }
  static Variant FromMode(absl::string_view mode) {
    Variant v;
    for (absl::string_view part : absl::StrSplit(mode, ',')) {
      if (part == "no-overlap") v.overlap = false;
      if (absl::ConsumePrefix(&part, "zero")) (void)absl::SimpleAtoi(part, &v.zero);
      if (part == "bf16") v.bf16 = true;
      if (part == "mpi") v.mpi = true;
      if (part == "next_forward") v.next_forward = true;
    }
    return v;
  }
};

absl::StatusOr<Plan> CompilePlan(const ModelConfig& model, int gpus,
                                 const Variant& variant = {}) {
  const int micro_batch = model.global_batch / gpus;
  Overrides overrides = {
      {"gpus", absl::StrCat(gpus)},
      {"micro_batch", absl::StrCat(micro_batch)},
      {"accumulate", "1"},
      {"global_batch", absl::StrCat(model.global_batch)}};
  if (variant.zero > 0) overrides.push_back({"zero", absl::StrCat(variant.zero)});
  if (variant.next_forward) overrides.push_back({"zero_gather", "next_forward"});
  if (variant.bf16) overrides.push_back({"grad_comm", "bf16"});
  if (variant.precision_bf16) overrides.push_back({"precision", "bf16"});
  if (model.ctx > 0) overrides.push_back({"ctx", absl::StrCat(model.ctx)});
  PlanOptions options;
  options.workspace = cpu::WorkspaceBytes;  // oneDNN's, for the CNN
  return bench::PlanFile(model.train_file, overrides, options);
}

// Untimed and timed steps for `model`.
int WarmupFor(const ModelConfig& model, const Args& args) {
  if (&model == &kWide) return args.wide_warmup;
  if (&model == &kLlama) return args.gpt_warmup;
  if (&model == &kGpt1024) return 2;
  return &model == &kGpt ? args.gpt_warmup : &model == &kCnn ? args.cnn_warmup : args.warmup;
}
int StepsFor(const ModelConfig& model, const Args& args) {
  if (&model == &kWide) return args.wide_steps;
  if (&model == &kLlama) return std::max(5, args.gpt_steps / 2);
  if (&model == &kGpt1024) return std::max(3, args.gpt_steps / 4);
  return &model == &kGpt ? args.gpt_steps : &model == &kCnn ? args.cnn_steps : args.steps;
}

// Tokens per sample: the elements of the first input per sample (the
// GPT's context); 1 where the rate is in samples.
int64_t TokensPerSample(const ModelConfig& model, const Plan& plan) {
  if (!model.per_token || plan.input_buffers.empty()) return 1;
  const Buffer& b = plan.buffers[plan.input_buffers[0]];
  int64_t n = 1;
  for (size_t i = 1; i < b.shape.size(); ++i) n *= b.shape[i];
  return n;
}

// Bytes the loopback interface has sent since boot (/proc/net/dev), or -1:
// every rank's traffic, measured by the kernel.
int64_t LoopbackBytesSent() {
  FILE* f = std::fopen("/proc/net/dev", "r");
  if (f == nullptr) return -1;
  char line[512];
  int64_t sent = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" :"), absl::SkipWhitespace());
    // lo: rx bytes packets errs drop fifo frame compressed multicast tx bytes
    if (fields.size() > 9 && fields[0] == "lo" && !absl::SimpleAtoi(fields[9], &sent)) {
      sent = -1;
    }
  }
  std::fclose(f);
  return sent;
}

// Runs warmup + steps optimizer steps; returns the median step time (ms).
// With a communicator, a barrier lines the ranks up before the timed steps;
// *loopback_bytes (if given) gets what the loopback interface sent during
// them, -1 if unknown.
absl::Time StepClock() {
  if (!cpu_time_steps) return absl::Now();
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return absl::TimeFromTimespec(t);
}

absl::StatusOr<double> TimeSteps(const ModelConfig& model, const Plan& plan,
                                 Communicator* comm, ExecutorOptions options,
                                 int warmup, int steps, int rank,
                                 int64_t* loopback_bytes = nullptr) {
  CpuDevice device;  // one BLAS thread: the ranks share the cores
  Executor executor(plan, &device, comm, /*tracer=*/nullptr, options);
  if (absl::Status s = executor.Prepare(); !s.ok()) return s;
  if (absl::Status s = bench::InitParameters(plan, device, rank); !s.ok()) return s;
  bench::FixedBatch batches(plan, model.id_range, /*seed=*/100 + rank);
  std::vector<double> ms;
  ms.reserve(steps);
  int64_t loopback_before = -1;
  for (int step = 1; step <= warmup + steps; ++step) {
    if (step == warmup + 1 && comm != nullptr) {
      if (absl::Status s = comm->Barrier(); !s.ok()) return s;
      loopback_before = LoopbackBytesSent();
    }
    const absl::Time begin = StepClock();
    absl::StatusOr<double> loss = executor.RunStep({step, 1e-3}, batches);
    if (!loss.ok()) return loss.status();
    if (step > warmup) {
      ms.push_back(absl::ToDoubleMilliseconds(StepClock() - begin));
    }
  }
  if (loopback_bytes != nullptr) {
    const int64_t after = LoopbackBytesSent();
    *loopback_bytes = loopback_before >= 0 && after >= 0 ? after - loopback_before : -1;
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A re-executed worker: one rank of a two-rank measurement.
int RunWorker(const RankInfo& rank, const Args& args) {
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "cpu_bench rank %d: %s\n", rank.rank,
                 s.ToString().c_str());
    return 1;
  };
  const ModelConfig& model = *FindModel(args.worker_model);
  const Variant variant = Variant::FromMode(args.worker_mode);
  absl::StatusOr<std::unique_ptr<Communicator>> comm;
  if (variant.mpi) {
    comm = MpiCommunicator::Create();  // started by mpirun (RunTwoRanks)
  } else if (rank.rendezvous_kind != RendezvousKind::kFileStore) {
    return fail(absl::FailedPreconditionError(
        "workers are started by cpu_bench itself (file-store rendezvous)"));
  } else {
    GlooOptions gloo;
    gloo.rank = rank.rank;
    gloo.world_size = rank.world_size;
    gloo.file_store_dir = rank.rendezvous;
    comm = GlooCommunicator::Create(gloo);
  }
  if (!comm.ok()) return fail(comm.status());
  absl::StatusOr<Plan> plan = CompilePlan(model, rank.world_size, variant);
  if (!plan.ok()) return fail(plan.status());
  ExecutorOptions options;
  options.overlap = variant.overlap;
  int64_t loopback = -1;
  absl::StatusOr<double> ms = TimeSteps(model, *plan, comm->get(), options,
                                        args.warmup, args.steps, rank.rank, &loopback);
  if (!ms.ok()) return fail(ms.status());
  if (rank.rank == 0) {
    // Loopback carries both ranks' sends: per rank and step, half of it.
    std::printf("%s %.6f %zu %.0f %lld\n", kResultTag, *ms, plan->buckets.size(),
                loopback < 0 ? -1.0 : loopback / 2.0 / args.steps,
                static_cast<long long>(BytesSentPerStep(*plan)));
    std::fflush(stdout);
  }
  return 0;
}

struct TwoRankResult {
  double ms = 0;
  int buckets = 0;
  double loopback_bytes = -1;  // sent per rank and step, measured (-1: unknown)
  int64_t plan_bytes = 0;      // the plan's BytesSentPerStep
};

// Launches two workers of this binary; parses rank 0's result line.
// Runs argv[0] (found on PATH) with `argv`, stdout and stderr into `fd`,
// and waits for it.
absl::Status RunToFd(const std::vector<std::string>& argv, int fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execvp(args[0], args.data());
    _exit(127);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ",
                                          WIFEXITED(wstatus)
                                              ? absl::StrCat("exit ", WEXITSTATUS(wstatus))
                                              : std::string("killed by a signal")));
}

absl::StatusOr<TwoRankResult> RunTwoRanks(const ModelConfig& model, int warmup,
                                          int steps, const Variant& variant) {
  char path[] = "/tmp/cpu_bench_out_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  }
  unlink(path);  // the descriptor is all we need
  std::vector<std::string> argv = {
      "cpu_bench", "--steps", absl::StrCat(steps), "--warmup",
      absl::StrCat(warmup), "--worker-model", model.key, "--worker-mode",
      variant.Mode()};
  absl::Status status;
  if (variant.mpi) {
    // mpirun starts the two ranks of this binary; their output goes to fd.
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) return absl::InternalError("readlink /proc/self/exe failed");
    self[n] = '\0';
    // Started without a shell: no path or argument is ever re-split.
    std::vector<std::string> mpirun = {"mpirun", "--allow-run-as-root", "--oversubscribe",
                                       "--bind-to", "none", "-np", "2", self};
    mpirun.insert(mpirun.end(), argv.begin() + 1, argv.end());
    status = RunToFd(mpirun, fd);
  } else {
    LaunchOptions options;
    options.stdout_fd = fd;
    status = LaunchLocalWorkers(2, argv, options);
  }
  std::string out;
  if (lseek(fd, 0, SEEK_SET) == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  }
  close(fd);
  if (!status.ok()) return status;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> f =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    TwoRankResult r;
    if (f.size() == 5 && f[0] == kResultTag && absl::SimpleAtod(f[1], &r.ms) &&
        absl::SimpleAtoi(f[2], &r.buckets) && absl::SimpleAtod(f[3], &r.loopback_bytes) &&
        absl::SimpleAtoi(f[4], &r.plan_bytes)) {
      return r;
    }
  }
  return absl::InternalError(
      absl::StrCat("two-rank workers printed no result:\n", out));
}

// name -> ms per step, from torch_cpu_bench.py; a reason in *why if none.
std::vector<std::pair<std::string, double>> RunTorch(const ModelConfig& model,
                                                     int warmup, int steps,
                                                     std::string* why) {
  std::vector<std::pair<std::string, double>> out;
  const std::string cmd = absl::StrCat(
      "/usr/bin/python3 ", kTorchScript, " --model ", model.ctx > 0 ? "gpt" : model.key,
      " --batch ", model.global_batch, " --warmup ", warmup, " --iters ", steps,
      model.ctx > 0 ? absl::StrCat(" --ctx ", model.ctx, " --no-ddp") : "", " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *why = absl::StrCat("cannot run ", cmd);
    return out;
  }
  std::string text;
  char line[1024];
  while (fgets(line, sizeof(line), pipe) != nullptr) {
    text += line;
    std::vector<std::string> f = absl::StrSplit(
        absl::string_view(line), absl::ByAnyChar(" \n"), absl::SkipEmpty());
    double ms = 0;
    if (f.size() == 3 && absl::StartsWith(f[0], "torch_") &&
        absl::SimpleAtod(f[1], &ms)) {
      out.push_back({f[0], ms});
    }
  }
  const int rc = pclose(pipe);
  if (out.empty()) {
    *why = absl::StrCat("torch_cpu_bench.py --model ", model.key,
                        " printed no results (exit ", rc,
                        "): ", text.substr(0, 300));
  }
  return out;
}

// One model's figures (ms per step; 0: not measured).
struct ModelResult {
  double one = 0;
  // One rank under precision = bf16 (the GPT and Llama): the products on
  // oneDNN's bf16 kernels where the CPU has them, and widened to f32.
  double bf16 = 0;
  double bf16_widened = 0;
  TwoRankResult overlap;
  std::optional<TwoRankResult> serial;  // the MLP only
  // Two ranks (overlap on) with ZeRO-1 and bf16 gradients (the MLP and
  // GPT), and over Open MPI's shared memory (where mpirun is installed).
  std::vector<std::pair<Variant, TwoRankResult>> variants;
  std::string mpi_why;  // why there is no MPI row, if so
  double torch1 = 0;
  double torch2 = 0;
  // Peak resident memory (KiB) after the one-rank run, ours and PyTorch's
  // (kGpt1024; 0: not measured).
  int64_t rss_kib = 0;
  int64_t torch_rss_kib = 0;
  int64_t tokens_per_sample = 1;
  std::string torch_why;  // why there are no PyTorch figures, if so
};

// PyTorch's figures for `model` into r (or why none).
void RunTorchInto(const ModelConfig& model, bool torch_on, int warmup, int steps,
                  ModelResult& r) {
  if (!torch_on) {
    r.torch_why = "--no-torch";
    return;
  }
  std::vector<std::pair<std::string, double>> torch =
      RunTorch(model, warmup, steps, &r.torch_why);
  for (const auto& [name, value] : torch) {
    if (name == absl::StrCat(model.torch_prefix, "eager_1rank")) {
      r.torch1 = value;
    } else if (name == absl::StrCat(model.torch_prefix, "ddp_gloo_2rank")) {
      r.torch2 = value;
    } else if (name == "torch_peak_rss_kib") {
      r.torch_rss_kib = static_cast<int64_t>(value);
    }
  }
}

// r.bf16 and r.bf16_widened: one rank under precision = bf16, the second
// with TRAINC_BF16_GEMM=widened (runtime/cpu/bf16_matmul.h).
absl::Status MeasureBf16(const ModelConfig& model, int warmup, int steps, ModelResult& r) {
  Variant variant;
  variant.precision_bf16 = true;
  absl::StatusOr<Plan> plan = CompilePlan(model, 1, variant);
  if (!plan.ok()) return plan.status();
  for (bool widened : {false, true}) {
    if (widened) setenv("TRAINC_BF16_GEMM", "widened", 1);
    absl::StatusOr<double> ms = TimeSteps(model, *plan, nullptr, {}, warmup, steps, 0);
    if (widened) unsetenv("TRAINC_BF16_GEMM");
    if (!ms.ok()) return ms.status();
    (widened ? r.bf16_widened : r.bf16) = *ms;
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelResult> MeasureModel(const ModelConfig& model,
                                         const Args& args) {
  const int warmup = WarmupFor(model, args);
  const int steps = StepsFor(model, args);
  ModelResult r;
  // One rank, in this process.
  absl::StatusOr<Plan> plan1 = CompilePlan(model, 1);
  if (!plan1.ok()) return plan1.status();
  r.tokens_per_sample = TokensPerSample(model, *plan1);
  absl::StatusOr<double> one =
      TimeSteps(model, *plan1, nullptr, {}, warmup, steps, 0);
  if (!one.ok()) {
    return absl::Status(one.status().code(),
                        absl::StrCat("1 rank: ", one.status().message()));
  }
  r.one = *one;
  if (args.bf16 && (&model == &kGpt || &model == &kLlama)) {
    if (absl::Status s = MeasureBf16(model, warmup, steps, r); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("1 rank, bf16: ", s.message()));
    }
  }
  if (model.ctx > 0) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) == 0) r.rss_kib = usage.ru_maxrss;
  }
  auto two = [&](const Variant& variant) -> absl::StatusOr<TwoRankResult> {
    absl::StatusOr<TwoRankResult> t =
        RunTwoRanks(model, warmup, steps, variant);
    if (!t.ok()) {
      return absl::Status(t.status().code(),
                          absl::StrCat("2 ranks: ", t.status().message()));
    }
    return t;
  };
  if (model.ctx > 0 || args.one_rank) {
    RunTorchInto(model, args.torch, warmup, steps, r);
    return r;
  }
  absl::StatusOr<TwoRankResult> overlap = two(Variant{});
  if (!overlap.ok()) return overlap.status();
  r.overlap = *overlap;
  if (&model == &kMlp) {
    absl::StatusOr<TwoRankResult> serial = two(Variant{/*overlap=*/false});
    if (!serial.ok()) return serial.status();
    r.serial = *serial;
  }
  std::vector<Variant> variants;
  if (&model == &kMlp || &model == &kGpt) {
    Variant next_forward{true, 1, false};
    next_forward.next_forward = true;
    variants = {Variant{true, 1, false}, Variant{true, 2, false}, Variant{true, 3, false},
                next_forward, Variant{true, 0, true}, Variant{true, 1, true}};
  }
  if (&model != &kCnn) {
    if (std::system("command -v mpirun >/dev/null 2>&1") == 0) {
      variants.push_back(Variant{true, 0, false, /*mpi=*/true});
    } else {
      r.mpi_why = "mpirun not installed (apt-get install openmpi-bin)";
    }
  }
  for (const Variant& v : variants) {
    absl::StatusOr<TwoRankResult> t = two(v);
    if (!t.ok()) return t.status();
    r.variants.emplace_back(v, *t);
  }
  if (&model == &kWide) {
    r.torch_why = "no PyTorch script for the wide MLP";
  } else {
    RunTorchInto(model, args.torch, warmup, steps, r);
  }
  return r;
}

// The threads, the CPUs and what runs the matrix products (the kernels
// OpenBLAS picked change every figure).
void PrintHeader() {
  std::printf(
      "cpu_bench: 1 BLAS thread per rank (PyTorch: 1 thread per rank); %ld "
      "CPUs; ratio = our step time / PyTorch's%s\n",
      sysconf(_SC_NPROCESSORS_ONLN),
      cpu_time_steps ? "; our steps in process CPU time (--cpu-time)" : "");
  const cpu::BlasInfo info = cpu::DescribeBlas();
  const cpu::BlasChoice choice = cpu::BlasChoiceFromEnv().value_or(cpu::BlasChoice::kAuto);
  std::printf("matrix products: %s\n",
              cpu::GemmSummary(cpu::ResolveBlas(choice, info), choice, info).c_str());
  std::printf("bf16 GEMMs (precision = bf16 rows): %s\n", cpu::Bf16GemmSummary().c_str());
}

void PrintSection(const ModelConfig& model, const ModelResult& r, int warmup,
                  int steps) {
  const bool tokens = model.per_token;
  const int64_t per_step = model.global_batch * r.tokens_per_sample;
  const std::string batch =
      tokens ? absl::StrCat(model.global_batch, " x ", r.tokens_per_sample,
                            " = ", per_step, " tokens")
             : absl::StrCat(model.global_batch);
  std::printf("%s: %s (%s), global batch %s; median of %d steps after %d "
              "warm-up\n",
              model.key, model.train_file, model.description, batch.c_str(),
              steps, warmup);
  const char* rate = tokens ? "tokens/s" : "samples/s";
  std::printf("%-30s %10s %11s %9s | %-22s %10s %11s %9s\n", "trainc",
              "ms/step", rate, "vs 1rank", "pytorch", "ms/step", rate,
              "ratio");
  auto per_s = [&](double ms) { return per_step / ms * 1e3; };
  auto row = [&](const std::string& name, double ms, const char* tname,
                 double tms) {
    std::printf("%-30s %10.3f %11.0f %8.2fx | ", name.c_str(), ms, per_s(ms),
                r.one / ms);
    if (tms > 0) {
      // ratio: our time / PyTorch's (below 1: faster than PyTorch).
      std::printf("%-22s %10.3f %11.0f %8.2fx\n", tname, tms, per_s(tms),
                  ms / tms);
    } else {
      std::printf("%-22s %10s %11s %9s\n", tname, "-", "-", "-");
    }
  };
  row(absl::StrCat("1 rank (mb ", model.global_batch, ")"), r.one,
      "eager, 1 thread", r.torch1);
  if (r.bf16 > 0) {
    row("1 rank, precision bf16", r.bf16, "eager fp32, 1 thread", r.torch1);
    row("1 rank, bf16 widened to f32", r.bf16_widened, "", 0);
  }
  if (r.overlap.ms <= 0 && model.ctx == 0) return;  // --one-rank
  if (model.ctx > 0) {
    auto mib = [](int64_t kib) {
      return kib > 0 ? absl::StrFormat("%.0f MiB", kib / 1024.0) : std::string("-");
    };
    std::printf("%-30s %10s %11s %9s | %-22s %10s\n", "peak RSS (process)",
                mib(r.rss_kib).c_str(), "", "", "", mib(r.torch_rss_kib).c_str());
    return;
  }
  row(absl::StrCat("2 ranks, overlap (", r.overlap.buckets, " buckets)"),
      r.overlap.ms, "DDP gloo, 2 procs", r.torch2);
  if (r.serial) {
    row(absl::StrCat("2 ranks, no overlap (", r.serial->buckets, " bkts)"),
        r.serial->ms, "", 0);
  }
  if (r.variants.empty()) return;
  // ZeRO-1 and bf16 gradients on two ranks (overlap on): ms/step, and the
  // bytes each rank sends per step, measured on the loopback interface
  // (TCP payload and headers, Gloo's own messages) beside the plan's count.
  std::printf("%-40s %10s %9s | %14s %14s\n", "2 ranks, overlap", "ms/step",
              "vs fp32", "sent/rank/step", "plan's count");
  auto bytes = [](double b) {
    return b < 0 ? std::string("-") : absl::StrFormat("%.1f KiB", b / 1024);
  };
  auto variant_row = [&](const std::string& name, const TwoRankResult& t) {
    std::printf("%-40s %10.3f %8.2fx | %14s %14s\n", name.c_str(), t.ms,
                r.overlap.ms / t.ms, bytes(t.loopback_bytes).c_str(),
                bytes(static_cast<double>(t.plan_bytes)).c_str());
  };
  variant_row("zero 0, grad_comm fp32", r.overlap);
  for (const auto& [v, t] : r.variants) {
    variant_row(v.mpi ? std::string("Open MPI, shared memory")
                      : absl::StrCat("zero ", v.zero, ", grad_comm ",
                                     v.bf16 ? "bf16" : "fp32",
                                     v.next_forward ? ", gather next fwd" : ""),
                t);
  }
  if (!r.mpi_why.empty()) std::printf("(no Open MPI row: %s)\n", r.mpi_why.c_str());
}

// Issue 37's goals for one rank's step time against PyTorch eager's, by
// model key; 0: none.
double EagerGoal(std::string_view key) {
  if (key == "mlp") return 0.5;
  if (key == "gpt" || key == "llama") return 0.7;
  if (key == "cnn") return 0.4;
  return 0;
}

// "0.85x PyTorch eager's time, goal <= 0.7x: NOT met" or why none.
std::string VsTorch(const ModelResult& r, std::string_view key) {
  if (r.torch1 <= 0) return "no PyTorch figure";
  const double ratio = r.one / r.torch1;
  const double goal = EagerGoal(key);
  if (goal <= 0) return absl::StrFormat("%.2fx PyTorch eager's time", ratio);
  return absl::StrFormat("%.2fx PyTorch eager's time, goal <= %.1fx: %s", ratio, goal,
                         ratio <= goal ? "met" : "NOT met");
}

// "; bf16 150.2 ms/step (0.52x fp32's; widened to f32: 400.1)" or "".
std::string Bf16Summary(const ModelResult& r) {
  if (r.bf16 <= 0) return "";
  return absl::StrFormat("; bf16 %.1f ms/step (%.2fx fp32's; widened to f32: %.1f)", r.bf16,
                         r.bf16 / r.one, r.bf16_widened);
}

// --one-rank's summary line: each model measured, by its key.
void PrintOneRankSummary(
    const std::vector<std::pair<const char*, const std::optional<ModelResult>*>>& results) {
  std::vector<std::string> summary;
  for (const auto& [key, r] : results) {
    if (*r) {
      summary.push_back(absl::StrFormat("%s 1 rank %.1f ms/step (%s)%s", key, (*r)->one,
                                        VsTorch(**r, key), Bf16Summary(**r)));
    }
  }
  std::printf("summary: %s\n", absl::StrJoin(summary, "; ").c_str());
}

// Each model's measurements; a model not measured (--only) is none.
struct BenchResults {
  std::optional<ModelResult> mlp, gpt, cnn, wide, gpt1024, llama;
};

// Measures the models --only selects into `*results`; false (having said
// why on stderr) when one fails.
bool MeasureModels(const Args& args, BenchResults* results) {
  for (const ModelConfig* model : kModels) {
    if (!args.only.empty() && args.only != model->key) continue;
    absl::StatusOr<ModelResult> r = MeasureModel(*model, args);
    if (!r.ok()) {
      std::fprintf(stderr, "cpu_bench: %s: %s\n", model->key,
                   r.status().ToString().c_str());
      return false;
    }
    (model == &kMlp      ? results->mlp
     : model == &kGpt    ? results->gpt
     : model == &kLlama  ? results->llama
     : model == &kCnn    ? results->cnn
     : model == &kWide   ? results->wide
                         : results->gpt1024) = *std::move(r);
  }
  return true;
}

void PrintSections(const BenchResults& r, const Args& args) {
  PrintHeader();
  if (r.mlp) PrintSection(kMlp, *r.mlp, args.warmup, args.steps);
  if (r.gpt) PrintSection(kGpt, *r.gpt, args.gpt_warmup, args.gpt_steps);
  if (r.llama) {
    PrintSection(kLlama, *r.llama, WarmupFor(kLlama, args), StepsFor(kLlama, args));
  }
  if (r.cnn) PrintSection(kCnn, *r.cnn, args.cnn_warmup, args.cnn_steps);
  if (r.wide) PrintSection(kWide, *r.wide, args.wide_warmup, args.wide_steps);
  if (r.gpt1024) {
    PrintSection(kGpt1024, *r.gpt1024, WarmupFor(kGpt1024, args), StepsFor(kGpt1024, args));
  }
}

// The full run's summary line, one clause per model measured, against
// issue 37's goals, then why PyTorch figures are missing.
void PrintSummary(const BenchResults& r) {
  const auto& [mlp, gpt, cnn, wide, gpt1024, llama] = r;
  std::vector<std::string> summary;
  if (mlp) {
    const double speedup = mlp->one / mlp->overlap.ms;
    summary.push_back(absl::StrFormat(
        "mlp 1 rank %.3f ms/step (%s); 2 ranks %.3f ms/step = %.2fx one "
        "rank (goal >= 1.7x: %s); overlap saves %.3f ms/step vs no overlap",
        mlp->one, VsTorch(*mlp, "mlp"), mlp->overlap.ms, speedup,
        speedup >= 1.7 ? "met" : "NOT met", mlp->serial->ms - mlp->overlap.ms));
  }
  if (gpt) {
    summary.push_back(absl::StrFormat(
        "tiny gpt 1 rank %.1f ms/step (%s); 2 ranks %.1f ms/step = %.2fx one "
        "rank%s%s",
        gpt->one, VsTorch(*gpt, "gpt"), gpt->overlap.ms, gpt->one / gpt->overlap.ms,
        gpt->torch2 > 0
            ? absl::StrFormat(", %.2fx PyTorch DDP's time",
                              gpt->overlap.ms / gpt->torch2)
            : "",
        Bf16Summary(*gpt)));
  }
  if (cnn) {
    summary.push_back(absl::StrFormat(
        "cnn 1 rank %.1f ms/step (%s); 2 ranks %.1f ms/step = %.2fx one rank",
        cnn->one, VsTorch(*cnn, "cnn"), cnn->overlap.ms, cnn->one / cnn->overlap.ms));
  }
  if (wide) {
    // The best two-rank figure, Gloo or Open MPI.
    double best = wide->overlap.ms;
    for (const auto& [v, t] : wide->variants) best = std::min(best, t.ms);
    summary.push_back(absl::StrFormat(
        "wide mlp 1 rank %.1f ms/step; 2 ranks %.1f ms/step (Gloo) = %.2fx, "
        "best %.1f ms/step = %.2fx one rank (goal >= 1.7x: %s)",
        wide->one, wide->overlap.ms, wide->one / wide->overlap.ms, best,
        wide->one / best, wide->one / best >= 1.7 ? "met" : "NOT met"));
  }
  if (llama) {
    summary.push_back(absl::StrFormat("llama 1 rank %.1f ms/step (%s); 2 ranks %.1f ms/step%s",
                                      llama->one, VsTorch(*llama, "llama"), llama->overlap.ms,
                                      Bf16Summary(*llama)));
  }
  if (gpt1024) {
    summary.push_back(absl::StrFormat(
        "tiny gpt at context 1024, 1 rank %.1f ms/step, peak RSS %.0f MiB (PyTorch eager: "
        "%.1f ms/step, %.0f MiB)",
        gpt1024->one, gpt1024->rss_kib / 1024.0, gpt1024->torch1,
        gpt1024->torch_rss_kib / 1024.0));
  }
  // Why PyTorch figures are missing, once per distinct reason.
  std::vector<std::string> why;
  for (const std::optional<ModelResult>* m : {&mlp, &gpt, &llama, &cnn, &wide, &gpt1024}) {
    if (*m && !(*m)->torch_why.empty() &&
        std::find(why.begin(), why.end(), (*m)->torch_why) == why.end()) {
      why.push_back((*m)->torch_why);
    }
  }
  if (!why.empty()) {
    summary.push_back(absl::StrCat("torch: ", absl::StrJoin(why, "; ")));
  }
  std::printf("summary: %s\n", absl::StrJoin(summary, "; ").c_str());
}

int Main(const Args& args) {
  absl::StatusOr<std::optional<RankInfo>> rank = RankFromEnvironment();
  if (!rank.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", rank.status().ToString().c_str());
    return 1;
  }
  if (rank->has_value() && !args.worker_mode.empty()) {
    return RunWorker(**rank, args);
  }
  BenchResults r;
  if (!MeasureModels(args, &r)) return 1;
  PrintSections(r, args);
  if (args.one_rank) {
    PrintOneRankSummary({{"mlp", &r.mlp}, {"gpt", &r.gpt}, {"llama", &r.llama},
                         {"cnn", &r.cnn}, {"wide", &r.wide}});
    return 0;
  }
  PrintSummary(r);
  return 0;
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  trainc::Args args;
  const trainc::OptionParser parser = trainc::MakeParser(&args);
  const absl::StatusOr<bool> help = parser.Parse(argc, argv);
  if (!help.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(help.status().message()).c_str());
    return 2;
  }
  if (*help) {
    std::fputs(parser.Help().c_str(), stdout);
    return 0;
  }
  return trainc::Main(args);
}
