// Constant expressions: `1/255`, `2 * 128`, `-(3)`, `1e-3`, `true`, "path".
#ifndef TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_
#define TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"

namespace trainc::frontend {

struct Constant {
  enum class Kind { kInt, kFloat, kBool, kString };
  Kind kind = Kind::kInt;
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  std::string string_value;

  static Constant Int(int64_t v);
  static Constant Float(double v);
  static Constant Bool(bool v);
  static Constant String(std::string v);

  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  double AsDouble() const;
};

// Named constants in scope (`const width = 128` in the model block).
using ConstantScope = std::map<std::string, Constant>;

// True for literals, names in `names`, and + - * / over them: what
// EvaluateConstant accepts.
bool IsConstantExpr(const ast::Expr& expr, const ConstantScope* names = nullptr);

// Evaluates a constant expression. Integers stay integers under + - * and
// under / when it divides exactly (`512 / 2` is 256); otherwise / gives a
// float (`1 / 255`). Overflow, division by zero and arithmetic on strings or
// booleans are reported; nullopt then.
std::optional<Constant> EvaluateConstant(const ast::Expr& expr,
                                         DiagnosticSink& sink,
                                         const ConstantScope* names = nullptr);

// How a value reads in a message: 2, 1.5, 2.0, true, the string "two".
std::string DescribeConstant(const Constant& value);

// How a non-constant expression reads in a message: the name 'two',
// a call to adamw(...), a tuple.
std::string DescribeExpr(const ast::Expr& expr);

// A float as written in summaries: 0.001, 1e-08, 2.0 (never "2", which
// would read as an integer).
std::string FormatFloat(double value);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_CONST_EVAL_H_
