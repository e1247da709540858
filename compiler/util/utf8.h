// UTF-8 encoding of one code point, for the front end's diagnostics and the
// JSON reader's \u escapes.
#ifndef TRAINC_COMPILER_UTIL_UTF8_H_
#define TRAINC_COMPILER_UTIL_UTF8_H_

#include <string>

namespace trainc {

// Appends `code_point` (at most 0x10FFFF) to `out` as 1 to 4 bytes.
void AppendUtf8(char32_t code_point, std::string* out);

}  // namespace trainc

#endif  // TRAINC_COMPILER_UTIL_UTF8_H_
