// Constant expressions: `1/255`, `2 * 128`, `-(3)`, `1e-3`, `true`, "path".
// They evaluate to an ops::ArgValue (compiler/ops/arg_value.h), the value
// the op table's rules read as constant arguments.
#ifndef TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_
#define TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_

#include <map>
#include <optional>
#include <string>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/ops/arg_value.h"

namespace trainc::frontend {

// Named constants in scope (`const width = 128` in the model block).
using ConstantScope = std::map<std::string, ops::ArgValue>;

// True for literals, names in `names`, and + - * / over them: what
// EvaluateConstant accepts.
bool IsConstantExpr(const ast::Expr& expr, const ConstantScope* names = nullptr);

// Evaluates a constant expression. Integers stay integers under + - * and
// under / when it divides exactly (`512 / 2` is 256); otherwise / gives a
// float (`1 / 255`). Overflow, division by zero and arithmetic on strings or
// booleans are reported; nullopt then.
std::optional<ops::ArgValue> EvaluateConstant(
    const ast::Expr& expr, DiagnosticSink& sink,
    const ConstantScope* names = nullptr);

// How a value reads in a message: 2, 1.5, 2.0, true, the string "two".
std::string DescribeConstant(const ops::ArgValue& value);

// How a non-constant expression reads in a message: the name 'two',
// a call to adamw(...), a tuple.
std::string DescribeExpr(const ast::Expr& expr);

// A float as written in summaries: 0.001, 1e-08, 2.0 (never "2", which
// would read as an integer).
std::string FormatFloat(double value);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_
