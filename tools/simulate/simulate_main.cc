// simulate: predicted step time of a plan on a machine profile. See --help.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/status/status.h"
#include "tools/simulate/simulate_cli.h"

int main(int argc, char** argv) {
  // `bazel run` starts us in the runfiles tree; paths on the command line
  // are the user's, relative to where they typed it.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(wd) != 0) perror("chdir BUILD_WORKING_DIRECTORY");
  }
  absl::StatusOr<trainc::simulate::SimulateArgs> args =
      trainc::simulate::ParseSimulateArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "simulate: " << args.status().message() << "\n";
    return 2;
  }
  if (args->help) {
    std::cout << trainc::simulate::SimulateUsage();
    return 0;
  }
  absl::Status status = trainc::simulate::RunSimulate(*args, std::cout, std::cerr);
  if (!status.ok()) {
    std::cerr << "simulate: error: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
