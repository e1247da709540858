// One command-line parser for every tool and bench (tools/, tools/bench):
// `--name value` and `--name=value` alike, `--` ends the options, `-h` and
// `--help` ask for the usage, and an unknown option is named with a
// did-you-mean from the same table. Each option is declared with its help
// line, and Help() writes the --help text from the table.
//
//   OptionParser parser;
//   parser.Usage({"tool [options] FILE"}).Description("Does X to FILE.\n")
//       .Value({"--tokens"}, "N", "tokens to generate (default 200)",
//              [&](const std::string& v) { return ParseInt(v, &n); })
//       .Switch({"--no-eval"}, "skip evaluation", [&] { eval = false; });
//   std::vector<std::string> files;
//   ASSIGN_OR_RETURN(bool help, parser.Parse(argc, argv, &files));
//   if (help) std::cout << parser.Help();
//
// Help() is the usage lines ("usage: " before the first, the others aligned
// under it), the description, then each group: its heading, its note and
// its rows ("  -o, --output PATH   help"), the help texts in one column and
// word-wrapped at 80 characters, and last the epilogue. `-h, --help` is
// listed last, in the last group.
#ifndef TRAINC_TOOLS_CLI_OPTION_PARSER_H_
#define TRAINC_TOOLS_CLI_OPTION_PARSER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/overrides.h"
#include "compiler/plan/settings.h"

namespace trainc {

class OptionParser {
 public:
  using SetValue = std::function<absl::Status(const std::string& value)>;
  using SetOther = std::function<absl::Status(const std::string& name, const std::string& value)>;

  // The help text around the table: usage lines without "usage: " ("train
  // [options] FILE"), and paragraphs printed as given.
  OptionParser& Usage(std::vector<std::string> lines);
  OptionParser& Description(std::string text);
  OptionParser& Epilogue(std::string text);
  // Options declared after this are listed under `heading` ("Run:"; empty:
  // no heading line); `note` (lines, printed indented and as given) comes
  // before them.
  OptionParser& Group(std::string heading, std::string note = "");

  // An option that takes a value; `names` are its spellings ("-o",
  // "--output"), `value_name` what --help shows after them ("PATH"). Errors
  // from `set` are reported prefixed with the name. In `help`, a newline
  // starts a new line, and an indented line ("  .dot   Graphviz source")
  // wraps under its text; an empty `help` leaves the option out of --help
  // (internal options).
  // Spellings that differ from an earlier one only in '_' for '-' are not
  // listed ("--bucket_mb" beside "--bucket-mb").
  OptionParser& Value(std::vector<std::string> names, std::string value_name, std::string help,
                      SetValue set);
  // An option without a value ("--no-eval=1" is an error).
  OptionParser& Switch(std::vector<std::string> names, std::string help,
                       std::function<void()> set);
  // A boolean as absl flags take it: `--torch` is true, `--torch=false`
  // (or true, 1, 0, yes, no) sets it; never the next argument.
  OptionParser& Bool(std::vector<std::string> names, std::string help,
                     std::function<void(bool)> set);
  // A row of --help for what is not in the table: a positional argument
  // ("INPUT") or the options Otherwise() takes ("--FIELD VALUE").
  OptionParser& HelpRow(std::string left, std::string help);

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
  // Parse() for a command line of options only: an argument that is not
  // one is an error.
  absl::StatusOr<bool> Parse(int argc, const char* const* argv) const;

  // The --help text (see the top of this file).
  std::string Help() const;

 private:
  struct Option {
    std::vector<std::string> names;
    SetValue set_value;            // one of the three
    std::function<void()> set_switch;
    std::function<void(bool)> set_bool;
  };
  struct Row {
    int group;
    std::string left;  // "-o, --output PATH"
    std::string help;
  };
  struct GroupText {
    std::string heading;
    std::string note;
  };
  // `after_names`: what --help shows after the names (" PATH").
  OptionParser& Add(Option option, std::string after_names, std::string help);
  const Option* Find(const std::string& name) const;
  absl::Status Unknown(const std::string& name) const;

  std::vector<Option> options_;
  SetOther otherwise_;
  std::vector<std::string> candidates_;

  std::vector<std::string> usage_;
  std::string description_;
  std::string epilogue_;
  std::vector<GroupText> groups_ = {{}};  // the first: before any Group()
  std::vector<Row> rows_;
};

// An enumerated setting's setter (its EnumTable's names: --device, --blas);
// another value is refused with the names it may take.
template <typename Enum>
OptionParser::SetValue EnumInto(Enum* out) {
  return [out](const std::string& v) -> absl::Status {
    const std::optional<Enum> value = ParseEnum<Enum>(v);
    if (!value) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v, "' is not one of ", absl::StrJoin(EnumNames<Enum>(), ", ")));
    }
    *out = *value;
    return absl::OkStatus();
  };
}

}  // namespace trainc

#endif  // TRAINC_TOOLS_CLI_OPTION_PARSER_H_
