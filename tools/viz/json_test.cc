#include "tools/viz/json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(JsonTest, ParsesNestedDocument) {
  auto v = ParseJson(R"({"a": [1, -2.5e2, true, false, null],
                         "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00",
                         "o": {}})");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  const JsonValue* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array_items().size(), 5u);
  EXPECT_EQ(a->array_items()[0].number_value(), 1);
  EXPECT_EQ(a->array_items()[1].number_value(), -250);
  EXPECT_TRUE(a->array_items()[2].bool_value());
  EXPECT_TRUE(a->array_items()[4].is_null());
  EXPECT_EQ(v->Find("s")->string_value(),
            "q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_TRUE(v->Find("o")->is_object());
  EXPECT_EQ(v->Find("missing"), nullptr);
}

TEST(JsonTest, ParsesScalarsAtTopLevel) {
  EXPECT_EQ(ParseJson(" 0 ")->number_value(), 0);
  EXPECT_EQ(ParseJson("\"x\"")->string_value(), "x");
  EXPECT_EQ(ParseJson("[]")->array_items().size(), 0u);
}

struct BadCase {
  const char* text;
  const char* position;  // "line:col"
  const char* message;
};

class JsonErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(JsonErrorTest, ReportsLineAndColumn) {
  const BadCase& c = GetParam();
  auto v = ParseJson(c.text);
  ASSERT_FALSE(v.ok()) << c.text;
  EXPECT_THAT(std::string(v.status().message()),
              StartsWith(std::string(c.position) + ": "));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    Strict, JsonErrorTest,
    ::testing::Values(
        BadCase{"", "1:1", "unexpected end"},
        BadCase{"[1, 2,]", "1:7", "expected a value"},
        BadCase{"{\"a\": 1,}", "1:9", "expected a string key"},
        BadCase{"{\n  \"a\": 01\n}", "2:9", "leading zero"},
        BadCase{"[1]\n x", "2:2", "after the JSON value"},
        BadCase{"{\"a\": 1, \"a\": 2}", "1:10", "duplicate key"},
        BadCase{"\"abc", "1:1", "unterminated string"},
        BadCase{"\"a\tb\"", "1:3", "control character"},
        BadCase{"[NaN]", "1:2", "unexpected character"},
        BadCase{"\"\\ud800\"", "1:2", "unpaired high surrogate"},
        BadCase{"\"\\x\"", "1:2", "bad escape"},
        BadCase{"1.", "1:3", "after '.'"},
        BadCase{"1e", "1:3", "exponent"},
        BadCase{"{\"a\" 1}", "1:6", "expected ':'"},
        BadCase{"[1 2]", "1:4", "expected ',' or ']'"},
        BadCase{"tru", "1:1", "unexpected character"}));

TEST(JsonTest, RejectsNestingTooDeep) {
  std::string deep(1000, '[');
  auto v = ParseJson(deep);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("nesting"));
}

}  // namespace
}  // namespace trainc::viz
