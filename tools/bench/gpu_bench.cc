// gpu_bench: step time of trainc on one GPU next to PyTorch eager.
//
//   bazel run -c opt //tools/bench:gpu_bench [-- --iters=50 --torch=false]
//   bazel run //tools/bench:gpu_bench -- --help
//
// Builds each model's Plan with the real planner (BuildPlan), runs it with
// the shared Executor on a CudaDevice, and prints one table: step time and
// samples/s for
//   small       784-256-128-10 MLP, ReLU, cross-entropy, AdamW, batch 256,
//               each step one CUDA-graph replay (the executor's default)
//   small_eager the same with every kernel launched one by one (--no-graph)
//   large_fp32  4096 -> 4 x (Linear 4096 + ReLU) -> 10, batch 4096
//   large_tf32  the same with plan.tf32 (cuBLAS TF32 tensor cores)
//   large_tf32_upload  the same with each replay's batch uploaded before
//               it, not during the step before (the trainer's way since)
//   large_bf16  the same with precision = bf16 (bf16 GEMMs, f32 masters;
//               PyTorch: torch.autocast(bfloat16)); %peak against TF32's
// with achieved TFLOP/s against a measured cuBLAS GEMM rate (the same
// precision), and torch_gpu_bench.py's figures beside them. Exits with a
// message (status 0) on a machine without a GPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "compiler/spec/train_spec.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/exec/batch_source.h"
#include "runtime/exec/executor.h"
#include "tools/bench/gemm_peak.h"
#include "tools/bench/bench_data.h"
#include "tools/bench/gpu_bench_gpt.h"
#include "tools/bench/gpu_bench_util.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

// The command line (the names and defaults of the absl flags it had).
struct Args {
  int warmup = 10;
  int iters = 50;
  bool torch = true;
  std::string torch_script = "tools/bench/torch_gpu_bench.py";
  std::string only;  // "mlp" or "gpt": one table; "": both
  bench::GptBenchArgs gpt;
};

// An integer option at least `min`.
OptionParser::SetValue AtLeast(int min, int* out) {
  return [min, out](const std::string& v) -> absl::Status {
    if (!absl::SimpleAtoi(v, out) || *out < min) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected an integer >= ", min, ", got '", v, "'"));
    }
    return absl::OkStatus();
  };
}

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(Args* args) {
  OptionParser parser;
  parser.Usage({"gpu_bench [--warmup=N] [--iters=N] [--notorch] [--torch_script=PATH]",
                "gpu_bench --only gpt [--gpt_iters=N] [--gpt_micro_batch=N] [--peak=TFLOPS]"})
      .Description(
          "GPU step time and samples/s of the default model and of a 4x4096 MLP\n"
          "(global batch 4096), against PyTorch eager on the same GPU, with the\n"
          "large model's TFLOP/s against the measured cuBLAS peak; then tiny_gpt\n"
          "and GPT-2 small in bf16 (micro-batch 16 and the largest that fits):\n"
          "ms/step, tokens/s, MFU and memory beside PyTorch eager and torch.compile\n"
          "(tools/bench/torch_gpt2_bench.py). Without a GPU it says so and exits\n"
          "with status 0.\n")
      .Value({"--warmup"}, "N", "untimed steps first (default 10)", AtLeast(0, &args->warmup))
      .Value({"--iters"}, "N", "timed steps per model (default 50)", AtLeast(1, &args->iters))
      .Bool({"--torch"}, "also run torch_gpu_bench.py and show its numbers (default true)",
            [args](bool on) { args->torch = on; })
      .Switch({"--notorch", "--no-torch"}, "the same as --torch=false",
              [args] { args->torch = false; })
      .Value({"--torch_script"}, "PATH",
             "the PyTorch reference script (default tools/bench/torch_gpu_bench.py)",
             [args](const std::string& v) {
               args->torch_script = v;
               return absl::OkStatus();
             })
      .Value({"--only"}, "mlp|gpt", "one table: the MLPs or the GPTs (default both)",
             [args](const std::string& v) {
               if (v != "mlp" && v != "gpt") {
                 return absl::InvalidArgumentError(
                     absl::StrCat("--only takes mlp or gpt, got '", v, "'"));
               }
               args->only = v;
               return absl::OkStatus();
             })
      .Value({"--gpt_iters"}, "N", "timed steps per GPT row (default 20)",
             AtLeast(1, &args->gpt.iters))
      .Value({"--gpt_micro_batch"}, "N",
             "gpt2_small's second micro-batch (default: the largest whose plan fits the "
             "GPU's free memory less 3 GiB)",
             AtLeast(1, &args->gpt.large_micro_batch))
      .Value({"--peak"}, "TFLOPS",
             "the GPU's dense bf16 peak for MFU (default by its name: H100/H200 SXM 989, "
             "H100 PCIe 756, A100 312)",
             [args](const std::string& v) {
               if (!absl::SimpleAtod(v, &args->gpt.peak_tflops) || args->gpt.peak_tflops <= 0) {
                 return absl::InvalidArgumentError(
                     absl::StrCat("--peak takes TFLOP/s > 0, got '", v, "'"));
               }
               return absl::OkStatus();
             });
  return parser;
}

struct Model {
  std::string name;
  std::string torch_name;       // torch_gpu_bench.py's row to compare with
  std::vector<int64_t> widths;  // input, hidden..., classes
  int64_t batch;
  bool tf32;
  bool graph = true;            // ExecutorOptions::capture
  bool bf16 = false;            // precision = bf16 (PyTorch: autocast)
  bool feed_ahead = true;       // the next batch fed during the step
};

TrainSpec MlpSpec(const Model& model) {
  TrainSpec spec;
  ModelSpec& m = spec.model;
  m.name = model.name;
  m.inputs.push_back({"x", ElementType::kF32, {model.widths[0]}, {}});
  m.labels.push_back(
      {"y", ElementType::kI32, {model.widths.back()}, /*class_index=*/true, {}});
  std::string h = "x";
  const size_t layers = model.widths.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    const int64_t in = model.widths[i], out = model.widths[i + 1];
    const bool last = i + 1 == layers;
    const std::string stmt = last ? "logits" : absl::StrCat("h", i + 1);
    OpSpec lin;
    lin.name = last ? stmt : stmt + ".0";
    lin.op = ops::ModelOp::kLinear;
    lin.inputs = {h};
    lin.args["out_features"] = ops::ArgValue::Int(out);
    lin.parameters = {stmt + ".weight", stmt + ".bias"};
    lin.output = {lin.name, ElementType::kF32, {out}, {}};
    m.ops.push_back(lin);
    m.parameters.push_back({stmt + ".weight", {out, in},
                            ops::Init::kUniformFanIn, double(in)});
    m.parameters.push_back({stmt + ".bias", {out},
                            ops::Init::kUniformFanIn, double(in)});
    m.parameter_count += out * in + out;
    if (!last) {
      OpSpec relu;
      relu.name = stmt;
      relu.op = ops::ModelOp::kRelu;
      relu.inputs = {lin.name};
      relu.output = {stmt, ElementType::kF32, {out}, {}};
      m.ops.push_back(relu);
    }
    h = stmt;
  }
  OpSpec loss;
  loss.name = "loss";
  loss.op = ops::ModelOp::kCrossEntropy;
  loss.inputs = {"logits", "y"};
  loss.output = {"loss", ElementType::kF32, {}, {}};
  m.ops.push_back(loss);
  m.loss = "loss";
  TrainConfig& t = spec.train;
  t.gpus = 1;
  t.micro_batch = model.batch;
  t.accumulate = 1;
  t.global_batch = model.batch;
  t.steps = 1000000;
  t.optimizer.kind = OptimizerKind::kAdamW;
  t.optimizer.lr = 1e-3;
  t.optimizer.weight_decay = 0.01;
  t.tf32 = model.tf32;
  t.precision = model.bf16 ? Precision::kBf16 : Precision::kFp32;
  return spec;
}

// Matrix-product FLOPs of one step: forward 2·B·in·out per layer, backward
// twice that, less the first layer's unneeded input gradient.
double StepFlops(const Model& m) {
  double f = 0;
  for (size_t i = 0; i + 1 < m.widths.size(); ++i) {
    f += 6.0 * m.batch * m.widths[i] * m.widths[i + 1];
  }
  return f - 2.0 * m.batch * m.widths[0] * m.widths[1];
}

struct Result {
  double ms = 0, samples_per_s = 0, tflops = 0;
  std::string graph_note;  // why steps were not replayed, if they were not
};

absl::StatusOr<Result> RunTrainc(const Model& model, const Args& args) {
  absl::StatusOr<Plan> plan = BuildPlan(MlpSpec(model));
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDevice(0);
  if (!device.ok()) return device.status();
  ExecutorOptions options;
  options.capture = model.graph;
  bench::FixedBatch batches(*plan, model.widths.back(), /*seed=*/0);
  absl::StatusOr<bench::Timing> t =
      bench::TimeSteps(*plan, **device, batches, options, args.warmup, args.iters,
                       model.feed_ahead);
  if (!t.ok()) return t.status();
  Result r;
  r.ms = t->ms;
  r.graph_note = t->graph_note;
  r.samples_per_s = model.batch / r.ms * 1e3;
  r.tflops = StepFlops(model) / (r.ms * 1e-3) / 1e12;
  return r;
}

// torch_gpu_bench.py's rows: name -> (ms, samples/s), or a reason in *why.
std::vector<std::pair<std::string, Result>> RunTorch(const Args& args, std::string* why) {
  std::vector<std::pair<std::string, Result>> out;
  for (const bench::ScriptResult& s :
       bench::RunScript(args.torch_script,
                        absl::StrCat("--warmup=", args.warmup, " --iters=", args.iters), why)) {
    if (s.values.size() < 2) continue;
    Result r;
    r.ms = s.values[0];
    r.samples_per_s = s.values[1];
    out.push_back({s.name, r});
  }
  return out;
}

int MlpTable(const Args& args) {
  const std::vector<Model> models = {
      {"small", "small", {784, 256, 128, 10}, 256, false},
      {"small_eager", "small", {784, 256, 128, 10}, 256, false, false},
      {"large_fp32", "large_fp32", {4096, 4096, 4096, 4096, 4096, 10}, 4096,
       false},
      {"large_tf32", "large_tf32", {4096, 4096, 4096, 4096, 4096, 10}, 4096,
       true},
      {"large_tf32_upload", "large_tf32", {4096, 4096, 4096, 4096, 4096, 10}, 4096,
       true, true, false, /*feed_ahead=*/false},
      {"large_bf16", "large_bf16", {4096, 4096, 4096, 4096, 4096, 10}, 4096,
       false, true, /*bf16=*/true},
  };
  absl::StatusOr<double> peak32 = MeasureGemmTflops(8192, false);
  absl::StatusOr<double> peak_tf32 = MeasureGemmTflops(8192, true);
  std::string torch_why;
  std::vector<std::pair<std::string, Result>> torch;
  if (args.torch) torch = RunTorch(args, &torch_why);

  std::printf("%-17s %6s %12s %14s %9s %8s | %12s %14s %8s\n", "model",
              "batch", "trainc_ms", "trainc_samp/s", "TFLOP/s", "%peak",
              "torch_ms", "torch_samp/s", "speedup");
  int failures = 0;
  for (const Model& m : models) {
    absl::StatusOr<Result> r = RunTrainc(m, args);
    if (!r.ok()) {
      std::printf("%-17s failed: %s\n", m.name.c_str(),
                  r.status().ToString().c_str());
      ++failures;
      continue;
    }
    const absl::StatusOr<double>& peak = m.tf32 || m.bf16 ? peak_tf32 : peak32;
    const double pct = peak.ok() ? 100.0 * r->tflops / *peak : 0.0;
    const Result* t = nullptr;
    for (const auto& [name, res] : torch) {
      if (name == m.torch_name) t = &res;
    }
    std::printf("%-17s %6lld %12.3f %14.0f %9.2f %7.1f%% | ", m.name.c_str(),
                static_cast<long long>(m.batch), r->ms, r->samples_per_s,
                r->tflops, pct);
    if (t != nullptr) {
      std::printf("%12.3f %14.0f %7.2fx\n", t->ms, t->samples_per_s,
                  t->ms / r->ms);
    } else {
      std::printf("%12s %14s %8s\n", "-", "-", "-");
    }
    if (m.graph && !r->graph_note.empty()) {
      std::printf("  %s: steps not replayed as a CUDA graph: %s\n",
                  m.name.c_str(), r->graph_note.c_str());
    }
  }
  std::printf("cuBLAS 8192^3 GEMM: fp32 %s TFLOP/s, tf32 %s TFLOP/s%s%s\n",
              peak32.ok() ? absl::StrCat(*peak32).c_str() : "n/a",
              peak_tf32.ok() ? absl::StrCat(*peak_tf32).c_str() : "n/a",
              torch_why.empty() ? "" : "; torch: ", torch_why.c_str());
  return failures;
}

int Main(const Args& args) {
  if (CudaDeviceCount() == 0) {
    std::printf("gpu_bench: no CUDA GPU on this machine (CudaDeviceCount() == "
                "0); nothing to measure.\n");
    return 0;
  }
  int failures = 0;
  if (args.only != "gpt") failures += MlpTable(args);
  if (args.only != "mlp") {
    bench::GptBenchArgs gpt = args.gpt;
    gpt.warmup = std::min(args.warmup, 5);
    gpt.torch = args.torch;
    failures += bench::PrintGptRows(gpt);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  trainc::Args args;
  const trainc::OptionParser parser = trainc::MakeParser(&args);
  const absl::StatusOr<bool> help = parser.Parse(argc, argv);
  if (!help.ok()) {
    std::cerr << "gpu_bench: " << help.status().message() << "\n";
    return 2;
  }
  if (*help) {
    std::cout << parser.Help();
    return 0;
  }
  return trainc::Main(args);
}
