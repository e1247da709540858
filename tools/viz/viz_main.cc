// viz: draws a trainc plan (and optionally its trace). See --help.
#include <iostream>

#include "absl/status/status.h"
#include "tools/viz/viz_cli.h"

int main(int argc, char** argv) {
  absl::StatusOr<trainc::viz::VizArgs> args =
      trainc::viz::ParseVizArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "viz: " << args.status().message() << "\n";
    return 2;
  }
  if (args->help) {
    std::cout << trainc::viz::VizUsage();
    return 0;
  }
  absl::Status status = trainc::viz::RunViz(*args, std::cout, std::cerr);
  if (!status.ok()) {
    std::cerr << "viz: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
