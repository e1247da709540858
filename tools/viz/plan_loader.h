// Getting a Plan to draw from whatever the user points tools/viz at.
#ifndef TRAINC_TOOLS_VIZ_PLAN_LOADER_H_
#define TRAINC_TOOLS_VIZ_PLAN_LOADER_H_

#include <string>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc::viz {

// Dispatches on the extension: a `.train` file is compiled in-process
// (front end, then planner); anything else is read as a plan text file
// (compiler/plan/plan_io.h), whose parser checks the format version.
// `path` is used as given (resolve it with ResolveUserPath first).
absl::StatusOr<Plan> LoadPlanForViz(const std::string& path);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_PLAN_LOADER_H_
