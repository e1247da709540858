#include "tools/viz/plan_loader.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "tools/viz/file_util.h"

namespace trainc::viz {
namespace {

absl::StatusOr<Plan> CompileTrainFile(const std::string& path) {
  FrontendResult result = CompileFile(path);
  if (!result.spec) {
    // The front end's diagnostics already name file:line:col with a caret.
    return absl::InvalidArgumentError(absl::StrCat(
        path, " does not compile:\n",
        FormatDiagnostics(result.diagnostics, result.source)));
  }
  absl::StatusOr<Plan> plan = BuildPlan(*result.spec);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat(path, ": planning failed: ",
                                     plan.status().message()));
  }
  return plan;
}

}  // namespace

absl::StatusOr<Plan> LoadPlanForViz(const std::string& path) {
  if (FileExtension(path) == "train") return CompileTrainFile(path);
  return ReadPlanFile(path);
}

}  // namespace trainc::viz
