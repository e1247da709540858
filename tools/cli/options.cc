#include "tools/cli/options.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainc {

CliOption SplitOption(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos) return {arg, std::nullopt};
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

absl::StatusOr<std::string> OptionValue(const CliOption& option, int argc,
                                        const char* const* argv, int* i) {
  if (option.value) return *option.value;
  if (*i + 1 >= argc) {
    return absl::InvalidArgumentError(absl::StrCat(option.name, ": needs a value"));
  }
  return std::string(argv[++*i]);
}

}  // namespace trainc
