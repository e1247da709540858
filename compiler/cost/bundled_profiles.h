// The machine profiles of compiler/cost/profiles/, compiled in (see
// embed_profiles.sh), so `--machine h100_nvlink_ib` and `machine =
// "h100_nvlink_ib"` work from any folder.
#ifndef TRAINC_COMPILER_COST_BUNDLED_PROFILES_H_
#define TRAINC_COMPILER_COST_BUNDLED_PROFILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/cost/machine_profile.h"

namespace trainc::cost {

struct BundledProfile {
  std::string name;  // the file name without .profile
  std::string path;  // in the source tree, for messages
  std::string text;
};

// In file-name order.
const std::vector<BundledProfile>& BundledProfiles();

// The names of the bundled profiles, in file-name order.
std::vector<std::string> BundledProfileNames();

// A bundled profile by name, else a profile file when `name_or_path` looks
// like a path (has a '/' or ends in .profile). Errors list the bundled
// names.
absl::StatusOr<MachineProfile> LoadMachineProfile(const std::string& name_or_path);

}  // namespace trainc::cost

#endif  // TRAINC_COMPILER_COST_BUNDLED_PROFILES_H_
