#include "compiler/frontend/source_text.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace trainc::frontend {
namespace {

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Length of the well-formed UTF-8 sequence at text[i] (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or 0 when ill-formed.
int SequenceLength(std::string_view text, size_t i, char32_t* code_point) {
  const auto byte = [&](size_t k) -> unsigned char {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
  };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  unsigned char lo = 0x80, hi = 0xBF;
  int length = 0;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  const unsigned char b1 = byte(1);
  if (b1 < lo || b1 > hi) return 0;
  cp = (cp << 6) | (b1 & 0x3F);
  for (int k = 2; k < length; ++k) {
    if (!IsContinuation(byte(k))) return 0;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  *code_point = cp;
  return length;
}

}  // namespace

std::u32string DecodeUtf8Lenient(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const int length = SequenceLength(text, i, &cp);
    if (length == 0) {
      out.push_back(kInvalidByteBase + static_cast<unsigned char>(text[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += length;
    }
  }
  return out;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const int length = SequenceLength(text, i, &cp);
    if (length == 0) {
      AppendUtf8(kInvalidByteBase + static_cast<unsigned char>(text[i]), &out);
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string RestoreInvalidBytes(std::string_view sanitized) {
  std::string out;
  out.reserve(sanitized.size());
  for (size_t i = 0; i < sanitized.size();) {
    char32_t cp = 0;
    const int length = SequenceLength(sanitized, i, &cp);
    if (length == 4 && cp >= kInvalidByteBase && cp <= kInvalidByteBase + 0xFF) {
      out.push_back(static_cast<char>(cp - kInvalidByteBase));
      i += length;
    } else {
      const size_t n = length == 0 ? 1 : length;
      out.append(sanitized.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string_view SourceLine(std::string_view source, int line) {
  if (line < 1) return {};
  size_t start = 0;
  for (int current = 1; current < line; ++current) {
    const size_t newline = source.find('\n', start);
    if (newline == std::string_view::npos) return {};
    start = newline + 1;
  }
  size_t end = source.find('\n', start);
  if (end == std::string_view::npos) end = source.size();
  std::string_view text = source.substr(start, end - start);
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return text;
}

std::string DescribeCodePoint(char32_t c) {
  if (c >= kInvalidByteBase && c <= kInvalidByteBase + 0xFF) {
    return absl::StrFormat("invalid UTF-8 byte 0x%02x",
                           static_cast<unsigned>(c - kInvalidByteBase));
  }
  if (c == '\'') return "\"'\"";
  if (c >= 0x21 && c < 0x7F) return absl::StrFormat("'%c'", static_cast<char>(c));
  if (c >= 0xA0 && c < 0xE000) {
    std::string text;
    AppendUtf8(c, &text);
    return absl::StrFormat("'%s' (U+%04X)", text, static_cast<uint32_t>(c));
  }
  return absl::StrFormat("U+%04X", static_cast<uint32_t>(c));
}

}  // namespace trainc::frontend
