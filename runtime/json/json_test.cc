#include "runtime/json/json.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
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
  EXPECT_TRUE(a->array_items()[3].is_bool());
  EXPECT_FALSE(a->array_items()[3].bool_value());
  EXPECT_TRUE(a->array_items()[4].is_null());
  EXPECT_EQ(v->Find("s")->string_value(),
            "q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_TRUE(v->Find("o")->is_object());
  EXPECT_EQ(v->Find("missing"), nullptr);
  EXPECT_EQ(a->Find("x"), nullptr);  // not an object
}

TEST(JsonTest, ParsesScalarsAtTopLevel) {
  EXPECT_EQ(ParseJson(" 0 ")->number_value(), 0);
  EXPECT_EQ(ParseJson("\"x\"")->string_value(), "x");
  EXPECT_EQ(ParseJson("[]")->array_items().size(), 0u);
  EXPECT_TRUE(ParseJson("\n null \r\n")->is_null());
}

TEST(JsonTest, KeepsObjectMembersInFileOrder) {
  auto v = ParseJson(R"({"z": 1, "a": 2, "m": 3})");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->object_items().size(), 3u);
  EXPECT_EQ(v->object_items()[0].first, "z");
  EXPECT_EQ(v->object_items()[1].first, "a");
  EXPECT_EQ(v->object_items()[2].first, "m");
}

TEST(JsonTest, IntegersKeepTheirExactValue) {
  auto v = ParseJson("[1, -2, 3.5e1, 9007199254740993, 2.0, 1e2, "
                     "99999999999999999999]");
  ASSERT_TRUE(v.ok()) << v.status();
  const auto& a = v->array_items();
  ASSERT_EQ(a.size(), 7u);
  EXPECT_TRUE(a[0].is_integer());
  EXPECT_EQ(a[0].integer_value(), 1);
  EXPECT_TRUE(a[1].is_integer());
  EXPECT_EQ(a[1].integer_value(), -2);
  EXPECT_FALSE(a[2].is_integer());
  EXPECT_EQ(a[2].number_value(), 35.0);
  EXPECT_TRUE(a[3].is_integer());
  EXPECT_EQ(a[3].integer_value(), int64_t{9007199254740993});  // beyond a double
  EXPECT_FALSE(a[4].is_integer());  // a fraction, even if zero
  EXPECT_FALSE(a[5].is_integer());  // an exponent
  EXPECT_FALSE(a[6].is_integer());  // beyond int64: a double only
  EXPECT_EQ(a[6].number_value(), 1e20);
  EXPECT_TRUE(a[6].is_number());
}

TEST(JsonTest, IsStrict) {
  for (const char* bad :
       {"{", "{\"a\":1,}", "[1,]", "{\"a\":1,\"a\":2}", "01", "1.", "-",
        "'a'", "{a:1}", "[1] x", "\"\\x\"", "\"\t\"", "NaN", "Infinity",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\u12\"", "\"\\u12g4\"", "tru", "",
        "   ", "// c\n1", "1e999", "-1e999", "[1] [2]", "\"abc\\"}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
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
        BadCase{"", "1:1", "unexpected end of input"},
        BadCase{"[1, 2,]", "1:7", "unexpected ']'"},
        BadCase{"{\"a\": 1,}", "1:9", "expected string literal"},
        BadCase{"{\n  \"a\": 01\n}", "2:9", "unexpected number literal"},
        BadCase{"[1]\n x", "2:2", "expected end of input"},
        BadCase{"{\"a\": 1, \"a\": 2}", "1:10", "duplicate key \"a\""},
        BadCase{"\"abc", "1:5", "missing closing quote"},
        BadCase{"\"a\tb\"", "1:3", "control character"},
        BadCase{"[NaN]", "1:2", "invalid literal"},
        BadCase{"\"\\ud800\"", "1:8", "surrogate U+D800..U+DBFF must be followed"},
        BadCase{"\"\\udc00\"", "1:7", "surrogate U+DC00..U+DFFF must follow"},
        BadCase{"\"\\u00g0\"", "1:6", "must be followed by 4 hex digits"},
        BadCase{"\"\\x\"", "1:3", "forbidden character after backslash"},
        BadCase{"1.", "1:3", "invalid number"},
        BadCase{"1e", "1:3", "invalid number"},
        BadCase{"-", "1:2", "invalid number"},
        BadCase{"1e999", "1:5", "number overflow"},
        BadCase{"{\"a\" 1}", "1:6", "expected ':'"},
        BadCase{"[1 2]", "1:4", "expected ']'"},
        BadCase{"tru", "1:4", "invalid literal"}));

TEST(JsonTest, ErrorMessageIsExact) {
  auto v = ParseJson("{\"a\": 1 \"b\": 2}");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  // nlohmann's message, placed at the end of the offending token.
  EXPECT_EQ(v.status().message(),
            "1:11: syntax error while parsing object - unexpected string literal; "
            "expected '}'");
}

TEST(JsonTest, RejectsNestingTooDeep) {
  auto v = ParseJson(std::string(1000, '['));
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("nesting"));
  // 256 levels are fine.
  EXPECT_TRUE(ParseJson(std::string(256, '[') + std::string(256, ']')).ok());
}

TEST(JsonTest, TypeNames) {
  EXPECT_STREQ(JsonTypeName(JsonValue::Type::kBool), "boolean");
  EXPECT_STREQ(JsonTypeName(ParseJson("{}")->type()), "object");
}

TEST(JsonTest, QuoteEscapes) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\r\t\x01"),
            "\"a\\\"b\\\\c\\n\\r\\t\\u0001\"");
  EXPECT_EQ(JsonQuote(""), "\"\"");
  EXPECT_EQ(JsonQuote("\xC3\xA9/"), "\"\xC3\xA9/\"");  // UTF-8 and '/' as is
}

TEST(JsonTest, QuoteRoundTrips) {
  for (const std::string& s :
       {std::string("h1.weight\t\"x\""), std::string("a\\b\r\n"),
        std::string("\x01\x1f \xF0\x9F\x98\x80"), std::string("\0z", 2)}) {
    auto round = ParseJson(JsonQuote(s));
    ASSERT_TRUE(round.ok()) << round.status();
    EXPECT_EQ(round->string_value(), s);
  }
}

}  // namespace
}  // namespace trainc
