#include "tools/cli/option_parser.h"

#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/did_you_mean.h"
#include "tools/cli/options.h"

namespace trainc {

OptionParser& OptionParser::Value(std::vector<std::string> names, SetValue set) {
  options_.push_back({std::move(names), std::move(set), nullptr});
  return *this;
}

OptionParser& OptionParser::Switch(std::vector<std::string> names, std::function<void()> set) {
  options_.push_back({std::move(names), nullptr, std::move(set)});
  return *this;
}

OptionParser& OptionParser::Otherwise(SetOther set, std::vector<std::string> candidates) {
  otherwise_ = std::move(set);
  candidates_ = std::move(candidates);
  return *this;
}

OptionParser& OptionParser::TrainOverrides(Overrides* overrides) {
  std::vector<std::string> fields;
  for (const std::string& field : OverridableFields()) fields.push_back("--" + field);
  return Otherwise(
      [overrides](const std::string& name, const std::string& value) {
        overrides->emplace_back(name, value);
        return absl::OkStatus();
      },
      std::move(fields));
}

const OptionParser::Option* OptionParser::Find(const std::string& name) const {
  for (const Option& option : options_) {
    for (const std::string& n : option.names) {
      if (n == name) return &option;
    }
  }
  return nullptr;
}

absl::Status OptionParser::Unknown(const std::string& name) const {
  std::vector<std::string> names = candidates_;
  names.push_back("--help");
  for (const Option& option : options_) names.insert(names.end(), option.names.begin(), option.names.end());
  const std::string match = frontend::ClosestMatch(name, names);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown option ", name, match.empty() ? "" : absl::StrCat(": did you mean ", match, "?"),
      " (see --help)"));
}

absl::StatusOr<bool> OptionParser::Parse(int argc, const char* const* argv,
                                         std::vector<std::string>* positional) const {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return true;
    if (arg == "--") {
      for (++i; i < argc; ++i) positional->push_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional->push_back(arg);
      continue;
    }
    const CliOption option = SplitOption(arg);
    const Option* known = Find(option.name);
    if (known != nullptr && known->set_switch) {
      if (option.value) {
        return absl::InvalidArgumentError(absl::StrCat(option.name, " takes no value"));
      }
      known->set_switch();
      continue;
    }
    if (known == nullptr && (!otherwise_ || !absl::StartsWith(option.name, "--"))) {
      return Unknown(option.name);
    }
    absl::StatusOr<std::string> value = OptionValue(option, argc, argv, &i);
    if (!value.ok()) {
      // Not in the table and nothing after it: a mistyped option, not a
      // field without its value.
      if (known == nullptr &&
          !absl::c_linear_search(candidates_, option.name)) {
        return Unknown(option.name);
      }
      return value.status();
    }
    const absl::Status set =
        known != nullptr ? known->set_value(*value) : otherwise_(option.name.substr(2), *value);
    if (!set.ok()) {
      // The setter's words, under the option's name unless it gave one.
      if (absl::StartsWith(set.message(), option.name)) return set;
      return absl::Status(set.code(), absl::StrCat(option.name, ": ", set.message()));
    }
  }
  return false;
}

}  // namespace trainc
