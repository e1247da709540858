#include "tools/cli/options.h"

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(CliOptionsTest, SplitsAtTheFirstEquals) {
  const CliOption a = SplitOption("--gpus=4");
  EXPECT_EQ(a.name, "--gpus");
  EXPECT_EQ(a.value, "4");
  const CliOption b = SplitOption("--trace=a=b.json");
  EXPECT_EQ(b.name, "--trace");
  EXPECT_EQ(b.value, "a=b.json");
  const CliOption c = SplitOption("--no-eval");
  EXPECT_EQ(c.name, "--no-eval");
  EXPECT_FALSE(c.value.has_value());
  EXPECT_EQ(SplitOption("--save=").value, "");  // given, and empty
}

TEST(CliOptionsTest, ValueFromEqualsOrTheNextArgument) {
  const char* argv[] = {"tool", "--gpus", "4", "--steps=9", "--lr"};
  int i = 1;
  absl::StatusOr<std::string> v = OptionValue(SplitOption(argv[i]), 5, argv, &i);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "4");
  EXPECT_EQ(i, 2);  // moved past the value
  i = 3;
  v = OptionValue(SplitOption(argv[i]), 5, argv, &i);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "9");
  EXPECT_EQ(i, 3);  // nothing taken from the next argument
  i = 4;
  v = OptionValue(SplitOption(argv[i]), 5, argv, &i);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "--lr: needs a value");
}

}  // namespace
}  // namespace trainc
