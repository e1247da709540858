#include "runtime/checkpoint/json.h"

#include <cerrno>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    ASSIGN_OR_RETURN(JsonValue value, ParseValue(0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected data after the value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON error at byte ", pos_, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(absl::string_view token) {
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end of input");
    JsonValue v;
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      v.type = JsonValue::Type::kString;
      ASSIGN_OR_RETURN(v.string, ParseString());
      return v;
    }
    if (Consume("null")) return v;
    if (Consume("true")) {
      v.type = JsonValue::Type::kBool;
      v.boolean = true;
      return v;
    }
    if (Consume("false")) {
      v.type = JsonValue::Type::kBool;
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    return Error(absl::StrFormat("unexpected character '%c'", c));
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    JsonValue v;
    v.type = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Consume("}")) return v;
    absl::flat_hash_set<std::string> keys;
    for (;;) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') {
        return Error("expected a string key");
      }
      ASSIGN_OR_RETURN(std::string key, ParseString());
      if (!keys.insert(key).second) {
        return Error(absl::StrCat("duplicate key \"", key, "\""));
      }
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      ASSIGN_OR_RETURN(JsonValue member, ParseValue(depth + 1));
      v.object.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (Consume("}")) return v;
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    JsonValue v;
    v.type = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume("]")) return v;
    for (;;) {
      ASSIGN_OR_RETURN(JsonValue element, ParseValue(depth + 1));
      v.array.push_back(std::move(element));
      SkipSpace();
      if (Consume("]")) return v;
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    const size_t begin = pos_;
    auto digits = [&] {
      size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        ++pos_;
      }
      return pos_ - start;
    };
    Consume("-");
    const size_t int_begin = pos_;
    const size_t int_digits = digits();
    if (int_digits == 0) return Error("expected a digit");
    if (int_digits > 1 && text_[int_begin] == '0') {
      return Error("leading zeros are not allowed");
    }
    bool integral = true;
    if (Consume(".")) {
      integral = false;
      if (digits() == 0) return Error("expected a digit after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (!Consume("+")) Consume("-");
      if (digits() == 0) return Error("expected a digit in the exponent");
    }
    const std::string literal(text_.substr(begin, pos_ - begin));
    JsonValue v;
    v.type = JsonValue::Type::kNumber;
    v.number = std::strtod(literal.c_str(), nullptr);
    v.is_integer = integral && absl::SimpleAtoi(literal, &v.integer);
    return v;
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      code <<= 4;
      if (h >= '0' && h <= '9') code |= h - '0';
      else if (h >= 'a' && h <= 'f') code |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') code |= h - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    return code;
  }

  static void AppendUtf8(uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3f)));
    }
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in a string");
      }
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char e = text_[pos_++];
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
          ASSIGN_OR_RETURN(uint32_t code, ParseHex4());
          if (code >= 0xd800 && code < 0xdc00) {  // a surrogate pair
            if (!Consume("\\u")) return Error("lone high surrogate");
            ASSIGN_OR_RETURN(uint32_t low, ParseHex4());
            if (low < 0xdc00 || low >= 0xe000) return Error("bad low surrogate");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xdc00 && code < 0xe000) {
            return Error("lone low surrogate");
          }
          AppendUtf8(code, &out);
          break;
        }
        default:
          return Error(absl::StrFormat("bad escape '\\%c'", e));
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [name, value] : object) {
    if (name == key) return &value;
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return Parser(text).ParseDocument();
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace trainc
