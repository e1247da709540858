// Strict JSON (RFC 8259) reading on Debian's nlohmann-json3, into a small
// value type, and a string quoter.
//
// Used for safetensors headers (runtime/checkpoint), Chrome trace files
// (written by runtime/trace, read by tools/viz), metrics logs, and anything
// else that needs to read or write a little JSON.
//
// Strict on purpose: a file that is truncated or hand-edited should fail
// with the line and column of the problem rather than be half read.
// nlohmann's strict parser rejects trailing commas, comments, NaN/Infinity,
// single quotes, leading zeros, numbers out of a double's range, control
// characters in strings, bad escapes, unpaired surrogates and anything after
// the top-level value; this layer adds duplicate object keys (which of two
// tensors named alike would be meant?) and nesting deeper than 256 levels.
//
// Numbers keep their exact value when they are integers that fit int64,
// since safetensors offsets may exceed the 2^53 a double holds exactly.
//
//   absl::StatusOr<JsonValue> v = ParseJson(text);
//   if (!v.ok()) return v.status();  // "LINE:COL: what went wrong"
//   const JsonValue* events = v->Find("traceEvents");
//
//   std::string out = absl::StrCat("{", JsonQuote(key), ": 1}");
#ifndef TRAINC_RUNTIME_JSON_JSON_H_
#define TRAINC_RUNTIME_JSON_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainc {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;  // null
  static JsonValue Bool(bool b);
  static JsonValue Number(double d);
  // A number whose exact integer value is known (see is_integer()).
  static JsonValue Integer(int64_t i);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<std::pair<std::string, JsonValue>> m);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // A number written without a fraction or exponent whose value fits int64;
  // integer_value() then holds it exactly (number_value() may round).
  bool is_integer() const { return is_integer_; }

  // Accessors return a default value (false, 0, empty) when the type differs.
  bool bool_value() const { return bool_; }
  double number_value() const { return number_; }
  int64_t integer_value() const { return integer_; }
  const std::string& string_value() const { return string_; }
  const std::vector<JsonValue>& array_items() const { return array_; }
  // Members in file order (keys are unique: the parser rejects duplicates).
  const std::vector<std::pair<std::string, JsonValue>>& object_items() const {
    return object_;
  }

  // The member named `key` of an object; nullptr when absent or not an object.
  const JsonValue* Find(absl::string_view key) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  bool is_integer_ = false;
  int64_t integer_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<std::pair<std::string, JsonValue>> object_;
};

// Parses exactly one JSON document (surrounding whitespace allowed). Errors
// are InvalidArgument with a message that starts "LINE:COL: " (both 1-based;
// columns count bytes; a syntax error is placed at the end of the offending
// token, as nlohmann reports it), e.g. "2:14: syntax error while parsing
// object key - unexpected '}'; expected string literal". Callers that
// read a file prefix the file name: "trace.json:2:14: ...".
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// A type name for error messages: "null", "boolean", "number", "string",
// "array", "object".
const char* JsonTypeName(JsonValue::Type type);

// `s` as a JSON string literal, quotes included: '"', '\\' and control
// characters are escaped (\n \r \t by name, the rest as \u00XX); other bytes,
// UTF-8 included, are copied. ParseJson(JsonQuote(s))->string_value() == s.
std::string JsonQuote(absl::string_view s);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_JSON_JSON_H_
