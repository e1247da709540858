#include "compiler/frontend/const_eval.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"

namespace trainc::frontend {

using ops::ArgValue;

namespace {

using Kind = ast::Expr::Kind;

std::optional<ArgValue> Arithmetic(const ast::Expr& expr, const ArgValue& a,
                                   const ArgValue& b, DiagnosticSink& sink) {
  const char op = expr.text.empty() ? '?' : expr.text[0];
  if (!a.is_number() || !b.is_number()) {
    const ArgValue& bad = a.is_number() ? b : a;
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
  if (a.kind == ArgValue::Kind::kInt && b.kind == ArgValue::Kind::kInt) {
    int64_t result = 0;
    bool overflow = false;
    switch (op) {
      case '+':
        overflow = __builtin_add_overflow(a.i, b.i, &result);
        break;
      case '-':
        overflow = __builtin_sub_overflow(a.i, b.i, &result);
        break;
      case '*':
        overflow = __builtin_mul_overflow(a.i, b.i, &result);
        break;
      case '/':
        // INT64_MIN / -1 is the one integer division that overflows.
        if (b.i == -1 && a.i == INT64_MIN) {
          overflow = true;
        } else if (a.i % b.i == 0) {
          result = a.i / b.i;
        } else {
          return ArgValue::Float(static_cast<double>(a.i) /
                                 static_cast<double>(b.i));
        }
        break;
    }
    if (overflow) {
      sink.Error(expr.name_span,
                 absl::StrCat("integer overflow in ", a.i, " ", expr.text, " ",
                              b.i),
                 "integers are 64-bit: at most 9223372036854775807");
      return std::nullopt;
    }
    return ArgValue::Int(result);
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
  return ArgValue::Float(result);
}

}  // namespace

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
    case Kind::kCall:  // sqrt(constant)
      return expr.text == "sqrt" && expr.args.size() == 1 && expr.arg_names[0].empty() &&
             IsConstantExpr(expr.args[0], names);
    default:
      return false;
  }
}

std::optional<ArgValue> EvaluateConstant(const ast::Expr& expr,
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
      return ArgValue::Int(expr.int_value);
    case Kind::kFloat:
      return ArgValue::Float(expr.float_value);
    case Kind::kBool:
      return ArgValue::Bool(expr.bool_value);
    case Kind::kString:
      return ArgValue::String(expr.text);
    case Kind::kUnary: {
      if (expr.args.size() != 1) return std::nullopt;
      std::optional<ArgValue> value = EvaluateConstant(expr.args[0], sink, names);
      if (!value) return std::nullopt;
      if (!value->is_number()) {
        sink.Error(expr.name_span,
                   absl::StrCat("cannot apply '", expr.text, "' to ",
                                DescribeConstant(*value)),
                   "arithmetic works on numbers only");
        return std::nullopt;
      }
      if (expr.text == "+") return value;
      if (value->kind == ArgValue::Kind::kFloat) {
        return ArgValue::Float(-value->f);
      }
      if (value->i == INT64_MIN) {
        sink.Error(expr.name_span, "integer overflow in negation");
        return std::nullopt;
      }
      return ArgValue::Int(-value->i);
    }
    case Kind::kBinary: {
      if (expr.args.size() != 2) return std::nullopt;
      std::optional<ArgValue> a = EvaluateConstant(expr.args[0], sink, names);
      std::optional<ArgValue> b = EvaluateConstant(expr.args[1], sink, names);
      if (!a || !b) return std::nullopt;
      return Arithmetic(expr, *a, *b, sink);
    }
    case Kind::kCall: {
      if (expr.text != "sqrt" || expr.args.size() != 1) break;
      std::optional<ArgValue> x = EvaluateConstant(expr.args[0], sink, names);
      if (!x) return std::nullopt;
      if (!x->is_number() || x->AsDouble() < 0) {
        sink.Error(expr.span, absl::StrCat("sqrt of ", DescribeConstant(*x)),
                   "sqrt takes a number >= 0");
        return std::nullopt;
      }
      return ArgValue::Float(std::sqrt(x->AsDouble()));
    }
    default:
      break;
  }
  sink.Error(expr.span, absl::StrCat("expected a constant, found ", DescribeExpr(expr)));
  return std::nullopt;
}

std::string FormatFloat(double value) {
  std::string text = absl::StrFormat("%.6g", value);
  if (!absl::StrContains(text, ".") && !absl::StrContains(text, "e") &&
      !absl::StrContains(text, "n") && !absl::StrContains(text, "i")) {
    text += ".0";
  }
  return text;
}

std::string DescribeConstant(const ArgValue& value) {
  switch (value.kind) {
    case ArgValue::Kind::kInt:
      return absl::StrCat(value.i);
    case ArgValue::Kind::kFloat:
      return FormatFloat(value.f);
    case ArgValue::Kind::kBool:
      return value.b ? "true" : "false";
    case ArgValue::Kind::kString: {
      std::string shown =
          value.s.size() > 40 ? value.s.substr(0, 40) + "..." : value.s;
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
      return DescribeConstant(ArgValue::String(expr.text));
    default:
      return "an expression";
  }
}

}  // namespace trainc::frontend
