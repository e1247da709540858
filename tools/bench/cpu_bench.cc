// cpu_bench: step time of trainc on the CPU, one rank and two, next to
// PyTorch on the same machine.
//
//   bazel run //tools/bench:cpu_bench [-- --steps 300 --no-torch]
//
// The model is the default example (dsl_examples/fashion_mlp.train: a
// 784-256-128-10 MLP, AdamW) at a global batch of 256, compiled by the real
// front end (CompileFile with overrides) and planner (BuildPlan), run by the
// shared Executor on a CpuDevice with synthetic data (one random batch
// uploaded every micro-step: data loading is not what this measures).
//
//   1 rank    gpus 1, micro_batch 256, accumulate 1
//   2 ranks   gpus 2, micro_batch 128, accumulate 1, the file's buckets,
//             with overlap (ExecutorOptions::overlap) and without
//
// Two ranks are two processes: this binary re-executes itself through
// LaunchLocalWorkers, each worker builds a GlooCommunicator from the
// launcher's rendezvous folder and rank 0 prints its median step time on
// stdout, which the launcher writes to a file that this process reads.
// PyTorch's figures come from tools/bench/torch_cpu_bench.py (eager, one
// thread; DDP over Gloo, two processes of one thread).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "runtime/comm/gloo/gloo_communicator.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/batch_source.h"
#include "runtime/exec/executor.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/rank_env.h"

namespace trainc {
namespace {

constexpr char kTrainFile[] = "dsl_examples/fashion_mlp.train";
constexpr char kTorchScript[] = "tools/bench/torch_cpu_bench.py";
constexpr int kGlobalBatch = 256;
// What a worker prints for the launcher's output file to be parsed.
constexpr char kResultTag[] = "CPU_BENCH_RESULT";

constexpr char kUsage[] = R"(usage: cpu_bench [--steps N] [--warmup N] [--no-torch]

Step time of the default example (fashion_mlp.train: 784-256-128-10 MLP,
AdamW, global batch 256) on the CPU: one rank, and two ranks (processes,
Gloo over loopback) with and without overlapping the all-reduces with the
backward pass, beside PyTorch eager and DDP (tools/bench/torch_cpu_bench.py).
Synthetic data; each figure is the median step time of the timed steps.

  --steps N     timed steps per configuration (default 300)
  --warmup N    untimed steps first (default 30)
  --no-torch    do not run the PyTorch reference
  -h, --help    this help
)";

struct Args {
  int steps = 300;
  int warmup = 30;
  bool torch = true;
  // Internal, for the re-executed workers: "overlap" or "no-overlap".
  std::string worker_mode;
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv, bool* help) {
  Args args;
  *help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      }
      return std::string(argv[++i]);
    };
    auto positive = [&](const char* name, int* out) -> absl::Status {
      absl::StatusOr<std::string> v = value(name);
      if (!v.ok()) return v.status();
      if (!absl::SimpleAtoi(*v, out) || *out < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": not a positive integer: ", *v));
      }
      return absl::OkStatus();
    };
    if (a == "-h" || a == "--help") {
      *help = true;
    } else if (a == "--steps") {
      if (absl::Status s = positive("--steps", &args.steps); !s.ok()) return s;
    } else if (a == "--warmup") {
      if (absl::Status s = positive("--warmup", &args.warmup); !s.ok()) {
        return s;
      }
    } else if (a == "--no-torch") {
      args.torch = false;
    } else if (a == "--worker-mode") {
      absl::StatusOr<std::string> v = value("--worker-mode");
      if (!v.ok()) return v.status();
      args.worker_mode = *v;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument ", a));
    }
  }
  return args;
}

absl::StatusOr<Plan> CompilePlan(int gpus, int micro_batch) {
  const Overrides overrides = {{"gpus", absl::StrCat(gpus)},
                               {"micro_batch", absl::StrCat(micro_batch)},
                               {"accumulate", "1"},
                               {"global_batch", absl::StrCat(kGlobalBatch)}};
  FrontendResult result = CompileFile(kTrainFile, overrides);
  if (!result.spec) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTrainFile, ": compilation failed (run from the "
                                 "runfiles tree, e.g. with bazel run)\n",
                     FormatDiagnostics(result.diagnostics, result.source)));
  }
  return BuildPlan(*result.spec);
}

// The same random batch every micro-step.
class FixedBatch : public BatchSource {
 public:
  FixedBatch(const Plan& plan, int seed) {
    std::mt19937 rng(seed);
    for (int id : plan.input_buffers) {
      const Buffer& b = plan.buffers[id];
      // Labels: a class index per sample; features: pixel-like [0, 1).
      std::vector<char> data(b.bytes);
      const int64_t classes = 10;
      for (int64_t i = 0; i < b.bytes / 4; ++i) {
        if (b.dtype == DType::kI32) {
          const int32_t v = static_cast<int32_t>(rng() % classes);
          std::memcpy(data.data() + 4 * i, &v, 4);
        } else {
          const float v = std::uniform_real_distribution<float>(0, 1)(rng);
          std::memcpy(data.data() + 4 * i, &v, 4);
        }
      }
      data_.push_back(std::move(data));
    }
  }

  absl::Status Fill(int /*micro_step*/, const Plan& plan,
                    Device& device) override {
    for (size_t i = 0; i < plan.input_buffers.size(); ++i) {
      const Buffer& b = plan.buffers[plan.input_buffers[i]];
      absl::Status s = device.Upload(b.offset, data_[i].data(), b.bytes);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::vector<char>> data_;
};

// Same initial parameters on every rank (seeded), as a real run has.
absl::Status InitParameters(const Plan& plan, Device& device) {
  std::mt19937 rng(1);
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    std::vector<float> init(b.bytes / 4);
    std::uniform_real_distribution<float> uni(-b.init_bound, b.init_bound);
    for (float& v : init) {
      v = b.init == "ones" ? 1.0f : b.init == "zeros" ? 0.0f : uni(rng);
    }
    absl::Status s = device.Upload(b.offset, init.data(), b.bytes);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Runs warmup + steps optimizer steps; returns the median step time (ms).
// With a communicator, a barrier lines the ranks up before the timed steps.
absl::StatusOr<double> TimeSteps(const Plan& plan, Communicator* comm,
                                 ExecutorOptions options, const Args& args,
                                 int rank) {
  CpuDevice device;  // one BLAS thread: the ranks share the cores
  Executor executor(plan, &device, comm, /*tracer=*/nullptr, options);
  if (absl::Status s = executor.Prepare(); !s.ok()) return s;
  if (absl::Status s = InitParameters(plan, device); !s.ok()) return s;
  FixedBatch batches(plan, /*seed=*/100 + rank);
  std::vector<double> ms;
  ms.reserve(args.steps);
  for (int step = 1; step <= args.warmup + args.steps; ++step) {
    if (step == args.warmup + 1 && comm != nullptr) {
      if (absl::Status s = comm->Barrier(); !s.ok()) return s;
    }
    const absl::Time begin = absl::Now();
    absl::StatusOr<double> loss = executor.RunStep({step, 1e-3}, batches);
    if (!loss.ok()) return loss.status();
    if (step > args.warmup) {
      ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - begin));
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A re-executed worker: one rank of the two-rank measurement.
int RunWorker(const RankInfo& rank, const Args& args) {
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "cpu_bench rank %d: %s\n", rank.rank,
                 s.ToString().c_str());
    return 1;
  };
  if (rank.rendezvous_kind != RendezvousKind::kFileStore) {
    return fail(absl::FailedPreconditionError(
        "workers are started by cpu_bench itself (file-store rendezvous)"));
  }
  absl::StatusOr<Plan> plan = CompilePlan(rank.world_size,
                                          kGlobalBatch / rank.world_size);
  if (!plan.ok()) return fail(plan.status());
  GlooOptions gloo;
  gloo.rank = rank.rank;
  gloo.world_size = rank.world_size;
  gloo.file_store_dir = rank.rendezvous;
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> comm =
      GlooCommunicator::Create(gloo);
  if (!comm.ok()) return fail(comm.status());
  ExecutorOptions options;
  options.overlap = args.worker_mode != "no-overlap";
  absl::StatusOr<double> ms =
      TimeSteps(*plan, comm->get(), options, args, rank.rank);
  if (!ms.ok()) return fail(ms.status());
  if (rank.rank == 0) {
    std::printf("%s %.6f %zu\n", kResultTag, *ms, plan->buckets.size());
    std::fflush(stdout);
  }
  return 0;
}

struct TwoRankResult {
  double ms = 0;
  int buckets = 0;
};

// Launches two workers of this binary; parses rank 0's result line.
absl::StatusOr<TwoRankResult> RunTwoRanks(const Args& args, bool overlap) {
  char path[] = "/tmp/cpu_bench_out_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("mkstemp: ", std::strerror(errno)));
  }
  unlink(path);  // the descriptor is all we need
  std::vector<std::string> argv = {
      "cpu_bench", "--steps", absl::StrCat(args.steps), "--warmup",
      absl::StrCat(args.warmup), "--worker-mode",
      overlap ? "overlap" : "no-overlap"};
  LaunchOptions options;
  options.stdout_fd = fd;
  absl::Status status = LaunchLocalWorkers(2, argv, options);
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
    if (f.size() == 3 && f[0] == kResultTag && absl::SimpleAtod(f[1], &r.ms) &&
        absl::SimpleAtoi(f[2], &r.buckets)) {
      return r;
    }
  }
  return absl::InternalError(
      absl::StrCat("two-rank workers printed no result:\n", out));
}

// name -> ms per step, from torch_cpu_bench.py; a reason in *why if none.
std::vector<std::pair<std::string, double>> RunTorch(const Args& args,
                                                      std::string* why) {
  std::vector<std::pair<std::string, double>> out;
  const std::string cmd =
      absl::StrCat("/usr/bin/python3 ", kTorchScript, " --warmup ",
                   args.warmup, " --iters ", args.steps, " 2>&1");
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
    *why = absl::StrCat("torch_cpu_bench.py printed no results (exit ", rc,
                        "): ", text.substr(0, 300));
  }
  return out;
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

  // One rank, in this process.
  absl::StatusOr<Plan> plan1 = CompilePlan(1, kGlobalBatch);
  if (!plan1.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", plan1.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<double> one = TimeSteps(*plan1, nullptr, {}, args, 0);
  if (!one.ok()) {
    std::fprintf(stderr, "cpu_bench: 1 rank: %s\n",
                 one.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<TwoRankResult> overlap = RunTwoRanks(args, true);
  absl::StatusOr<TwoRankResult> serial = RunTwoRanks(args, false);
  for (const auto* r : {&overlap, &serial}) {
    if (!r->ok()) {
      std::fprintf(stderr, "cpu_bench: 2 ranks: %s\n",
                   r->status().ToString().c_str());
      return 1;
    }
  }
  std::string torch_why = "--no-torch";
  std::vector<std::pair<std::string, double>> torch;
  if (args.torch) {
    torch_why.clear();
    torch = RunTorch(args, &torch_why);
  }
  auto torch_ms = [&](const char* name) -> double {
    for (const auto& [n, ms] : torch) {
      if (n == name) return ms;
    }
    return 0;
  };
  const double torch1 = torch_ms("torch_eager_1rank");
  const double torch2 = torch_ms("torch_ddp_gloo_2rank");

  auto sps = [](double ms) { return kGlobalBatch / ms * 1e3; };
  std::printf(
      "cpu_bench: %s, global batch %d, adamw; median of %d steps after %d "
      "warm-up; 1 BLAS thread per rank; %ld CPUs\n",
      kTrainFile, kGlobalBatch, args.steps, args.warmup,
      sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-30s %10s %11s %9s | %-22s %10s %11s %9s\n", "trainc",
              "ms/step", "samples/s", "vs 1rank", "pytorch", "ms/step",
              "samples/s", "vs torch");
  auto row = [&](const std::string& name, double ms, const char* tname,
                 double tms) {
    std::printf("%-30s %10.3f %11.0f %8.2fx | ", name.c_str(), ms, sps(ms),
                *one / ms);
    if (tms > 0) {
      // vs torch: our time / PyTorch's (below 1: faster than PyTorch).
      std::printf("%-22s %10.3f %11.0f %8.2fx\n", tname, tms, sps(tms),
                  ms / tms);
    } else {
      std::printf("%-22s %10s %11s %9s\n", tname, "-", "-", "-");
    }
  };
  row("1 rank (mb 256)", *one, "eager, 1 thread", torch1);
  row(absl::StrCat("2 ranks, overlap (", overlap->buckets, " buckets)"),
      overlap->ms, "DDP gloo, 2 procs", torch2);
  row(absl::StrCat("2 ranks, no overlap (", serial->buckets, " bkts)"),
      serial->ms, "", 0);
  const double speedup = *one / overlap->ms;
  std::printf(
      "summary: 1 rank %.3f ms/step (%s); 2 ranks %.3f ms/step = %.2fx one "
      "rank (goal >= 1.7x: %s); overlap saves %.3f ms/step vs no overlap%s%s\n",
      *one,
      torch1 > 0 ? absl::StrCat(absl::StrFormat("%.2f", *one / torch1),
                                "x PyTorch eager's time, goal <= 0.7x: ",
                                *one / torch1 <= 0.7 ? "met" : "NOT met")
                       .c_str()
                 : "no PyTorch figure",
      overlap->ms, speedup, speedup >= 1.7 ? "met" : "NOT met",
      serial->ms - overlap->ms, torch_why.empty() ? "" : "; torch: ",
      torch_why.c_str());
  return 0;
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  bool help = false;
  absl::StatusOr<trainc::Args> args = trainc::ParseArgs(argc, argv, &help);
  if (help) {
    std::fputs(trainc::kUsage, stdout);
    return 0;
  }
  if (!args.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n%s", args.status().message().data(),
                 trainc::kUsage);
    return 2;
  }
  return trainc::Main(*args);
}
