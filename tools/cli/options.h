// Command-line options as the tools take them: `--name value` or
// `--name=value`.
//
//   for (int i = 1; i < argc; ++i) {
//     const CliOption option = SplitOption(argv[i]);
//     if (option.name == "--gpus") {
//       ASSIGN_OR_RETURN(std::string v, OptionValue(option, argc, argv, &i));
//     ...
#ifndef TRAINC_TOOLS_CLI_OPTIONS_H_
#define TRAINC_TOOLS_CLI_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace trainc {

struct CliOption {
  std::string name;                  // "--gpus" (before any '=')
  std::optional<std::string> value;  // after '=', when given so
};

// "--gpus=4" -> {"--gpus", "4"}; "--gpus" -> {"--gpus", none}.
CliOption SplitOption(const std::string& arg);

// The option's value: the part after '=', else the next argument (then
// *i moves past it). "--gpus: needs a value" at the end of argv.
absl::StatusOr<std::string> OptionValue(const CliOption& option, int argc,
                                        const char* const* argv, int* i);

}  // namespace trainc

#endif  // TRAINC_TOOLS_CLI_OPTIONS_H_
