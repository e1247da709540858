// The simulate command line, as a library so that tests drive it without a
// subprocess; simulate_main.cc maps the status to an exit code.
//
//   bazel run //tools:simulate -- FILE.train [--gpus N] [--machine PROFILE]
//       [--calibrate TRACE.json [--write-profile FILE]] [--no-overlap]
//       [--bucket-mb X[,Y...]] [--FIELD VALUE ...]
#ifndef TRAINC_TOOLS_SIMULATE_SIMULATE_CLI_H_
#define TRAINC_TOOLS_SIMULATE_SIMULATE_CLI_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/overrides.h"

namespace trainc::simulate {

struct SimulateArgs {
  bool help = false;
  std::string input;                  // .train or plan file
  std::vector<int64_t> gpus;          // empty: 1, 2, 4, ..., 1024
  std::string machine = "h100_nvlink_ib";  // a bundled name or a file
  std::string calibrate;              // a train --trace file
  std::string write_profile;          // where to write the calibrated profile
  bool overlap = true;
  std::vector<std::string> bucket_mb;  // as typed; empty: the file's
  Overrides overrides;                 // --FIELD VALUE, as train takes them
};

// The --help text, written from the parser's table.
std::string SimulateUsage();

// Parses argv (argv[0] is skipped); errors are usage mistakes.
absl::StatusOr<SimulateArgs> ParseSimulateArgs(int argc, const char* const* argv);

// Compiles, calibrates if asked, simulates every world size and prints the
// table(s) to `out`; notes go to `err`.
absl::Status RunSimulate(const SimulateArgs& args, std::ostream& out, std::ostream& err);

}  // namespace trainc::simulate

#endif  // TRAINC_TOOLS_SIMULATE_SIMULATE_CLI_H_
