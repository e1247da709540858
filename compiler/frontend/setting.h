// One `field = value` setting of data{} or train{}, from the file or from a
// command-line flag, and the typed checks every field goes through. Errors
// from a flag name the flag ("--gpus: must be a positive integer, got 0");
// errors from the file point at the value.
#ifndef TRAINC_COMPILER_FRONTEND_SETTING_H_
#define TRAINC_COMPILER_FRONTEND_SETTING_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/const_eval.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/ops/arg_value.h"

namespace trainc::frontend {

struct Setting {
  std::string field;
  const ast::Expr* expr = nullptr;  // from the file: the value
  Span name_span;                   // from the file: the field name
  std::string flag;                 // from a flag: its name ("gpus")
  std::string flag_text;            // from a flag: its value as typed

  bool from_flag() const { return !flag.empty(); }
  // "gpus = 4 (from --gpus)" style provenance for arithmetic hints.
  std::string Provenance() const;
};

// A setting from the file.
Setting FileSetting(const ast::Assignment& assignment);
// A setting from a command-line flag `--name value`.
Setting FlagSetting(std::string name, std::string value);

// The `field = value` items of a data { } or train { } block by field (the
// first where one is set twice). Reports declarations, fields not in
// `fields` ("unknown <block_name> field", with a did-you-mean) and fields
// set twice; sets *unknown_field when a field was unknown.
std::map<std::string, Setting> FileSettings(
    const ast::Block& block, const std::string& block_name,
    const std::vector<std::string>& fields, DiagnosticSink& sink,
    bool* unknown_field = nullptr);

// A path written in the .train file: a relative one is taken relative to
// the file's directory `base_dir` (left as written when that is "").
std::string ResolvePath(const std::string& base_dir, const std::string& written);

// Reports against the setting's origin: the value's span, or the flag.
void ReportSetting(const Setting& setting, DiagnosticSink& sink,
                   const std::string& message, const std::string& hint = "");

// The setting's constant value. A flag's text reads as an integer, a
// number, true/false, or else a string. Reports "<field> must be <what>,
// got <...>" when the file gives a name, call or tuple.
std::optional<ops::ArgValue> SettingConstant(const Setting& setting,
                                             const std::string& what,
                                             DiagnosticSink& sink);

// A flag's text read as a value of `kind`: an integer, a finite number,
// true or false, or (a string) the text itself; nullopt when it is not one.
std::optional<ops::ArgValue> ParseFlagAs(ops::ArgValue::Kind kind,
                                         const std::string& text);

std::optional<int64_t> PositiveInt(const Setting& setting, DiagnosticSink& sink);
std::optional<int64_t> NonNegativeInt(const Setting& setting,
                                      DiagnosticSink& sink);
// A finite number >= minimum (or > minimum when !inclusive).
std::optional<double> NumberAtLeast(const Setting& setting, double minimum,
                                    bool inclusive, DiagnosticSink& sink);
std::optional<bool> Bool(const Setting& setting, DiagnosticSink& sink);
std::optional<std::string> String(const Setting& setting, DiagnosticSink& sink);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_SETTING_H_
