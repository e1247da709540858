// The viz command line: argument parsing and the whole run, as a library so
// that tests can drive it without a subprocess. viz_main.cc only maps the
// returned status to an exit code.
#ifndef TRAINC_TOOLS_VIZ_VIZ_CLI_H_
#define TRAINC_TOOLS_VIZ_VIZ_CLI_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainc::viz {

struct VizArgs {
  bool help = false;
  std::string input;   // .train or plan file, as typed; optional with metrics
  std::string trace;   // optional trace JSON, as typed
  std::vector<std::string> metrics;  // --metrics [LABEL=]FILE, as typed
  std::string output;  // optional; extension picks the format
  bool collapse = true;
  int min_repeats = 3;
  // --scaling: the predicted scaling (tools/simulate/scaling.h).
  bool scaling = false;
  std::string machine;                // --machine, as typed; empty: the default
  std::vector<int64_t> gpus;          // --gpus; empty: 1, 2, 4, ..., 1024
  std::vector<std::string> bucket_mb;  // --bucket-mb, one line each
};

// The --help text.
std::string VizUsage();

// Parses argv (argv[0] is skipped). Errors are InvalidArgument and mean a
// usage mistake.
absl::StatusOr<VizArgs> ParseVizArgs(int argc, const char* const* argv);

// Loads, draws and writes what `args` asks for; prints the summary (and the
// overlap table, given a trace) to `out`, warnings to `err`. Relative paths
// are resolved against $BUILD_WORKING_DIRECTORY (see ResolveUserPath).
absl::Status RunViz(const VizArgs& args, std::ostream& out, std::ostream& err);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_VIZ_CLI_H_
