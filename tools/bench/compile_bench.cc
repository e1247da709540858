// compile_bench: how long BuildPlan takes as models grow.
//
//   bazel run //tools/bench:compile_bench -- [--layers=100,1000,10000] [--reps=3]
//   bazel run //tools/bench:compile_bench -- --help
//
// Generates deep models (TrainSpecs built directly: the front end is not
// involved) of `layers` blocks `l<i> = relu(linear(x, width))`, with a
// layernorm and a residual add every fourth block, and prints one row per
// size: instructions, buffers, buckets, best-of-reps compile time and time
// per layer. Compile time should grow linearly; the summary line says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "compiler/spec/train_spec.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

// The command line (the names and defaults of the absl flags it had).
struct Args {
  std::vector<int> layers = {100, 1000, 10000};
  int reps = 3;
  int width = 64;
};

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(Args* args) {
  auto integer = [](int* out) {
    return [out](const std::string& v) -> absl::Status {
      if (!absl::SimpleAtoi(v, out)) {
        return absl::InvalidArgumentError(absl::StrCat("expected an integer, got '", v, "'"));
      }
      return absl::OkStatus();
    };
  };
  OptionParser parser;
  parser.Usage({"compile_bench [--layers=100,1000,10000] [--reps=3] [--width=64]"})
      .Description("Compile-time benchmark of the planner (TrainSpec -> Plan).\n")
      .Value({"--layers"}, "N[,N...]", "comma-separated model depths (default 100,1000,10000)",
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
             integer(&args->reps))
      .Value({"--width"}, "N", "features per layer (default 64)",
             [args](const std::string& v) -> absl::Status {
               if (!absl::SimpleAtoi(v, &args->width) || args->width < 1) {
                 return absl::InvalidArgumentError(
                     absl::StrCat("expected an integer >= 1, got '", v, "'"));
               }
               return absl::OkStatus();
             });
  return parser;
}

// A deep model following train_spec.h's naming rules.
TrainSpec DeepModel(int layers, int64_t width) {
  TrainSpec spec;
  ModelSpec& m = spec.model;
  m.name = absl::StrCat("deep", layers);
  m.inputs.push_back({"x", ElementType::kF32, {width}, {}});
  m.labels.push_back({"y", ElementType::kI32, {10}, /*class_index=*/true, {}});
  auto op = [&](const std::string& name, const std::string& kind,
                std::vector<std::string> inputs, std::vector<int64_t> shape) -> OpSpec& {
    OpSpec s;
    s.name = name;
    s.op = kind;
    s.inputs = std::move(inputs);
    s.output = {name, ElementType::kF32, std::move(shape), {}};
    m.ops.push_back(std::move(s));
    return m.ops.back();
  };
  auto linear = [&](const std::string& stmt, const std::string& name, const std::string& x,
                    int64_t in, int64_t out) {
    OpSpec& s = op(name, "linear", {x}, {out});
    s.args["out_features"] = ops::ArgValue::Int(out);
    s.parameters = {stmt + ".weight", stmt + ".bias"};
    m.parameters.push_back({stmt + ".weight", {out, in}, ops::Init::kUniformFanIn, double(in)});
    m.parameters.push_back({stmt + ".bias", {out}, ops::Init::kUniformFanIn, double(in)});
  };
  std::string h = "x";
  for (int i = 0; i < layers; ++i) {
    const std::string l = absl::StrCat("l", i);
    linear(l, l + ".0", h, width, width);
    op(l, "relu", {l + ".0"}, {width});
    if (i % 4 == 3) {
      const std::string n = absl::StrCat("n", i), r = absl::StrCat("r", i);
      OpSpec& ln = op(n, "layernorm", {l}, {width});
      ln.parameters = {n + ".weight", n + ".bias"};
      m.parameters.push_back({n + ".weight", {width}, ops::Init::kOnes, 0});
      m.parameters.push_back({n + ".bias", {width}, ops::Init::kZeros, 0});
      op(r, "add", {n, h}, {width});
      h = r;
    } else {
      h = l;
    }
  }
  linear("logits", "logits", h, width, 10);
  op("loss", "cross_entropy", {"logits", "y"}, {});
  m.loss = "loss";
  spec.train.gpus = 8;
  spec.train.micro_batch = 32;
  spec.train.accumulate = 2;
  spec.train.global_batch = 8 * 32 * 2;
  spec.train.epochs = 1;
  spec.train.bucket_mb = 1;
  return spec;
}

int Main(const Args& args) {
  const std::vector<int>& sizes = args.layers;
  const int reps = std::max(1, args.reps);
  std::printf("%10s %14s %10s %9s %14s %14s\n", "layers", "instructions", "buffers",
              "buckets", "compile_ms", "ms_per_layer");
  std::vector<double> per_layer;
  for (int layers : sizes) {
    const TrainSpec spec = DeepModel(layers, args.width);
    double best = 1e300;
    Plan plan;
    for (int r = 0; r < reps; ++r) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<Plan> built = BuildPlan(spec);
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start).count();
      if (!built.ok()) {
        std::fprintf(stderr, "compile_bench: %s\n", built.status().ToString().c_str());
        return 1;
      }
      best = std::min(best, ms);
      plan = *std::move(built);
    }
    per_layer.push_back(best / layers);
    std::printf("%10d %14zu %10zu %9zu %14.2f %14.4f\n", layers, plan.instructions.size(),
                plan.buffers.size(), plan.buckets.size(), best, best / layers);
  }
  const auto [lo, hi] = std::minmax_element(per_layer.begin(), per_layer.end());
  std::printf("# ms/layer from %.4f to %.4f (ratio %.2f; ~1 means linear growth)\n", *lo, *hi,
              *hi / *lo);
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
