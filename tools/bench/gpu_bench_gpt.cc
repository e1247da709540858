#include "tools/bench/gpu_bench_gpt.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/memory_search.h"
#include "compiler/planner/planner.h"
#include "runtime/cuda/cuda_device.h"
#include "tools/bench/bench_data.h"
#include "tools/bench/gemm_peak.h"
#include "tools/bench/gpu_bench_util.h"
#include "tools/bench/plan_file.h"

namespace trainc::bench {
namespace {

struct GptModel {
  const char* name;
  const char* train_file;
  int64_t vocab, ctx, width, heads, layers;  // for the PyTorch script
};

constexpr GptModel kTinyGpt{"tiny_gpt", "dsl_examples/tiny_gpt.train", 256, 64, 128, 4, 4};
constexpr GptModel kGpt2Small{"gpt2_small", "dsl_examples/gpt2_small.train", 50257, 1024, 768,
                              12, 12};

absl::StatusOr<Plan> CompileGpt(const GptModel& m, int64_t micro_batch) {
  const Overrides overrides = {{"gpus", "1"},
                               {"micro_batch", absl::StrCat(micro_batch)},
                               {"accumulate", "1"},
                               {"global_batch", absl::StrCat(micro_batch)},
                               {"precision", "bf16"}};
  PlanOptions options;
  options.workspace = CudaWorkspaceBytes;
  options.bf16_staging = CudaBf16StagingBytes;
  options.default_machine = "h100_nvlink_ib";
  return PlanFile(m.train_file, overrides, options);
}

}  // namespace

double GptStepFlops(const Plan& plan) {
  double params = 0;
  for (int id : plan.parameter_buffers) params += plan.buffers[id].bytes / 4;
  double attention_per_token = 0;
  int64_t tokens = 0;
  for (const Instruction& in : plan.instructions) {
    if (KernelOpOfInstruction(in.op) != KernelOp::kAttention || in.phase != Phase::kForward || in.micro_step != 0) {
      continue;
    }
    const std::vector<int64_t>& y = plan.buffers[in.outputs[0]].shape;  // [B, T, d]
    if (y.size() != 3) continue;
    attention_per_token += 12.0 * y[2] * y[1];
    tokens = y[0] * y[1];
  }
  return (6.0 * params + attention_per_token) * static_cast<double>(tokens);
}

namespace {

// The largest micro-batch (a multiple of 16, at most 256) whose planned
// memory fits `budget`, or 16.
absl::StatusOr<int64_t> LargestMicroBatch(const GptModel& m, int64_t budget) {
  int64_t best = 16;
  for (int64_t mb = 32; mb <= 256; mb += 16) {
    absl::StatusOr<Plan> plan = CompileGpt(m, mb);
    if (!plan.ok()) return plan.status();
    if (DeviceBytes(*plan) > budget) break;
    best = mb;
  }
  return best;
}

struct Row {
  std::string what;
  double ms = 0, tokens_per_s = 0, mfu = 0, gib = 0;
  std::string note;
};

absl::StatusOr<Row> RunTrainc(const GptModel& m, int64_t micro_batch, double peak,
                              const GptBenchArgs& args) {
  absl::StatusOr<Plan> plan = CompileGpt(m, micro_batch);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) return device.status();
  FixedBatch batches(*plan, m.vocab, /*seed=*/0);
  absl::StatusOr<Timing> t = TimeSteps(*plan, **device, batches, ExecutorOptions(),
                                       args.warmup, args.iters);
  if (!t.ok()) return t.status();
  Row r;
  r.what = "trainc";
  r.ms = t->ms;
  r.tokens_per_s = micro_batch * m.ctx / t->ms * 1e3;
  r.mfu = peak > 0 ? GptStepFlops(*plan) / (t->ms * 1e-3) / (peak * 1e12) : 0;
  r.gib = static_cast<double>(DeviceBytes(*plan)) / (1 << 30);
  r.note = t->graph_note.empty() ? "planned arena + bf16 staging"
                                 : absl::StrCat("not replayed as a graph: ", t->graph_note);
  return r;
}

// torch_gpt2_bench.py's rows: RESULT gpt2_<mode> ms tokens/s peak_GiB loss.
std::vector<Row> RunTorch(const GptModel& m, int64_t micro_batch, double flops,
                          double peak, const GptBenchArgs& args) {
  std::string why;
  const std::vector<ScriptResult> results = RunScript(
      args.torch_script,
      absl::StrFormat("--micro_batch %d --warmup %d --iters %d --vocab %d --ctx %d "
                      "--width %d --heads %d --layers %d",
                      micro_batch, args.warmup, args.iters, m.vocab, m.ctx, m.width, m.heads,
                      m.layers),
      &why);
  std::vector<Row> rows;
  for (const ScriptResult& s : results) {
    if (s.values.size() < 3) continue;
    Row r;
    r.what = absl::StrCat("torch ", absl::StripPrefix(s.name, "gpt2_"));
    r.ms = s.values[0];
    r.tokens_per_s = s.values[1];
    r.gib = s.values[2];
    r.mfu = peak > 0 ? flops / (r.ms * 1e-3) / (peak * 1e12) : 0;
    r.note = "torch.cuda.max_memory_allocated";
    rows.push_back(r);
  }
  if (rows.empty()) rows.push_back({"torch", 0, 0, 0, 0, why});
  return rows;
}

void PrintRow(const std::string& model, int64_t micro_batch, const Row& r) {
  if (r.ms <= 0) {
    std::printf("%-11s %4lld  %-15s %s\n", model.c_str(), static_cast<long long>(micro_batch),
                r.what.c_str(), r.note.c_str());
    return;
  }
  std::printf("%-11s %4lld  %-15s %10.2f %12.0f %6.1f%% %9.2f  %s\n", model.c_str(),
              static_cast<long long>(micro_batch), r.what.c_str(), r.ms, r.tokens_per_s,
              100 * r.mfu, r.gib, r.note.c_str());
}

}  // namespace

int PrintGptRows(const GptBenchArgs& args) {
  absl::StatusOr<GpuFacts> gpu = QueryGpu();
  if (!gpu.ok()) {
    std::printf("gpt rows: %s\n", gpu.status().ToString().c_str());
    return 1;
  }
  double peak = args.peak_tflops;
  if (peak <= 0) {
    peak = absl::StrContains(gpu->name, "H100") && absl::StrContains(gpu->name, "PCIe") ? 756
           : absl::StrContains(gpu->name, "H100") || absl::StrContains(gpu->name, "H200")
               ? 989
           : absl::StrContains(gpu->name, "A100") ? 312
                                                  : 0;
  }
  std::printf("\nGPT, precision = bf16, one %s (dense bf16 peak %s TFLOP/s), fixed random "
              "tokens; MFU = (6N + 12 L d T) tokens / time / peak\n",
              gpu->name.c_str(), peak > 0 ? absl::StrCat(peak).c_str() : "unknown: --peak");
  std::printf("%-11s %4s  %-15s %10s %12s %7s %9s  %s\n", "model", "mb", "", "ms/step",
              "tokens/s", "MFU", "mem GiB", "memory is");
  int64_t large = args.large_micro_batch;
  if (large <= 0) {
    absl::StatusOr<int64_t> fits =
        LargestMicroBatch(kGpt2Small, gpu->free_bytes - (int64_t{3} << 30));
    large = fits.ok() ? *fits : 16;
  }
  struct Case {
    const GptModel* model;
    int64_t micro_batch;
  };
  std::vector<Case> cases = {{&kTinyGpt, 32}, {&kGpt2Small, 16}};
  if (large != 16) cases.push_back({&kGpt2Small, large});
  int failures = 0;
  for (const Case& c : cases) {
    absl::StatusOr<Row> mine = RunTrainc(*c.model, c.micro_batch, peak, args);
    if (!mine.ok()) {
      PrintRow(c.model->name, c.micro_batch, {"trainc", 0, 0, 0, 0,
                                              absl::StrCat("failed: ", mine.status().ToString())});
      ++failures;
      continue;
    }
    PrintRow(c.model->name, c.micro_batch, *mine);
    if (!args.torch) continue;
    absl::StatusOr<Plan> plan = CompileGpt(*c.model, c.micro_batch);
    const double flops = plan.ok() ? GptStepFlops(*plan) : 0;
    for (const Row& r : RunTorch(*c.model, c.micro_batch, flops, peak, args)) {
      PrintRow(c.model->name, c.micro_batch, r);
      if (r.what == "torch compile" && r.ms > 0) {
        std::printf("%-11s %4s  trainc at %.2fx torch.compile's tokens/s\n", "", "",
                    mine->tokens_per_s / r.tokens_per_s);
      }
    }
  }
  return failures;
}

}  // namespace trainc::bench
