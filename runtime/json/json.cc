#include "runtime/json/json.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"
#include "compiler/util/utf8.h"

namespace trainc {

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}
JsonValue JsonValue::Number(double d) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.number_ = d;
  return v;
}
JsonValue JsonValue::Integer(int64_t i) {
  JsonValue v = Number(static_cast<double>(i));
  v.is_integer_ = true;
  v.integer_ = i;
  return v;
}
JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.type_ = Type::kString;
  v.string_ = std::move(s);
  return v;
}
JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.array_ = std::move(items);
  return v;
}
JsonValue JsonValue::Object(
    std::vector<std::pair<std::string, JsonValue>> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.object_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

const char* JsonTypeName(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return "boolean";
    case JsonValue::Type::kNumber: return "number";
    case JsonValue::Type::kString: return "string";
    case JsonValue::Type::kArray: return "array";
    case JsonValue::Type::kObject: return "object";
  }
  return "?";
}

namespace {

// Deep enough for any trace or header; shallow enough that a hostile
// "[[[[..." cannot overflow the stack of the recursive descent.
constexpr int kMaxDepth = 256;

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    SkipSpace();
    ASSIGN_OR_RETURN(JsonValue v, ParseValue(0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the JSON value");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }

  // "LINE:COL: what", both 1-based, columns in bytes.
  absl::Status ErrorAt(size_t at, absl::string_view what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(line, ":", col, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' ||
                                s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // Consumes `token` if the text continues with it.
  bool Consume(absl::string_view token) {
    if (s_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxDepth) {
      return Error(absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
    }
    if (pos_ >= s_.size()) return Error("unexpected end of input, expected a value");
    const char c = s_[pos_];
    switch (c) {
      case '{': return ParseObject(depth);
      case '[': return ParseArray(depth);
      case '"': {
        ASSIGN_OR_RETURN(std::string str, ParseString());
        return JsonValue::String(std::move(str));
      }
      case 't':
        if (Consume("true")) return JsonValue::Bool(true);
        break;
      case 'f':
        if (Consume("false")) return JsonValue::Bool(false);
        break;
      case 'n':
        if (Consume("null")) return JsonValue();
        break;
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c),
                              "', expected a value"));
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    ++pos_;  // '{'
    std::vector<std::pair<std::string, JsonValue>> members;
    absl::flat_hash_set<std::string> seen;
    SkipSpace();
    if (Consume("}")) return JsonValue::Object(std::move(members));
    for (;;) {
      SkipSpace();
      if (pos_ >= s_.size()) {
        return Error("unexpected end of input, expected a string key");
      }
      if (s_[pos_] != '"') return Error("expected a string key");
      const size_t key_at = pos_;
      ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!seen.insert(key).second) {
        return ErrorAt(key_at, absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      SkipSpace();
      ASSIGN_OR_RETURN(JsonValue v, ParseValue(depth + 1));
      members.emplace_back(std::move(key), std::move(v));
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("}")) return JsonValue::Object(std::move(members));
      return Error("expected ',' or '}'");
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    ++pos_;  // '['
    std::vector<JsonValue> items;
    SkipSpace();
    if (Consume("]")) return JsonValue::Array(std::move(items));
    for (;;) {
      SkipSpace();
      ASSIGN_OR_RETURN(JsonValue v, ParseValue(depth + 1));
      items.push_back(std::move(v));
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume("]")) return JsonValue::Array(std::move(items));
      return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_ + i];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= h - '0';
      else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
      else return ErrorAt(pos_ + i, "bad hex digit in \\u escape");
    }
    pos_ += 4;
    return v;
  }

  absl::StatusOr<std::string> ParseString() {
    const size_t start = pos_;
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) return ErrorAt(start, "unterminated string");
      const unsigned char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) return Error("control character in string");
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) return ErrorAt(start, "unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          const size_t at = pos_ - 2;
          ASSIGN_OR_RETURN(uint32_t cp, ParseHex4());
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return ErrorAt(at, "unpaired low surrogate");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!Consume("\\u")) return ErrorAt(at, "unpaired high surrogate");
            ASSIGN_OR_RETURN(uint32_t lo, ParseHex4());
            if (lo < 0xDC00 || lo > 0xDFFF) {
              return ErrorAt(at, "unpaired high surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          return ErrorAt(pos_ - 2, absl::StrCat("bad escape '\\",
                                                std::string(1, e), "'"));
      }
    }
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    const size_t start = pos_;
    auto digit = [&](size_t i) {
      return i < s_.size() && s_[i] >= '0' && s_[i] <= '9';
    };
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    if (!digit(pos_)) return Error("expected a digit");
    if (s_[pos_] == '0') {
      ++pos_;
      if (digit(pos_)) return Error("leading zero in number");
    } else {
      while (digit(pos_)) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (!digit(pos_)) return Error("expected a digit after '.'");
      while (digit(pos_)) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digit(pos_)) return Error("expected a digit in the exponent");
      while (digit(pos_)) ++pos_;
    }
    const std::string token(s_.substr(start, pos_ - start));
    int64_t integer = 0;
    if (integral && absl::SimpleAtoi(token, &integer)) {
      return JsonValue::Integer(integer);
    }
    errno = 0;
    const double d = std::strtod(token.c_str(), nullptr);
    if (errno == ERANGE && (d > 1.0 || d < -1.0)) {
      return ErrorAt(start, "number out of range");
    }
    return JsonValue::Number(d);
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return Parser(text).ParseDocument();
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace trainc
