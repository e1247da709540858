// Turns ANTLR's parse tree into the AST (internal to the parser).
#ifndef TRAINC_COMPILER_FRONTEND_AST_BUILDER_H_
#define TRAINC_COMPILER_FRONTEND_AST_BUILDER_H_

#include "compiler/frontend/TrainParser.h"
#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"

namespace trainc::frontend {

// Where a token starts and how many code points it covers.
Span TokenSpan(const antlr4::Token* token);

// Builds the AST of a parse tree that had no syntax errors. Reports what
// only shows once tokens are interpreted (integer overflow, bad escapes,
// expressions nested too deeply) and returns false if it reported anything.
bool BuildAst(trainc_antlr::TrainParser::FileContext* tree,
              DiagnosticSink& sink, ast::File* file);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_AST_BUILDER_H_
