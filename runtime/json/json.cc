#include "runtime/json/json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"
#include "nlohmann/json.hpp"

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
// "[[[[..." cannot exhaust memory or the stack of a recursive destructor.
constexpr int kMaxDepth = 256;

// "LINE:COL" (1-based, columns in bytes) of byte `offset` of `text`.
std::string Where(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::StrCat(line, ":", offset - line_start + 1);
}

// Builds a JsonValue from nlohmann's SAX events, adding what nlohmann
// accepts and we refuse: duplicate object keys (which of two tensors named
// alike would be meant?), nesting past kMaxDepth and numbers beyond a
// double's range.
class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit Builder(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Result() {
    if (!error_.ok()) return error_;
    if (done_.size() != 1) return absl::InvalidArgumentError("1:1: empty document");
    return std::move(done_.front());
  }

  bool null() override { return Add(JsonValue()); }
  bool boolean(bool b) override { return Add(JsonValue::Bool(b)); }
  bool number_integer(number_integer_t i) override {
    return Add(JsonValue::Integer(static_cast<int64_t>(i)));
  }
  bool number_unsigned(number_unsigned_t u) override {
    if (u <= static_cast<number_unsigned_t>(INT64_MAX)) {
      return Add(JsonValue::Integer(static_cast<int64_t>(u)));
    }
    return Add(JsonValue::Number(static_cast<double>(u)));
  }
  bool number_float(number_float_t d, const string_t& literal) override {
    if (!std::isfinite(d)) {
      return Fail(absl::StrCat("number ", literal, " is out of range"), text_.find(literal));
    }
    return Add(JsonValue::Number(d));
  }
  bool string(string_t& v) override { return Add(JsonValue::String(std::move(v))); }
  bool binary(binary_t&) override { return Fail("binary values are not JSON", 0); }
  bool start_object(std::size_t) override { return Open(true); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    const int seen = keys_seen_[k]++;
    if (!f.keys.insert(k).second) {
      return Fail(absl::StrCat("duplicate key \"", k, "\""), NthOccurrence(JsonQuote(k), seen));
    }
    f.pending_key = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at
    // line 1, column 3: syntax error ..." : keep the part after the place.
    std::string what = e.what();
    if (what.rfind("[json.exception", 0) == 0 && what.find("] ") != std::string::npos) {
      what = what.substr(what.find("] ") + 2);
    }
    if (const size_t at = what.find("parse error at line "); at == 0) {
      const size_t colon = what.find(": ");
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    (void)last_token;
    // position counts the bytes read, the offending one included.
    error_ = absl::InvalidArgumentError(
        absl::StrCat(Where(text_, position > 0 ? position - 1 : 0), ": ", what));
    return false;
  }

 private:
  struct Frame {
    bool object;
    std::vector<JsonValue> items;
    std::vector<std::pair<std::string, JsonValue>> members;
    absl::flat_hash_set<std::string> keys;
    std::string pending_key;
  };

  // SAX events carry no position: the callers find theirs in the text.
  bool Fail(std::string why, size_t offset) {
    error_ = absl::InvalidArgumentError(absl::StrCat(Where(text_, offset), ": ", why));
    return false;
  }

  // Offset of the n-th (0-based) occurrence of `needle`, or 0.
  size_t NthOccurrence(const std::string& needle, int n) const {
    size_t at = text_.find(needle);
    for (int i = 0; i < n && at != absl::string_view::npos; ++i) {
      at = text_.find(needle, at + 1);
    }
    return at == absl::string_view::npos ? 0 : at;
  }

  // Offset of the `n`-th (1-based) '[' or '{' outside strings.
  size_t NthOpening(int n) const {
    bool in_string = false;
    for (size_t i = 0; i < text_.size(); ++i) {
      const char c = text_[i];
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if ((c == '[' || c == '{') && --n == 0) {
        return i;
      }
    }
    return 0;
  }

  bool Open(bool object) {
    ++opened_;
    if (static_cast<int>(stack_.size()) >= kMaxDepth) {
      return Fail(absl::StrCat("nesting deeper than ", kMaxDepth, " levels"),
                  NthOpening(opened_));
    }
    stack_.push_back(Frame{object, {}, {}, {}, {}});
    return true;
  }
  bool Close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    return Add(f.object ? JsonValue::Object(std::move(f.members))
                        : JsonValue::Array(std::move(f.items)));
  }
  bool Add(JsonValue v) {
    if (stack_.empty()) {
      done_.push_back(std::move(v));
    } else if (stack_.back().object) {
      stack_.back().members.emplace_back(std::move(stack_.back().pending_key), std::move(v));
    } else {
      stack_.back().items.push_back(std::move(v));
    }
    return true;
  }

  absl::string_view text_;
  absl::flat_hash_map<std::string, int> keys_seen_;  // for error positions
  int opened_ = 0;                                   // objects and arrays
  std::vector<Frame> stack_;
  std::vector<JsonValue> done_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  Builder builder(text);
  // Strict: one document, nothing after it; comments are errors.
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder,
                            nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/false);
  return builder.Result();
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
