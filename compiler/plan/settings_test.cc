#include "compiler/plan/settings.h"

#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace trainc {
namespace {

// The whole table of `Enum` is `want`, in order: each value named as users
// have always written it (plan files, flags, .train files), its name
// parsing back to it, and no name or value listed twice.
template <typename Enum>
void ExpectTable(const std::vector<std::pair<Enum, std::string>>& want) {
  ASSERT_EQ(std::size(EnumTable<Enum>::kEntries), want.size());
  std::set<std::string> names;
  std::set<Enum> values;
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [value, name] = want[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(EnumTable<Enum>::kEntries[i].value, value);
    EXPECT_EQ(EnumName(value), name);
    EXPECT_EQ(ParseEnum<Enum>(name), value);
    names.insert(EnumTable<Enum>::kEntries[i].name);
    values.insert(EnumTable<Enum>::kEntries[i].value);
  }
  EXPECT_EQ(names.size(), want.size());
  EXPECT_EQ(values.size(), want.size());
}

TEST(SettingsTest, Precision) {
  ExpectTable<Precision>({{Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}});
}

TEST(SettingsTest, GradComm) {
  ExpectTable<GradComm>({{GradComm::kFp32, "fp32"}, {GradComm::kBf16, "bf16"}});
}

TEST(SettingsTest, ZeroGather) {
  ExpectTable<ZeroGather>(
      {{ZeroGather::kStepEnd, "step_end"}, {ZeroGather::kNextForward, "next_forward"}});
}

TEST(SettingsTest, OptimizerKind) {
  ExpectTable<OptimizerKind>({{OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}});
}

TEST(SettingsTest, ScheduleKind) {
  ExpectTable<ScheduleKind>(
      {{ScheduleKind::kConstant, "constant"}, {ScheduleKind::kCosine, "cosine"}});
}

TEST(SettingsTest, DataFormat) {
  ExpectTable<DataFormat>({{DataFormat::kNone, ""},
                           {DataFormat::kIdx, "idx"},
                           {DataFormat::kText, "text"},
                           {DataFormat::kTokens, "tokens"}});
}

TEST(SettingsTest, ParamInit) {
  ExpectTable<ParamInit>({{ParamInit::kNone, ""},
                          {ParamInit::kZeros, "zeros"},
                          {ParamInit::kOnes, "ones"},
                          {ParamInit::kUniform, "uniform"},
                          {ParamInit::kNormal, "normal"}});
}

TEST(SettingsTest, ParsingIsExact) {
  EXPECT_FALSE(ParseEnum<Precision>("BF16").has_value());
  EXPECT_FALSE(ParseEnum<Precision>("bf16 ").has_value());
  EXPECT_FALSE(ParseEnum<Precision>("fp16").has_value());
  EXPECT_FALSE(ParseEnum<Precision>("").has_value());
  EXPECT_FALSE(ParseEnum<OptimizerKind>("adam").has_value());
}

// The choices offered in messages: table order, the unnamed kNone left out.
TEST(SettingsTest, NamesAreTheChoicesInOrder) {
  EXPECT_EQ(EnumNames<ZeroGather>(), (std::vector<std::string>{"step_end", "next_forward"}));
  EXPECT_EQ(EnumNames<DataFormat>(), (std::vector<std::string>{"idx", "text", "tokens"}));
  EXPECT_EQ(EnumNames<ParamInit>(),
            (std::vector<std::string>{"zeros", "ones", "uniform", "normal"}));
}

}  // namespace
}  // namespace trainc
