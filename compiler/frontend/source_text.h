// Source-text helpers shared by the parser and the diagnostic renderer:
// lenient UTF-8 decoding and line lookup.
#ifndef TRAINC_COMPILER_FRONTEND_SOURCE_TEXT_H_
#define TRAINC_COMPILER_FRONTEND_SOURCE_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

#include "compiler/util/utf8.h"

namespace trainc::frontend {

// Invalid UTF-8 bytes are mapped to U+10FF00 + byte (private use, plane 16)
// so that every byte stays one code point: columns keep meaning and the
// lexer reports the byte ("invalid UTF-8 byte 0xff") instead of the ANTLR
// runtime throwing on the conversion.
inline constexpr char32_t kInvalidByteBase = 0x10FF00;

// Decodes `text`, mapping each invalid byte as above.
std::u32string DecodeUtf8Lenient(std::string_view text);

// `text` with every invalid byte replaced by its private-use code point:
// always valid UTF-8, same code-point count as DecodeUtf8Lenient(text).
std::string SanitizeUtf8(std::string_view text);

// The inverse of SanitizeUtf8 for a piece of sanitized text (a string
// literal): each private-use code point U+10FF00 + byte is the byte again,
// so a path holding a byte that is not UTF-8 names the file as written.
std::string RestoreInvalidBytes(std::string_view sanitized);

using ::trainc::AppendUtf8;  // compiler/util/utf8.h

// The 1-based `line` of `source` without its line terminator; empty when out
// of range.
std::string_view SourceLine(std::string_view source, int line);

// How a character is named in a message: 'x' when printable ASCII,
// "invalid UTF-8 byte 0xff" or U+0000 otherwise.
std::string DescribeCodePoint(char32_t c);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_SOURCE_TEXT_H_
