#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/cost/bundled_profiles.h"

namespace trainc::cost {

std::vector<std::string> BundledProfileNames() {
  std::vector<std::string> names;
  for (const BundledProfile& b : BundledProfiles()) names.push_back(b.name);
  return names;
}

absl::StatusOr<MachineProfile> LoadMachineProfile(const std::string& name_or_path) {
  for (const BundledProfile& b : BundledProfiles()) {
    if (name_or_path == b.name) return ParseMachineProfile(b.text, b.path);
  }
  if (absl::StrContains(name_or_path, '/') || absl::EndsWith(name_or_path, ".profile")) {
    return ReadMachineProfile(name_or_path);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "no such bundled machine profile '", name_or_path, "' (",
      absl::StrJoin(BundledProfileNames(), ", "),
      ") and not a file path (a path has a '/' or ends in .profile)"));
}

}  // namespace trainc::cost
