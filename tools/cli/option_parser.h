// One command-line parser for every tool (train, sample, viz, simulate):
// `--name value` and `--name=value` alike, `--` ends the options, `-h` and
// `--help` ask for the usage, and an unknown option is named with a
// did-you-mean from the same table.
//
//   OptionParser parser;
//   parser.Value({"--tokens"}, [&](const std::string& v) { return ParseInt(v, &n); })
//       .Switch({"--no-eval"}, [&] { eval = false; });
//   std::vector<std::string> files;
//   ASSIGN_OR_RETURN(bool help, parser.Parse(argc, argv, &files));
#ifndef TRAINC_TOOLS_CLI_OPTION_PARSER_H_
#define TRAINC_TOOLS_CLI_OPTION_PARSER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/frontend/overrides.h"

namespace trainc {

class OptionParser {
 public:
  using SetValue = std::function<absl::Status(const std::string& value)>;
  using SetOther = std::function<absl::Status(const std::string& name, const std::string& value)>;

  // An option that takes a value; `names` are its spellings ("-o",
  // "--output"). Errors from `set` are reported prefixed with the name.
  OptionParser& Value(std::vector<std::string> names, SetValue set);
  // An option without a value ("--no-eval=1" is an error).
  OptionParser& Switch(std::vector<std::string> names, std::function<void()> set);
  // `--NAME VALUE` options not in the table (a train { } field, a model
  // constant: the front end checks them). Without it they are errors.
  // `candidates` ("--gpus", ...) join the table's names in did-you-means:
  // an unknown option with no value after it is reported as unknown.
  OptionParser& Otherwise(SetOther set, std::vector<std::string> candidates = {});
  // Otherwise() for the tools that compile a .train file: `--NAME VALUE`
  // goes to `overrides` (train { } fields and model constants, which the
  // front end checks), and the overridable fields join did-you-means.
  OptionParser& TrainOverrides(Overrides* overrides);

  // Parses argv[1..]. Returns true when -h or --help was given (nothing
  // after it is parsed); arguments that are not options go to
  // `positional`, in order.
  absl::StatusOr<bool> Parse(int argc, const char* const* argv,
                             std::vector<std::string>* positional) const;

 private:
  struct Option {
    std::vector<std::string> names;
    SetValue set_value;            // one of the two
    std::function<void()> set_switch;
  };
  const Option* Find(const std::string& name) const;
  absl::Status Unknown(const std::string& name) const;

  std::vector<Option> options_;
  SetOther otherwise_;
  std::vector<std::string> candidates_;
};

}  // namespace trainc

#endif  // TRAINC_TOOLS_CLI_OPTION_PARSER_H_
