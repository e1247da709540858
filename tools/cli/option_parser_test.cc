#include "tools/cli/option_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Parsed {
  std::string output;
  bool eval = true;
  std::vector<std::pair<std::string, std::string>> others;
  std::vector<std::string> positional;
};

absl::StatusOr<Parsed> Parse(std::vector<const char*> args, bool others = false) {
  Parsed p;
  OptionParser parser;
  parser.Value({"-o", "--output"}, [&](const std::string& v) {
          if (v.empty()) return absl::InvalidArgumentError("needs a path");
          p.output = v;
          return absl::OkStatus();
        })
      .Switch({"--no-eval"}, [&] { p.eval = false; });
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

}  // namespace
}  // namespace trainc
