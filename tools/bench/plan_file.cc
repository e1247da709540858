#include "tools/bench/plan_file.h"

#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"

namespace trainc::bench {

absl::StatusOr<Plan> PlanFile(const std::string& path, const Overrides& overrides,
                              const PlanOptions& options) {
  FrontendResult result = CompileFile(path, overrides);
  if (!result.spec) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": compilation failed (run from the workspace root, e.g. with "
                           "bazel run)\n",
                     FormatDiagnostics(result.diagnostics, result.source)));
  }
  return BuildPlan(*result.spec, options);
}

}  // namespace trainc::bench
