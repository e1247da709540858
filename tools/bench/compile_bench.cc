// compile_bench: how long BuildPlan takes as models grow.
//
//   bazel run //tools/bench:compile_bench -- [--layers=100,1000,10000] [--reps=3]
//
// Generates deep models (TrainSpecs built directly: the front end is not
// involved) of `layers` blocks `l<i> = relu(linear(x, width))`, with a
// layernorm and a residual add every fourth block, and prints one row per
// size: instructions, buffers, buckets, best-of-reps compile time and time
// per layer. Compile time should grow linearly; the summary line says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "compiler/spec/train_spec.h"

ABSL_FLAG(std::string, layers, "100,1000,10000", "comma-separated model depths");
ABSL_FLAG(int, reps, 3, "compiles per size (the best is reported)");
ABSL_FLAG(int, width, 64, "features per layer");

namespace trainc {
namespace {

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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Compile-time benchmark of the planner (TrainSpec -> Plan).\n"
      "Usage: compile_bench [--layers=100,1000,10000] [--reps=3] [--width=64]");
  absl::ParseCommandLine(argc, argv);
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_layers), ',')) {
    int n;
    if (!absl::SimpleAtoi(s, &n) || n < 1) {
      std::fprintf(stderr, "compile_bench: bad --layers entry '%s'\n", std::string(s).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  std::printf("%10s %14s %10s %9s %14s %14s\n", "layers", "instructions", "buffers",
              "buckets", "compile_ms", "ms_per_layer");
  std::vector<double> per_layer;
  for (int layers : sizes) {
    const TrainSpec spec = DeepModel(layers, absl::GetFlag(FLAGS_width));
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

int main(int argc, char** argv) { return trainc::Main(argc, argv); }
