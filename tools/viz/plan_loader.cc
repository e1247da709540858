#include "tools/viz/plan_loader.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/util/fnv.h"
#include "compiler/util/status_macros.h"
#include "tools/viz/file_util.h"

namespace trainc::viz {
namespace {

// What train's PlanOptionsForDevice gives the planner that a tool can know
// without the backend: the machine profile bucket_mb = auto and memory =
// ... price on when the file names none (the same function's), and whether
// comm overlaps.
PlanOptions OptionsOfRun(const PlanIdentity& ran) {
  PlanOptions options;
  options.default_machine = DefaultMachineOfDevice(ran.device);
  options.overlap = ran.overlap;
  return options;
}

absl::StatusOr<Plan> CompileTrainFile(const std::string& path, const PlanIdentity* ran) {
  const std::string with =
      ran != nullptr && !ran->overrides.empty()
          ? absl::StrCat(" with the run's ", OverridesText(ran->overrides))
          : "";
  FrontendResult result = CompileFile(path, ran != nullptr ? ran->overrides : Overrides{});
  if (!result.spec) {
    // The front end's diagnostics already name file:line:col with a caret.
    return absl::InvalidArgumentError(absl::StrCat(
        path, " does not compile", with, ":\n",
        FormatDiagnostics(result.diagnostics, result.source)));
  }
  absl::StatusOr<Plan> plan =
      BuildPlan(*result.spec, ran != nullptr ? OptionsOfRun(*ran) : PlanOptions{});
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat(path, with, ": planning failed: ",
                                     plan.status().message()));
  }
  return plan;
}

}  // namespace

absl::StatusOr<Plan> LoadPlanForViz(const std::string& path, const PlanIdentity* ran) {
  if (FileExtension(path) == "train") return CompileTrainFile(path, ran);
  ASSIGN_OR_RETURN(Plan plan, ReadPlanFile(path));
  if (ran == nullptr) return plan;
  for (const auto& [field, value] : ran->overrides) {
    // As train applies it to a plan file; other overrides were compiled in
    // (or the plan hash says otherwise).
    if (field == "steps" && absl::SimpleAtoi(value, &plan.steps)) plan.epochs = 0;
  }
  return plan;
}

absl::StatusOr<std::vector<std::string>> CheckPlanRan(const std::string& path,
                                                      const std::string& shown,
                                                      const Plan& plan,
                                                      const PlanIdentity& ran,
                                                      const std::string& recorded_in) {
  const std::string hash = HashHex(PlanHash(plan));
  const std::vector<std::string> differences =
      SettingDifferences(ran.settings, "the run", PlanSettings(plan), shown);
  if (hash == ran.hash) return std::vector<std::string>();
  std::string text_hash;
  if (FileExtension(path) == "train" && !ran.source_hash.empty()) {
    ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
    text_hash = TextHash(text);
    // The text the run compiled, with its overrides: the plan differs only
    // in what the run's backend chose (workspaces) or this trainc's
    // planner; the settings that differ, if any, are worth a warning.
    if (text_hash == ran.source_hash) return differences;
  }
  const bool edited = !text_hash.empty();
  std::string message = absl::StrCat(
      shown, " is not the plan that ran (recorded in ", recorded_in, ")",
      edited ? ": the file changed since the run" : "", "\n  plan hash: ", ran.hash,
      " in the run, ", hash, " in ", shown,
      ran.overrides.empty() ? "" : absl::StrCat(" with the run's ", OverridesText(ran.overrides)));
  if (edited) {
    absl::StrAppend(&message, "\n  text hash of ", shown, ": ", ran.source_hash,
                    " in the run, ", text_hash, " now");
  }
  for (const std::string& d : differences) absl::StrAppend(&message, "\n  ", d);
  if (differences.empty()) {
    absl::StrAppend(&message, "\n  (none of the settings listed differs: the model, the data "
                              "or the optimizer's settings did)");
  }
  if (!ran.source.empty() && ran.source != shown) {
    absl::StrAppend(&message, "\n  the run trained ", ran.source);
  }
  absl::StrAppend(&message,
                  "\n  (draw the file as it is now without --trace and --metrics)");
  return absl::FailedPreconditionError(message);
}

}  // namespace trainc::viz
