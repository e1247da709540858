#include "tools/cli/option_parser.h"

#include <algorithm>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/util/did_you_mean.h"
#include "tools/cli/options.h"

namespace trainc {

namespace {

// Help lines are at most this wide; a row's help starts at the column after
// the widest option that leaves it at most kMaxHelpColumn, and longer
// options have their help on the next line.
constexpr size_t kWidth = 80;
constexpr size_t kMaxHelpColumn = 30;

// `text` in lines of at most `width` characters: each of its lines (split
// at '\n') word-wrapped, its spacing kept. The wrapped rest of an indented
// line ("  .dot   Graphviz source") goes under its text after the first
// double space, else under its first word.
std::vector<std::string> Wrap(const std::string& text, size_t width) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == absl::string_view::npos) {
      out.emplace_back();
      continue;
    }
    size_t hang = indent;
    const size_t gap = indent > 0 ? line.find("  ", indent) : absl::string_view::npos;
    if (gap != absl::string_view::npos) {
      hang = std::min(line.find_first_not_of(' ', gap), line.size());
    }
    std::string current(line.substr(0, indent));
    size_t pos = indent;
    while (pos < line.size()) {
      const size_t start = line.find_first_not_of(' ', pos);
      if (start == absl::string_view::npos) break;
      const size_t end = std::min(line.find(' ', start), line.size());
      absl::string_view space = line.substr(pos, start - pos);
      const absl::string_view word = line.substr(start, end - start);
      if (pos > indent && current.size() + space.size() + word.size() > width) {
        out.push_back(current);
        current.assign(hang, ' ');
        space = "";
      }
      absl::StrAppend(&current, space, word);
      pos = end;
    }
    out.push_back(current);
  }
  return out;
}

// "--bucket_mb" beside "--bucket-mb": the same option to a reader.
std::string ListedNames(const std::vector<std::string>& names) {
  std::vector<std::string> listed;
  for (const std::string& name : names) {
    std::string dashes = name;
    std::replace(dashes.begin(), dashes.end(), '_', '-');
    const bool seen = absl::c_any_of(listed, [&](const std::string& l) {
      std::string d = l;
      std::replace(d.begin(), d.end(), '_', '-');
      return d == dashes;
    });
    if (!seen) listed.push_back(name);
  }
  return absl::StrJoin(listed, ", ");
}

// Appends `text` as a paragraph: as given, ending in a newline.
void AppendParagraph(std::string* out, const std::string& text) {
  if (text.empty()) return;
  absl::StrAppend(out, "\n", text, absl::EndsWith(text, "\n") ? "" : "\n");
}

}  // namespace

OptionParser& OptionParser::Usage(std::vector<std::string> lines) {
  usage_ = std::move(lines);
  return *this;
}

OptionParser& OptionParser::Description(std::string text) {
  description_ = std::move(text);
  return *this;
}

OptionParser& OptionParser::Epilogue(std::string text) {
  epilogue_ = std::move(text);
  return *this;
}

OptionParser& OptionParser::Group(std::string heading, std::string note) {
  groups_.push_back({std::move(heading), std::move(note)});
  return *this;
}

OptionParser& OptionParser::Add(Option option, std::string after_names, std::string help) {
  if (!help.empty()) {
    HelpRow(absl::StrCat(ListedNames(option.names), after_names), std::move(help));
  }
  options_.push_back(std::move(option));
  return *this;
}

OptionParser& OptionParser::Value(std::vector<std::string> names, std::string value_name,
                                  std::string help, SetValue set) {
  Option option;
  option.names = std::move(names);
  option.set_value = std::move(set);
  return Add(std::move(option), value_name.empty() ? "" : " " + value_name, std::move(help));
}

OptionParser& OptionParser::Switch(std::vector<std::string> names, std::string help,
                                   std::function<void()> set) {
  Option option;
  option.names = std::move(names);
  option.set_switch = std::move(set);
  return Add(std::move(option), "", std::move(help));
}

OptionParser& OptionParser::Bool(std::vector<std::string> names, std::string help,
                                 std::function<void(bool)> set) {
  Option option;
  option.names = std::move(names);
  option.set_bool = std::move(set);
  return Add(std::move(option), "[=true|false]", std::move(help));
}

OptionParser& OptionParser::HelpRow(std::string left, std::string help) {
  rows_.push_back({static_cast<int>(groups_.size()) - 1, std::move(left), std::move(help)});
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
  const std::string match = ClosestMatch(name, names);
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
    if (known != nullptr && known->set_bool) {
      bool on = true;
      if (option.value && !absl::SimpleAtob(*option.value, &on)) {
        return absl::InvalidArgumentError(
            absl::StrCat(option.name, ": expected true or false, got '", *option.value, "'"));
      }
      known->set_bool(on);
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

absl::StatusOr<bool> OptionParser::Parse(int argc, const char* const* argv) const {
  std::vector<std::string> positional;
  absl::StatusOr<bool> help = Parse(argc, argv, &positional);
  if (help.ok() && !*help && !positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument ", positional[0], " (see --help)"));
  }
  return help;
}

std::string OptionParser::Help() const {
  std::vector<Row> rows = rows_;
  rows.push_back({static_cast<int>(groups_.size()) - 1, "-h, --help", "this help"});
  size_t column = 0;
  for (const Row& row : rows) {
    const size_t needs = 2 + row.left.size() + 2;
    if (needs <= kMaxHelpColumn) column = std::max(column, needs);
  }
  if (column == 0) column = kMaxHelpColumn;
  const size_t width = std::max<size_t>(kWidth - column, 20);

  std::string out;
  for (size_t i = 0; i < usage_.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "usage: " : "       ", usage_[i], "\n");
  }
  AppendParagraph(&out, description_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupText& group = groups_[g];
    const bool has_rows = absl::c_any_of(rows, [&](const Row& r) { return r.group == static_cast<int>(g); });
    if (!has_rows && group.note.empty()) continue;
    if (!out.empty()) out += "\n";
    if (!group.heading.empty()) absl::StrAppend(&out, group.heading, "\n");
    if (!group.note.empty()) {
      for (absl::string_view line : absl::StrSplit(absl::StripSuffix(group.note, "\n"), '\n')) {
        absl::StrAppend(&out, line.empty() ? "" : "  ", line, "\n");
      }
    }
    for (const Row& row : rows) {
      if (row.group != static_cast<int>(g)) continue;
      std::string line = absl::StrCat("  ", row.left);
      const std::vector<std::string> help = Wrap(row.help, width);
      for (size_t k = 0; k < help.size(); ++k) {
        if (k > 0 || line.size() + 2 > column) {
          absl::StrAppend(&out, line, "\n");
          line.clear();
        }
        if (help[k].empty()) continue;
        line.resize(column, ' ');
        line += help[k];
      }
      if (!line.empty()) absl::StrAppend(&out, line, "\n");
    }
  }
  AppendParagraph(&out, epilogue_);
  return out;
}

}  // namespace trainc
