// make_synthetic PLAN_OUT [TRACE_OUT] [--layers N] [--bucket-kb K] [--steps S]
// Writes a synthetic MLP plan (and a trace for it) for shell tests.
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "compiler/plan/plan_io.h"
#include "tools/viz/plan_loader.h"
#include "tools/viz/synthetic.h"

int main(int argc, char** argv) {
  std::string plan_path, trace_path, from;
  trainc::viz::MlpPlanOptions options;
  int steps = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &options.hidden_layers)) return 2;
    } else if (a == "--bucket-kb" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &options.bucket_bytes)) return 2;
      options.bucket_bytes *= 1024;
    } else if (a == "--from" && i + 1 < argc) {
      from = argv[++i];
    } else if (a == "--steps" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &steps)) return 2;
    } else if (plan_path.empty()) {
      plan_path = a;
    } else {
      trace_path = a;
    }
  }
  if (plan_path.empty()) {
    std::cerr << "usage: make_synthetic PLAN_OUT [TRACE_OUT] [--layers N] [--bucket-kb K] [--steps S] [--from F]\n";
    return 2;
  }
  trainc::Plan plan = trainc::viz::MakeSyntheticPlan(options);
  if (!from.empty()) {
    absl::StatusOr<trainc::Plan> loaded = trainc::viz::LoadPlanForViz(from);
    if (!loaded.ok()) {
      std::cerr << loaded.status().message() << "\n";
      return 1;
    }
    plan = *std::move(loaded);
  }
  if (absl::Status s = trainc::WritePlanFile(plan, plan_path); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  if (!trace_path.empty()) {
    std::FILE* f = std::fopen(trace_path.c_str(), "w");
    if (f == nullptr) return 1;
    std::string t = trainc::viz::MakeSyntheticTrace(plan, steps);
    std::fwrite(t.data(), 1, t.size(), f);
    std::fclose(f);
  }
  return 0;
}
