// compile_bench: how long compiling takes as models grow.
//
//   bazel run //tools/bench:compile_bench -- [--layers=1000,10000,100000] [--reps=3]
//   bazel run //tools/bench:compile_bench -- --help
//
// Generates the .train source of a deep MLP, `layers` statements
// `h<i> = gelu(linear(h<i-1>, W), approximate = "tanh")` (--residual:
// pre-norm blocks `h + linear(gelu(linear(layernorm(h), 2 W)), W)`, where
// every fusion pass has work), then a layernorm, a linear and the
// cross-entropy loss, and compiles
// it as `train --compile-only -o` does: the front end, lowering, autodiff,
// the graph passes and the planner (buckets, schedule, memory plan,
// validation), then the plan summary and the plan file's text. One row per
// size: instructions, buffers, each phase's time and the time per layer,
// best of `reps`; wall time and the process's CPU time (what a loaded
// machine does not inflate). Compile time should grow linearly: the
// summary lines compare the CPU time per layer of the sizes and give the
// growth exponent between consecutive sizes (1 linear, 2 quadratic).
//
// --repeat writes the blocks as `repeat(layer, n, x)` (nested past 10,000,
// repeat's limit), --recompute adds train { recompute = true } (implies
// --repeat), --bf16 precision = bf16.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

struct Args {
  std::vector<int> layers = {1000, 10000, 100000};
  int reps = 3;
  int width = 16;
  bool residual = false;
  bool repeat = false;
  bool recompute = false;
  bool bf16 = false;
};

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(Args* args) {
  auto positive = [](int* out) {
    return [out](const std::string& v) -> absl::Status {
      if (!absl::SimpleAtoi(v, out) || *out < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("expected an integer >= 1, got '", v, "'"));
      }
      return absl::OkStatus();
    };
  };
  OptionParser parser;
  parser
      .Usage({"compile_bench [--layers=1000,10000,100000] [--reps=3] [--width=16] [--repeat]",
              "              [--recompute] [--bf16]"})
      .Description("Compile-time benchmark: generated .train source -> plan file text.\n")
      .Value({"--layers"}, "N[,N...]", "comma-separated model depths (default 1000,10000,100000)",
             [args](const std::string& v) -> absl::Status {
               args->layers.clear();
               for (absl::string_view s : absl::StrSplit(v, ',')) {
                 int n;
                 if (!absl::SimpleAtoi(s, &n) || n < 1) {
                   return absl::InvalidArgumentError(absl::StrCat("bad entry '", s, "'"));
                 }
                 args->layers.push_back(n);
               }
               return absl::OkStatus();
             })
      .Value({"--reps"}, "N", "compiles per size (the best is reported; default 3)",
             positive(&args->reps))
      .Value({"--width"}, "N", "features of the residual stream (default 16)",
             positive(&args->width))
      .Switch({"--residual"}, "pre-norm residual blocks instead of plain layers",
              [args] { args->residual = true; })
      .Switch({"--repeat"}, "write the blocks as repeat(layer, n, x)",
              [args] { args->repeat = true; })
      .Switch({"--recompute"}, "recompute = true (every repeat block; implies --repeat)",
              [args] { args->recompute = args->repeat = true; })
      .Switch({"--bf16"}, "precision = bf16", [args] { args->bf16 = true; });
  return parser;
}

// repeat's largest count (compiler/frontend/model_checker.cc).
constexpr int kMaxRepeat = 10000;

// One layer of `x`, as a block's statements (n, u, the value returned).
std::string Layer(bool residual, const std::string& x, const std::string& i) {
  if (!residual) {
    return absl::StrCat("  h", i, " = gelu(linear(", x, ", width), approximate = \"tanh\")\n");
  }
  return absl::StrCat("  n", i, " = layernorm(", x, ")\n  u", i, " = gelu(linear(n", i,
                      ", 2 * width), approximate = \"tanh\")\n  h", i, " = ", x,
                      " + linear(u", i, ", width)\n");
}

// The model's layers, from `x` to the last one's value (`*out`): `layers`
// statements, or repeat(...) of a block, nested as groups of up to
// kMaxRepeat when there are more.
std::string Layers(const Args& args, int layers, std::string* out) {
  if (args.repeat) {
    std::string s = absl::StrCat("  block layer(x) {\n", Layer(args.residual, "x", ""),
                                 "    return h\n  }\n");
    *out = "h";
    if (layers <= kMaxRepeat) return absl::StrCat(s, "  h = repeat(layer, ", layers, ", x)\n");
    const int groups = layers / kMaxRepeat, rest = layers % kMaxRepeat;
    absl::StrAppend(&s, "  block group(x) {\n    g = repeat(layer, ", kMaxRepeat,
                    ", x)\n    return g\n  }\n");
    if (rest == 0) return absl::StrCat(s, "  h = repeat(group, ", groups, ", x)\n");
    return absl::StrCat(s, "  g = repeat(group, ", groups, ", x)\n  h = repeat(layer, ", rest,
                        ", g)\n");
  }
  std::string s, h = "x";
  for (int i = 0; i < layers; ++i) {
    absl::StrAppend(&s, Layer(args.residual, h, absl::StrCat(i)));
    h = absl::StrCat("h", i);
  }
  *out = h;
  return s;
}

std::string DeepModel(const Args& args, int layers) {
  std::string h;
  const std::string blocks = Layers(args, layers, &h);
  return absl::StrCat(
      "model deep", layers, " {\n  const width = ", args.width, "\n",
      "  input  x: f32[width]\n  label  y: i32[10]\n", blocks, "  ln_f = layernorm(", h,
      ")\n  logits = linear(ln_f, 10)\n  loss = cross_entropy(logits, y)\n}\n",
      "data { train = idx(\"x.gz\", \"y.gz\") }\n",
      "train {\n  gpus = 8\n  micro_batch = 32\n  accumulate = 2\n  steps = 1\n"
      "  bucket_mb = 1\n",
      args.recompute ? "  recompute = true\n" : "", args.bf16 ? "  precision = bf16\n" : "",
      "}\n");
}

// One compile's phases, in milliseconds (wall), and its CPU time.
struct Timing {
  double front_end = 0, planner = 0, output = 0, total = 0, cpu = 0;
  size_t instructions = 0, buffers = 0, text_bytes = 0;
};

absl::StatusOr<Timing> CompileOnce(const std::string& source) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  Timing t;
  const std::clock_t cpu0 = std::clock();
  const auto t0 = Clock::now();
  const FrontendResult r = CompileSource(source, "deep.train", {}, {/*read_data=*/false});
  if (!r.spec) {
    return absl::InvalidArgumentError(FormatDiagnostics(r.diagnostics, r.source));
  }
  const auto t1 = Clock::now();
  absl::StatusOr<Plan> plan = BuildPlan(*r.spec);
  if (!plan.ok()) return plan.status();
  const auto t2 = Clock::now();
  const std::string summary = PlanSummary(*plan);
  const std::string text = PlanToText(*plan);
  const auto t3 = Clock::now();
  t.cpu = 1000.0 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  t.front_end = ms(t0, t1);
  t.planner = ms(t1, t2);
  t.output = ms(t2, t3);
  t.total = ms(t0, t3);
  t.instructions = plan->instructions.size();
  t.buffers = plan->buffers.size();
  t.text_bytes = summary.size() + text.size();
  return t;
}

int Main(const Args& args) {
  std::printf("%8s %12s %9s %12s %11s %10s %10s %10s %12s %12s\n", "layers", "instructions",
              "buffers", "front_end_ms", "planner_ms", "output_ms", "total_ms", "cpu_ms",
              "ms_per_layer", "cpu_per_layer");
  std::vector<double> per_layer;
  for (int layers : args.layers) {
    const std::string source = DeepModel(args, layers);
    Timing best;
    best.total = best.cpu = 1e300;
    for (int r = 0; r < args.reps; ++r) {
      absl::StatusOr<Timing> t = CompileOnce(source);
      if (!t.ok()) {
        std::fprintf(stderr, "compile_bench: %d layers: %s\n", layers,
                     std::string(t.status().message()).c_str());
        return 1;
      }
      const double cpu = std::min(best.cpu, t->cpu);
      if (t->total < best.total) best = *t;
      best.cpu = cpu;
    }
    per_layer.push_back(best.cpu / layers);
    std::printf("%8d %12zu %9zu %12.1f %11.1f %10.1f %10.1f %10.1f %12.4f %12.4f\n", layers,
                best.instructions, best.buffers, best.front_end, best.planner, best.output,
                best.total, best.cpu, best.total / layers, best.cpu / layers);
  }
  const auto [lo, hi] = std::minmax_element(per_layer.begin(), per_layer.end());
  std::printf("# CPU ms/layer from %.4f to %.4f (ratio %.2f; ~1 means linear growth)\n", *lo,
              *hi, *hi / *lo);
  // CPU time ~ layers^k between consecutive sizes: 1 linear, 2 a quadratic
  // pass (k = 1 + log(per-layer ratio) / log(size ratio)).
  std::printf("# growth exponent of CPU time between sizes:");
  for (size_t i = 1; i < per_layer.size(); ++i) {
    const double sizes = static_cast<double>(args.layers[i]) / args.layers[i - 1];
    std::printf(" %d->%d %.2f", args.layers[i - 1], args.layers[i],
                1 + std::log(per_layer[i] / per_layer[i - 1]) / std::log(sizes));
  }
  std::printf(" (1: linear, 2: quadratic)\n");
  return 0;
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  trainc::Args args;
  const trainc::OptionParser parser = trainc::MakeParser(&args);
  const absl::StatusOr<bool> help = parser.Parse(argc, argv);
  if (!help.ok()) {
    std::cerr << "compile_bench: " << help.status().message() << "\n";
    return 2;
  }
  if (*help) {
    std::cout << parser.Help();
    return 0;
  }
  return trainc::Main(args);
}
