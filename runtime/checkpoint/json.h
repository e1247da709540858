// A small, strict JSON reader and string escaper for safetensors headers.
//
// Strict: RFC 8259 only (no comments, trailing commas, NaN, single quotes),
// duplicate object keys rejected, nesting limited. Numbers keep their exact
// integer value when they are integers, since tensor offsets exceed the
// 2^53 a double holds exactly.
#ifndef TRAINC_RUNTIME_CHECKPOINT_JSON_H_
#define TRAINC_RUNTIME_CHECKPOINT_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainc {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  bool is_integer = false;  // number is an integer that fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in file order

  // The member named `key` of an object, or nullptr.
  const JsonValue* Find(absl::string_view key) const;
};

// Parses exactly one value; trailing non-space characters are an error.
// Errors give the byte offset.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// `s` as a JSON string literal, quotes included.
std::string JsonQuote(absl::string_view s);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_CHECKPOINT_JSON_H_
