#include "tools/simulate/scaling.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/util/status_macros.h"

namespace trainc::simulate {
namespace {

bool IsTrainFile(const std::string& file) { return absl::EndsWith(file, ".train"); }

// The plan for `gpus` ranks: recompiled from a .train file, or a plan
// file's own plan run on that many ranks (the same per-rank work).
absl::StatusOr<ScalingPoint> SimulateAt(const std::string& input, Overrides overrides,
                                        int64_t gpus, const cost::MachineProfile& profile,
                                        bool overlap) {
  const bool train_file = IsTrainFile(input);
  if (train_file) overrides.emplace_back("gpus", absl::StrCat(gpus));
  ASSIGN_OR_RETURN(Plan plan, LoadPlanForProfile(input, overrides, profile, overlap));
  ScalingPoint point;
  point.bucket_choice = plan.bucket_choice;
  point.gpus = gpus;
  point.global_batch =
      train_file ? plan.global_batch : plan.global_batch / plan.world_size * gpus;
  cost::SimulationOptions options;
  options.world_size = gpus;
  options.overlap = overlap;
  ASSIGN_OR_RETURN(point.prediction, cost::SimulateStep(plan, profile, options));
  point.prediction.spans.clear();
  return point;
}

double SamplesPerRankPerSecond(const ScalingPoint& p) {
  return p.global_batch / (p.prediction.step_us * 1e-6) / p.gpus;
}

std::string DescribePlan(const Plan& plan) {
  int64_t grad_bytes = 0;
  for (const Bucket& b : plan.buckets) grad_bytes += b.bytes;
  std::string out =
      plan.bucket_choice.empty()
          ? absl::StrFormat("bucket_mb %g: %d buckets, %.2f MiB of gradients", plan.bucket_mb,
                            plan.buckets.size(), grad_bytes / 1048576.0)
          : absl::StrFormat("bucket_mb auto (chosen per world size), %.2f MiB of "
                            "gradients", grad_bytes / 1048576.0);
  if (plan.zero > 0) {
    absl::StrAppend(&out, ", ZeRO-", plan.zero,
                    plan.zero == 1 ? " (reduce-scatter, sharded optimizer, all-gather)"
                                   : " (reduce-scatter, sharded gradients and optimizer, "
                                     "all-gather)");
  }
  if (plan.grad_comm != GradComm::kFp32) {
    absl::StrAppend(&out, ", ", EnumName(plan.grad_comm), " gradients");
  }
  return out;
}

}  // namespace

absl::StatusOr<cost::MachineProfile> LoadProfileFlag(const std::string& machine) {
  absl::StatusOr<cost::MachineProfile> profile = cost::LoadMachineProfile(machine);
  if (!profile.ok()) {
    return absl::Status(profile.status().code(),
                        absl::StrCat("--machine ", machine, ": ", profile.status().message()));
  }
  return profile;
}

absl::StatusOr<Plan> LoadPlanForProfile(const std::string& file, const Overrides& overrides,
                                        const cost::MachineProfile& profile, bool overlap) {
  if (!IsTrainFile(file)) {
    if (!overrides.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", overrides[0].first, ": ", file, " is a compiled plan; recompile "
          "the .train file to change it"));
    }
    return ReadPlanFile(file);
  }
  FrontendResult result = CompileFile(file, overrides);
  if (!result.spec) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, " does not compile:\n", FormatDiagnostics(result.diagnostics, result.source)));
  }
  PlanOptions options;
  options.machine = &profile;
  options.overlap = overlap;
  absl::StatusOr<Plan> plan = BuildPlan(*result.spec, options);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat(file, ": planning failed: ", plan.status().message()));
  }
  return plan;
}

std::vector<int64_t> DefaultWorldSizes() {
  std::vector<int64_t> gpus;
  for (int64_t n = 1; n <= 1024; n *= 2) gpus.push_back(n);
  return gpus;
}

absl::StatusOr<std::vector<int64_t>> ParseWorldSizes(const std::string& value) {
  std::vector<int64_t> gpus;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    int64_t n;
    if (!absl::SimpleAtoi(item, &n) || n < 1 || n > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpus: expected world sizes >= 1, got '", item, "'"));
    }
    gpus.push_back(n);
  }
  if (gpus.empty()) return absl::InvalidArgumentError("--gpus: needs a value");
  return gpus;
}

absl::StatusOr<std::vector<ScalingCurve>> SimulateScaling(const std::string& input,
                                                          const cost::MachineProfile& profile,
                                                          const ScalingOptions& options) {
  const std::vector<int64_t> gpus =
      options.gpus.empty() ? DefaultWorldSizes() : options.gpus;
  std::vector<std::string> buckets = options.bucket_mb;
  if (buckets.empty()) buckets.push_back("");  // the file's
  std::vector<ScalingCurve> curves;
  for (const std::string& bucket_mb : buckets) {
    Overrides overrides = options.overrides;
    if (!bucket_mb.empty()) overrides.emplace_back("bucket_mb", bucket_mb);
    ASSIGN_OR_RETURN(Plan first, LoadPlanForProfile(input, overrides, profile, options.overlap));
    ScalingCurve curve;
    curve.bucket_mb = bucket_mb;
    curve.model = first.model;
    curve.description = DescribePlan(first);
    curve.label = absl::StrCat(
        "bucket_mb ", !bucket_mb.empty()               ? bucket_mb
                      : !first.bucket_choice.empty() ? std::string("auto")
                                                     : absl::StrFormat("%g", first.bucket_mb));
    // Efficiency is against one rank, whether or not 1 is among `gpus`.
    ASSIGN_OR_RETURN(ScalingPoint one_rank,
                     SimulateAt(input, overrides, 1, profile, options.overlap));
    for (int64_t n : gpus) {
      if (n == 1) {
        curve.points.push_back(one_rank);
      } else {
        ASSIGN_OR_RETURN(ScalingPoint point,
                         SimulateAt(input, overrides, n, profile, options.overlap));
        curve.points.push_back(std::move(point));
      }
      curve.points.back().efficiency =
          SamplesPerRankPerSecond(curve.points.back()) / SamplesPerRankPerSecond(one_rank);
    }
    curves.push_back(std::move(curve));
  }
  return curves;
}

}  // namespace trainc::simulate
