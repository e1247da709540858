// A small strict JSON (RFC 8259) reader for the trace files tools/viz draws.
//
// Strict on purpose: a trace that is truncated or hand-edited should fail
// with the line and column of the problem rather than draw half a timeline.
// Rejected: trailing commas, comments, NaN/Infinity, leading zeros, control
// characters in strings, unpaired surrogates, duplicate object keys, and
// anything after the top-level value.
//
//   absl::StatusOr<JsonValue> v = ParseJson(text);
//   const JsonValue* events = v->Find("traceEvents");
#ifndef TRAINC_TOOLS_VIZ_JSON_H_
#define TRAINC_TOOLS_VIZ_JSON_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace trainc::viz {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  JsonValue() = default;
  static JsonValue Bool(bool b);
  static JsonValue Number(double d);
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

  // Accessors return a default value when the type differs.
  bool bool_value() const { return bool_; }
  double number_value() const { return number_; }
  const std::string& string_value() const { return string_; }
  const std::vector<JsonValue>& array_items() const { return array_; }
  // Members in file order.
  const std::vector<std::pair<std::string, JsonValue>>& object_items() const {
    return object_;
  }

  // The member named `key` of an object; nullptr when absent or not an object.
  const JsonValue* Find(const std::string& key) const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<std::pair<std::string, JsonValue>> object_;
};

// Parses one JSON document. Errors are InvalidArgument with a message that
// starts "LINE:COL: " (both 1-based; columns count bytes).
absl::StatusOr<JsonValue> ParseJson(const std::string& text);

// A type name for error messages: "null", "number", "object", ...
const char* JsonTypeName(JsonValue::Type type);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_JSON_H_
