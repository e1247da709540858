// check FILE [--field=value | --field value ...]
//
// Compiles a .train file, prints its diagnostics to stderr and, when it
// compiles, its summary to stdout. Exit status 1 on errors.
#include <iostream>
#include <string>

#include "compiler/frontend/frontend.h"

constexpr char kUsage[] =
    "usage: check FILE.train [--field=value | --field value ...]\n"
    "Compiles a .train file: prints its diagnostics (stderr) and, when it\n"
    "compiles, the spec summary (stdout). Flags override train { } fields.\n"
    "Exit status: 0 ok, 1 errors in the file, 2 usage.\n";

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "--help" ||
                    std::string(argv[1]) == "-h")) {
    std::cout << kUsage;
    return 0;
  }
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  trainc::Overrides overrides;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      overrides.emplace_back(arg.substr(0, eq), arg.substr(eq + 1));
    } else if (i + 1 < argc) {
      overrides.emplace_back(arg, argv[++i]);
    } else {
      overrides.emplace_back(arg, "");
    }
  }
  const trainc::FrontendResult result = trainc::CompileFile(argv[1], overrides);
  std::cerr << trainc::FormatDiagnostics(result.diagnostics, result.source);
  if (!result.spec) return 1;
  std::cout << trainc::DescribeSpec(*result.spec);
  return 0;
}
