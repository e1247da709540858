#include "compiler/frontend/setting.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainc::frontend {
namespace {

Constant ParseFlagValue(const std::string& text) {
  int64_t i = 0;
  if (absl::SimpleAtoi(text, &i)) return Constant::Int(i);
  double d = 0;
  if (absl::SimpleAtod(text, &d) && std::isfinite(d)) return Constant::Float(d);
  if (text == "true") return Constant::Bool(true);
  if (text == "false") return Constant::Bool(false);
  return Constant::String(text);
}

std::string MustBe(const Setting& setting, const std::string& what,
                   const std::string& got) {
  return absl::StrCat(setting.field, " must be ", what, ", got ", got);
}

}  // namespace

std::string Setting::Provenance() const {
  return from_flag() ? absl::StrCat(" (from --", flag, ")") : "";
}

Setting FileSetting(const ast::Assignment& assignment) {
  Setting setting;
  setting.field = assignment.name;
  setting.expr = &assignment.value;
  setting.name_span = assignment.name_span;
  return setting;
}

Setting FlagSetting(std::string name, std::string value) {
  Setting setting;
  setting.field = name;
  setting.flag = std::move(name);
  setting.flag_text = std::move(value);
  return setting;
}

void ReportSetting(const Setting& setting, DiagnosticSink& sink,
                   const std::string& message, const std::string& hint) {
  if (setting.from_flag()) {
    sink.CommandLineError(absl::StrCat("--", setting.flag, ": ", message), hint);
  } else if (setting.expr != nullptr) {
    sink.Error(setting.expr->span, message, hint);
  } else {
    sink.Error(setting.name_span, message, hint);
  }
}

std::optional<Constant> SettingConstant(const Setting& setting,
                                        const std::string& what,
                                        DiagnosticSink& sink) {
  if (setting.from_flag()) return ParseFlagValue(setting.flag_text);
  if (setting.expr == nullptr) return std::nullopt;
  if (!IsConstantExpr(*setting.expr)) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeExpr(*setting.expr)));
    return std::nullopt;
  }
  return EvaluateConstant(*setting.expr, sink);
}

std::optional<int64_t> PositiveInt(const Setting& setting,
                                   DiagnosticSink& sink) {
  const std::string what = "a positive integer";
  std::optional<Constant> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  if (value->kind != Constant::Kind::kInt || value->int_value <= 0) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value->int_value;
}

std::optional<int64_t> NonNegativeInt(const Setting& setting,
                                      DiagnosticSink& sink) {
  const std::string what = "an integer >= 0";
  std::optional<Constant> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  if (value->kind != Constant::Kind::kInt || value->int_value < 0) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value->int_value;
}

std::optional<double> NumberAtLeast(const Setting& setting, double minimum,
                                    bool inclusive, DiagnosticSink& sink) {
  const std::string what =
      absl::StrCat("a number ", inclusive ? ">= " : "> ", absl::StrCat(minimum));
  std::optional<Constant> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  const bool in_range =
      value->is_number() && (inclusive ? value->AsDouble() >= minimum
                                       : value->AsDouble() > minimum);
  if (!in_range) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value->AsDouble();
}

std::optional<bool> Bool(const Setting& setting, DiagnosticSink& sink) {
  const std::string what = "true or false";
  std::optional<Constant> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  if (value->kind != Constant::Kind::kBool) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value->bool_value;
}

std::optional<std::string> String(const Setting& setting,
                                  DiagnosticSink& sink) {
  const std::string what = "a string";
  std::optional<Constant> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  if (value->kind != Constant::Kind::kString) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value->string_value;
}

}  // namespace trainc::frontend
