// The machine profiles of tools/simulate/profiles/, compiled in (see
// embed_profiles.sh), so `--machine h100_nvlink_ib` works from any folder.
#ifndef TRAINC_TOOLS_SIMULATE_BUNDLED_PROFILES_H_
#define TRAINC_TOOLS_SIMULATE_BUNDLED_PROFILES_H_

#include <string>
#include <vector>

namespace trainc::simulate {

struct BundledProfile {
  std::string name;  // the file name without .profile
  std::string path;  // in the source tree, for messages
  std::string text;
};

// In file-name order.
const std::vector<BundledProfile>& BundledProfiles();

}  // namespace trainc::simulate

#endif  // TRAINC_TOOLS_SIMULATE_BUNDLED_PROFILES_H_
