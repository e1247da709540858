// File helpers for tools/viz: whole-file reads and writes with errors that
// name the path, and paths resolved the way the user typed them.
#ifndef TRAINC_TOOLS_VIZ_FILE_UTIL_H_
#define TRAINC_TOOLS_VIZ_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainc::viz {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);
absl::Status WriteStringToFile(const std::string& path,
                               const std::string& contents);

// `bazel run` starts the binary inside the runfiles tree; a relative path
// the user typed means their shell's directory, which Bazel passes as
// BUILD_WORKING_DIRECTORY. Absolute paths and unset variable: unchanged.
std::string ResolveUserPath(const std::string& path);

// "dir/name.ext" -> "ext" (lower case, without the dot); "" when none.
std::string FileExtension(const std::string& path);
// "dir/name.ext" -> "dir/name".
std::string StripExtension(const std::string& path);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_FILE_UTIL_H_
