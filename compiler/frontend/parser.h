// Parses .train source text into an AST, reporting syntax errors.
//
// Never throws and never crashes on any input (binary, invalid UTF-8, deep
// nesting, huge files): ANTLR's exceptions are caught here, recursion depth
// is bounded before the parser runs, and at most DiagnosticSink::kMaxErrors
// errors are reported.
#ifndef TRAINC_COMPILER_FRONTEND_PARSER_H_
#define TRAINC_COMPILER_FRONTEND_PARSER_H_

#include <optional>
#include <string_view>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"

namespace trainc::frontend {

// Brackets plus unary operators nested deeper than this are an error: it
// bounds the recursion of the generated parser and of the AST builder.
inline constexpr int kMaxNesting = 256;

// The AST, or nullopt when there were syntax errors (all reported to sink).
std::optional<ast::File> ParseTrain(std::string_view source,
                                    DiagnosticSink& sink);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_PARSER_H_
