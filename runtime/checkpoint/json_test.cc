#include "runtime/checkpoint/json.h"

#include "gtest/gtest.h"

namespace trainc {
namespace {

TEST(JsonTest, ParsesNestedValues) {
  auto v = ParseJson(
      R"( {"a": [1, -2, 3.5e1, 9007199254740993], "b": {"c": "x\"\u00e9\ud83d\ude00"},
           "t": true, "f": false, "n": null} )");
  ASSERT_TRUE(v.ok()) << v.status();
  const JsonValue* a = v->Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->array.size(), 4u);
  EXPECT_EQ(a->array[1].integer, -2);
  EXPECT_FALSE(a->array[2].is_integer);
  EXPECT_EQ(a->array[2].number, 35.0);
  EXPECT_TRUE(a->array[3].is_integer);
  EXPECT_EQ(a->array[3].integer, 9007199254740993);  // beyond a double
  EXPECT_EQ(v->Find("b")->Find("c")->string, "x\"\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v->Find("t")->boolean);
  EXPECT_FALSE(v->Find("f")->boolean);
  EXPECT_EQ(v->Find("n")->type, JsonValue::Type::kNull);
}

TEST(JsonTest, IsStrict) {
  for (const char* bad :
       {"{", "{\"a\":1,}", "[1,]", "{\"a\":1,\"a\":2}", "01", "1.", "-",
        "'a'", "{a:1}", "[1] x", "\"\\x\"", "\"\t\"", "NaN", "\"\\ud800\"",
        "tru", ""}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
}

TEST(JsonTest, ErrorsGiveTheOffset) {
  auto v = ParseJson("{\"a\": 1 \"b\": 2}");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(), "JSON error at byte 8: expected ',' or '}'");
}

TEST(JsonTest, RejectsDeepNesting) {
  EXPECT_FALSE(ParseJson(std::string(1000, '[')).ok());
}

TEST(JsonTest, QuoteEscapes) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  auto round = ParseJson(JsonQuote("h1.weight\t\"x\""));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->string, "h1.weight\t\"x\"");
}

}  // namespace
}  // namespace trainc
