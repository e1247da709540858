#include "compiler/frontend/const_eval.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"

namespace trainc::frontend {
namespace {

using Kind = ast::Expr::Kind;

std::optional<Constant> Arithmetic(const ast::Expr& expr, const Constant& a,
                                   const Constant& b, DiagnosticSink& sink) {
  const char op = expr.text.empty() ? '?' : expr.text[0];
  if (!a.is_number() || !b.is_number()) {
    const Constant& bad = a.is_number() ? b : a;
    sink.Error(expr.name_span,
               absl::StrCat("cannot apply '", expr.text, "' to ",
                            DescribeConstant(bad)),
               "arithmetic works on numbers only");
    return std::nullopt;
  }
  if (op == '/' && b.AsDouble() == 0.0) {
    sink.Error(expr.name_span, "division by zero");
    return std::nullopt;
  }
  if (a.kind == Constant::Kind::kInt && b.kind == Constant::Kind::kInt) {
    int64_t result = 0;
    bool overflow = false;
    switch (op) {
      case '+':
        overflow = __builtin_add_overflow(a.int_value, b.int_value, &result);
        break;
      case '-':
        overflow = __builtin_sub_overflow(a.int_value, b.int_value, &result);
        break;
      case '*':
        overflow = __builtin_mul_overflow(a.int_value, b.int_value, &result);
        break;
      case '/':
        // INT64_MIN / -1 is the one integer division that overflows.
        if (b.int_value == -1 && a.int_value == INT64_MIN) {
          overflow = true;
        } else if (a.int_value % b.int_value == 0) {
          result = a.int_value / b.int_value;
        } else {
          return Constant::Float(static_cast<double>(a.int_value) /
                                 static_cast<double>(b.int_value));
        }
        break;
    }
    if (overflow) {
      sink.Error(expr.name_span,
                 absl::StrCat("integer overflow in ", a.int_value, " ",
                              expr.text, " ", b.int_value),
                 "integers are 64-bit: at most 9223372036854775807");
      return std::nullopt;
    }
    return Constant::Int(result);
  }
  const double x = a.AsDouble(), y = b.AsDouble();
  double result = 0;
  switch (op) {
    case '+':
      result = x + y;
      break;
    case '-':
      result = x - y;
      break;
    case '*':
      result = x * y;
      break;
    case '/':
      result = x / y;
      break;
  }
  if (!std::isfinite(result)) {
    sink.Error(expr.name_span, "number out of range",
               "the largest number is about 1.8e308");
    return std::nullopt;
  }
  return Constant::Float(result);
}

}  // namespace

Constant Constant::Int(int64_t v) {
  Constant c;
  c.kind = Kind::kInt;
  c.int_value = v;
  return c;
}

Constant Constant::Float(double v) {
  Constant c;
  c.kind = Kind::kFloat;
  c.float_value = v;
  return c;
}

Constant Constant::Bool(bool v) {
  Constant c;
  c.kind = Kind::kBool;
  c.bool_value = v;
  return c;
}

Constant Constant::String(std::string v) {
  Constant c;
  c.kind = Kind::kString;
  c.string_value = std::move(v);
  return c;
}

double Constant::AsDouble() const {
  return kind == Kind::kInt ? static_cast<double>(int_value) : float_value;
}

bool IsConstantExpr(const ast::Expr& expr, const ConstantScope* names) {
  switch (expr.kind) {
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kBool:
    case Kind::kString:
      return true;
    case Kind::kName:
      return names != nullptr && names->count(expr.text) > 0;
    case Kind::kUnary:
    case Kind::kBinary:
      for (const ast::Expr& arg : expr.args) {
        if (!IsConstantExpr(arg, names)) return false;
      }
      return true;
    default:
      return false;
  }
}

std::optional<Constant> EvaluateConstant(const ast::Expr& expr,
                                         DiagnosticSink& sink,
                                         const ConstantScope* names) {
  switch (expr.kind) {
    case Kind::kName:
      if (names != nullptr) {
        auto it = names->find(expr.text);
        if (it != names->end()) return it->second;
      }
      sink.Error(expr.span,
                 absl::StrCat("expected a constant, found ", DescribeExpr(expr)));
      return std::nullopt;
    case Kind::kInt:
      return Constant::Int(expr.int_value);
    case Kind::kFloat:
      return Constant::Float(expr.float_value);
    case Kind::kBool:
      return Constant::Bool(expr.bool_value);
    case Kind::kString:
      return Constant::String(expr.text);
    case Kind::kUnary: {
      if (expr.args.size() != 1) return std::nullopt;
      std::optional<Constant> value = EvaluateConstant(expr.args[0], sink, names);
      if (!value) return std::nullopt;
      if (!value->is_number()) {
        sink.Error(expr.name_span,
                   absl::StrCat("cannot apply '", expr.text, "' to ",
                                DescribeConstant(*value)),
                   "arithmetic works on numbers only");
        return std::nullopt;
      }
      if (expr.text == "+") return value;
      if (value->kind == Constant::Kind::kFloat) {
        return Constant::Float(-value->float_value);
      }
      if (value->int_value == INT64_MIN) {
        sink.Error(expr.name_span, "integer overflow in negation");
        return std::nullopt;
      }
      return Constant::Int(-value->int_value);
    }
    case Kind::kBinary: {
      if (expr.args.size() != 2) return std::nullopt;
      std::optional<Constant> a = EvaluateConstant(expr.args[0], sink, names);
      std::optional<Constant> b = EvaluateConstant(expr.args[1], sink, names);
      if (!a || !b) return std::nullopt;
      return Arithmetic(expr, *a, *b, sink);
    }
    default:
      sink.Error(expr.span,
                 absl::StrCat("expected a constant, found ", DescribeExpr(expr)));
      return std::nullopt;
  }
}

std::string FormatFloat(double value) {
  std::string text = absl::StrFormat("%.6g", value);
  if (!absl::StrContains(text, ".") && !absl::StrContains(text, "e") &&
      !absl::StrContains(text, "n") && !absl::StrContains(text, "i")) {
    text += ".0";
  }
  return text;
}

std::string DescribeConstant(const Constant& value) {
  switch (value.kind) {
    case Constant::Kind::kInt:
      return absl::StrCat(value.int_value);
    case Constant::Kind::kFloat:
      return FormatFloat(value.float_value);
    case Constant::Kind::kBool:
      return value.bool_value ? "true" : "false";
    case Constant::Kind::kString: {
      std::string shown = value.string_value.size() > 40
                              ? value.string_value.substr(0, 40) + "..."
                              : value.string_value;
      return absl::StrCat("the string \"", shown, "\"");
    }
  }
  return "?";
}

std::string DescribeExpr(const ast::Expr& expr) {
  switch (expr.kind) {
    case Kind::kName:
      return absl::StrCat("the name '", expr.text, "'");
    case Kind::kCall:
      return absl::StrCat("a call to ", expr.text, "(...)");
    case Kind::kTuple:
      return "a tuple";
    case Kind::kInt:
      return absl::StrCat(expr.int_value);
    case Kind::kFloat:
      return FormatFloat(expr.float_value);
    case Kind::kBool:
      return expr.bool_value ? "true" : "false";
    case Kind::kString:
      return DescribeConstant(Constant::String(expr.text));
    default:
      return "an expression";
  }
}

}  // namespace trainc::frontend
