#include "compiler/frontend/setting.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/did_you_mean.h"

namespace trainc::frontend {

using ops::ArgValue;

namespace {

// The first of an integer, a number, true/false that the text reads as;
// else the text as a string.
ArgValue ParseFlagValue(const std::string& text) {
  for (ArgValue::Kind kind : {ArgValue::Kind::kInt, ArgValue::Kind::kFloat,
                              ArgValue::Kind::kBool}) {
    if (std::optional<ArgValue> value = ParseFlagAs(kind, text)) return *value;
  }
  return ArgValue::String(text);
}

std::string MustBe(const Setting& setting, const std::string& what,
                   const std::string& got) {
  return absl::StrCat(setting.field, " must be ", what, ", got ", got);
}

// Where a non-setting item of a block starts.
Span ItemKindSpan(const ast::Item& item) {
  if (const auto* c = std::get_if<ast::Constants>(&item)) return c->kind_span;
  if (const auto* r = std::get_if<ast::Return>(&item)) return r->kind_span;
  if (const auto* b = std::get_if<ast::NestedBlock>(&item)) {
    if (b->block != nullptr) return b->block->kind_span;
  }
  if (const auto* d = std::get_if<ast::Declaration>(&item)) return d->kind_span;
  return Span{};
}

// The setting's value if `accepts` it; else reports "<field> must be
// <what>, got <value>" and returns nullopt.
std::optional<ArgValue> Checked(
    const Setting& setting, const std::string& what, DiagnosticSink& sink,
    absl::FunctionRef<bool(const ArgValue&)> accepts) {
  std::optional<ArgValue> value = SettingConstant(setting, what, sink);
  if (!value) return std::nullopt;
  if (!accepts(*value)) {
    ReportSetting(setting, sink, MustBe(setting, what, DescribeConstant(*value)));
    return std::nullopt;
  }
  return value;
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

std::map<std::string, Setting> FileSettings(
    const ast::Block& block, const std::string& block_name,
    const std::vector<std::string>& fields, DiagnosticSink& sink,
    bool* unknown_field) {
  std::map<std::string, Setting> settings;
  for (const ast::Item& item : block.items) {
    if (const auto* decl = std::get_if<ast::Declaration>(&item)) {
      sink.Error(decl->kind_span,
                 absl::StrCat("'", decl->kind,
                              "' declarations belong in the model block"));
      continue;
    }
    const auto* assignment = std::get_if<ast::Assignment>(&item);
    if (assignment == nullptr) {  // the AST builder keeps these in model { }
      sink.Error(ItemKindSpan(item),
                 absl::StrCat("the ", block_name,
                              " block holds only settings: `field = value`"));
      continue;
    }
    if (std::find(fields.begin(), fields.end(), assignment->name) ==
        fields.end()) {
      if (unknown_field != nullptr) *unknown_field = true;
      sink.Error(assignment->name_span,
                 absl::StrCat("unknown ", block_name, " field '",
                              assignment->name, "'"),
                 SuggestionHint(assignment->name, fields,
                                absl::StrCat(block_name, " fields")));
      continue;
    }
    auto [it, inserted] =
        settings.emplace(assignment->name, FileSetting(*assignment));
    if (!inserted) {
      sink.Error(assignment->name_span,
                 absl::StrCat("'", assignment->name, "' is set twice"),
                 absl::StrCat("first set at line ", it->second.name_span.line));
    }
  }
  return settings;
}

std::string ResolvePath(const std::string& base_dir,
                        const std::string& written) {
  if (written.empty() || written[0] == '/' || base_dir.empty()) return written;
  return absl::StrCat(base_dir, "/", written);
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

std::optional<ArgValue> SettingConstant(const Setting& setting,
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

std::optional<ArgValue> ParseFlagAs(ArgValue::Kind kind,
                                    const std::string& text) {
  switch (kind) {
    case ArgValue::Kind::kInt: {
      int64_t i = 0;
      if (absl::SimpleAtoi(text, &i)) return ArgValue::Int(i);
      return std::nullopt;
    }
    case ArgValue::Kind::kFloat: {
      double d = 0;
      if (absl::SimpleAtod(text, &d) && std::isfinite(d)) {
        return ArgValue::Float(d);
      }
      return std::nullopt;
    }
    case ArgValue::Kind::kBool:
      if (text != "true" && text != "false") return std::nullopt;
      return ArgValue::Bool(text == "true");
    case ArgValue::Kind::kString:
      return ArgValue::String(text);
  }
  return std::nullopt;
}

std::optional<int64_t> PositiveInt(const Setting& setting,
                                   DiagnosticSink& sink) {
  std::optional<ArgValue> value =
      Checked(setting, "a positive integer", sink, [](const ArgValue& v) {
        return v.kind == ArgValue::Kind::kInt && v.i > 0;
      });
  if (!value) return std::nullopt;
  return value->i;
}

std::optional<int64_t> NonNegativeInt(const Setting& setting,
                                      DiagnosticSink& sink) {
  std::optional<ArgValue> value =
      Checked(setting, "an integer >= 0", sink, [](const ArgValue& v) {
        return v.kind == ArgValue::Kind::kInt && v.i >= 0;
      });
  if (!value) return std::nullopt;
  return value->i;
}

std::optional<double> NumberAtLeast(const Setting& setting, double minimum,
                                    bool inclusive, DiagnosticSink& sink) {
  const std::string what =
      absl::StrCat("a number ", inclusive ? ">= " : "> ", absl::StrCat(minimum));
  std::optional<ArgValue> value =
      Checked(setting, what, sink, [&](const ArgValue& v) {
        return v.is_number() && (inclusive ? v.AsDouble() >= minimum
                                           : v.AsDouble() > minimum);
      });
  if (!value) return std::nullopt;
  return value->AsDouble();
}

std::optional<bool> Bool(const Setting& setting, DiagnosticSink& sink) {
  std::optional<ArgValue> value =
      Checked(setting, "true or false", sink, [](const ArgValue& v) {
        return v.kind == ArgValue::Kind::kBool;
      });
  if (!value) return std::nullopt;
  return value->b;
}

std::optional<std::string> String(const Setting& setting,
                                  DiagnosticSink& sink) {
  std::optional<ArgValue> value =
      Checked(setting, "a string", sink, [](const ArgValue& v) {
        return v.kind == ArgValue::Kind::kString;
      });
  if (!value) return std::nullopt;
  return value->s;
}

}  // namespace trainc::frontend
