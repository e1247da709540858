#include "tools/cli/option_parser.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

struct Parsed {
  std::string output;
  bool eval = true;
  bool torch = true;
  std::vector<std::pair<std::string, std::string>> others;
  std::vector<std::string> positional;
};

absl::StatusOr<Parsed> Parse(std::vector<const char*> args, bool others = false) {
  Parsed p;
  OptionParser parser;
  parser.Value({"-o", "--output"}, "PATH", "where", [&](const std::string& v) {
          if (v.empty()) return absl::InvalidArgumentError("needs a path");
          p.output = v;
          return absl::OkStatus();
        })
      .Switch({"--no-eval"}, "skip evaluation", [&] { p.eval = false; })
      .Bool({"--torch"}, "", [&](bool on) { p.torch = on; });
  if (others) {
    parser.Otherwise(
        [&](const std::string& name, const std::string& value) {
          p.others.emplace_back(name, value);
          return absl::OkStatus();
        },
        {"--gpus", "--steps"});
  }
  args.insert(args.begin(), "tool");
  absl::StatusOr<bool> help = parser.Parse(static_cast<int>(args.size()), args.data(),
                                           &p.positional);
  if (!help.ok()) return help.status();
  if (*help) p.positional = {"<help>"};
  return p;
}

TEST(OptionParserTest, BothSpellingsOfAValueAndSwitches) {
  for (auto args : {std::vector<const char*>{"a.train", "-o", "x.svg", "--no-eval"},
                    std::vector<const char*>{"--output=x.svg", "a.train", "--no-eval"}}) {
    absl::StatusOr<Parsed> p = Parse(args);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->output, "x.svg");
    EXPECT_FALSE(p->eval);
    EXPECT_THAT(p->positional, ElementsAre("a.train"));
  }
  absl::StatusOr<Parsed> dashes = Parse({"--", "--no-eval"});
  ASSERT_TRUE(dashes.ok());
  EXPECT_TRUE(dashes->eval);
  EXPECT_THAT(dashes->positional, ElementsAre("--no-eval"));
  EXPECT_THAT(Parse({"x", "--help", "--bogus"})->positional, ElementsAre("<help>"));
}

TEST(OptionParserTest, MistakesAreNamed) {
  EXPECT_EQ(Parse({"--no-evl"}).status().message(),
            "unknown option --no-evl: did you mean --no-eval? (see --help)");
  EXPECT_EQ(Parse({"--zzzzzz", "1"}).status().message(), "unknown option --zzzzzz (see --help)");
  EXPECT_EQ(Parse({"-o"}).status().message(), "-o: needs a value");
  EXPECT_EQ(Parse({"--no-eval=1"}).status().message(), "--no-eval takes no value");
  EXPECT_EQ(Parse({"--output="}).status().message(), "--output: needs a path");
}

TEST(OptionParserTest, OtherOptionsTakeAValueElseTheyAreUnknown) {
  absl::StatusOr<Parsed> p = Parse({"--gpus", "4", "--width=8"}, true);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->others, ElementsAre(std::pair<std::string, std::string>("gpus", "4"),
                                     std::pair<std::string, std::string>("width", "8")));
  // Last, without a value: a known field needs one, anything else is a typo.
  EXPECT_EQ(Parse({"--steps"}, true).status().message(), "--steps: needs a value");
  EXPECT_THAT(std::string(Parse({"--stesp"}, true).status().message()),
              HasSubstr("unknown option --stesp: did you mean --steps?"));
  EXPECT_THAT(std::string(Parse({"-x", "1"}, true).status().message()),
              HasSubstr("unknown option -x"));
}

TEST(OptionParserTest, BoolsTakeOnlyAnAttachedValue) {
  EXPECT_FALSE(Parse({"--torch=false"})->torch);
  EXPECT_FALSE(Parse({"--torch=0"})->torch);
  absl::StatusOr<Parsed> bare = Parse({"--torch=false", "--torch", "x"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_TRUE(bare->torch);
  EXPECT_THAT(bare->positional, ElementsAre("x"));
  EXPECT_EQ(Parse({"--torch=maybe"}).status().message(),
            "--torch: expected true or false, got 'maybe'");
}

TEST(OptionParserTest, OptionsOnlyRefusesOtherArguments) {
  OptionParser parser;
  parser.Switch({"--loud"}, "shout", [] {});
  const char* ok[] = {"tool", "--loud"};
  absl::StatusOr<bool> parsed = parser.Parse(2, ok);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(*parsed);
  const char* help[] = {"tool", "-h", "stray"};
  parsed = parser.Parse(3, help);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(*parsed);
  const char* stray[] = {"tool", "--loud", "stray"};
  EXPECT_EQ(parser.Parse(3, stray).status().message(), "unexpected argument stray (see --help)");
}

// A parser with every kind of row, in two groups.
OptionParser HelpParser() {
  OptionParser parser;
  auto ignore = [](const std::string&) { return absl::OkStatus(); };
  parser.Usage({"tool [options] FILE", "tool --other"})
      .Description("Does things to FILE.\n")
      .Group("Input:")
      .HelpRow("FILE", "the input")
      .Value({"-o", "--output"}, "PATH", "write the result to PATH", ignore)
      .Switch({"--no-eval"}, "skip evaluation", [] {})
      .Value({"--bucket-mb", "--bucket_mb"}, "X", "bucket size", ignore)
      .Value({"--internal"}, "X", "", ignore)
      .Group("More:", "--FIELD VALUE  a field\n(any of them)")
      .Value({"--a-very-long-option-name"}, "SOME|VALUES|HERE", "help on the next line", ignore)
      .Value({"--long"}, "N",
             "a help text long enough to be wrapped onto a second line, and even onto a third "
             "one if it goes on for long enough, which it does\n  .dot  an indented line\n"
             "  .html  a self-contained report with the graph, the buckets and the memory plan",
             ignore)
      .Epilogue("Exit status: 0 ok.");
  return parser;
}

TEST(OptionParserTest, HelpIsTheTableUnderItsHeadings) {
  const std::string help = HelpParser().Help();
  EXPECT_EQ(help,
            "usage: tool [options] FILE\n"
            "       tool --other\n"
            "\n"
            "Does things to FILE.\n"
            "\n"
            "Input:\n"
            "  FILE               the input\n"
            "  -o, --output PATH  write the result to PATH\n"
            "  --no-eval          skip evaluation\n"
            "  --bucket-mb X      bucket size\n"
            "\n"
            "More:\n"
            "  --FIELD VALUE  a field\n"
            "  (any of them)\n"
            "  --a-very-long-option-name SOME|VALUES|HERE\n"
            "                     help on the next line\n"
            "  --long N           a help text long enough to be wrapped onto a second line,\n"
            "                     and even onto a third one if it goes on for long enough,\n"
            "                     which it does\n"
            "                       .dot  an indented line\n"
            "                       .html  a self-contained report with the graph, the\n"
            "                              buckets and the memory plan\n"
            "  -h, --help         this help\n"
            "\n"
            "Exit status: 0 ok.\n");
}

TEST(OptionParserTest, HelpRowsAreAlignedAndWrapped) {
  const std::string help = HelpParser().Help();
  size_t column = 0;
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
    // Rows of options, not the note's lines or the one too wide to align.
    if (!absl::StartsWith(line, "  -") || absl::StartsWith(line, "  --a-very") ||
        absl::StartsWith(line, "  --FIELD")) {
      continue;
    }
    // The help text starts at the same column on every option's line.
    const size_t gap = line.find("  ", 2);
    ASSERT_NE(gap, absl::string_view::npos) << line;
    const size_t at = line.find_first_not_of(' ', gap);
    if (column == 0) column = at;
    EXPECT_EQ(at, column) << line;
  }
  EXPECT_EQ(column, 21u);
  // Internal options and the '_' spellings of a '-' name are not listed;
  // they still parse.
  EXPECT_THAT(help, Not(HasSubstr("--internal")));
  EXPECT_THAT(help, Not(HasSubstr("--bucket_mb")));
  std::vector<std::string> positional;
  const char* argv[] = {"tool", "--internal", "1", "--bucket_mb=2"};
  EXPECT_TRUE(HelpParser().Parse(4, argv, &positional).ok());
}

TEST(OptionParserTest, WithoutGroupsTheRowsFollowTheDescription) {
  OptionParser parser;
  parser.Usage({"tool"}).Description("Says hello.").Switch({"--loud"}, "shout", [] {});
  EXPECT_EQ(parser.Help(),
            "usage: tool\n"
            "\n"
            "Says hello.\n"
            "\n"
            "  --loud      shout\n"
            "  -h, --help  this help\n");
}

}  // namespace
}  // namespace trainc
