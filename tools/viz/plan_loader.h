// Getting a Plan to draw from whatever the user points tools/viz at, and,
// given what a run recorded of its plan (runtime/trace/plan_identity.h, in
// its trace and metrics log), the plan that ran rather than the file's own.
#ifndef TRAINC_TOOLS_VIZ_PLAN_LOADER_H_
#define TRAINC_TOOLS_VIZ_PLAN_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/trace/plan_identity.h"

namespace trainc::viz {

// Dispatches on the extension: a `.train` file is compiled in-process
// (front end, then planner); anything else is read as a plan text file
// (compiler/plan/plan_io.h), whose parser checks the format version.
// With `ran`, the plan as the run made it: a .train compiled with the run's
// overrides, for its device's machine profile and overlap; a plan file with
// the run's --steps (the one override train takes for a plan file).
// `path` is used as given (resolve it with ResolveUserPath first).
absl::StatusOr<Plan> LoadPlanForViz(const std::string& path,
                                    const PlanIdentity* ran = nullptr);

// Whether `plan`, loaded by LoadPlanForViz(path, &ran), is the plan that
// ran: the same plan hash, or for a .train whose plan cannot be the same
// bits here (the run's device chose workspaces), the same text as the run
// compiled. Else FailedPrecondition naming `shown` (the file as typed),
// `recorded_in`, both hashes and the settings that differ. On success, the
// lines to warn about (the settings that differ from the run's anyway).
absl::StatusOr<std::vector<std::string>> CheckPlanRan(const std::string& path,
                                                      const std::string& shown,
                                                      const Plan& plan,
                                                      const PlanIdentity& ran,
                                                      const std::string& recorded_in);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_PLAN_LOADER_H_
