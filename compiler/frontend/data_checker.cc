#include "compiler/frontend/data_checker.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/did_you_mean.h"
#include "compiler/frontend/setting.h"

namespace trainc::frontend {
namespace {

const std::vector<std::string>& DataFields() {
  static const auto* fields =
      new std::vector<std::string>{"train", "eval", "scale", "shuffle"};
  return *fields;
}

// Opens and reads one byte: a directory or an unreadable file fails here
// with the system's reason.
std::string CannotRead(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (path.find('\0') != std::string::npos) return "the path contains a NUL";
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return std::strerror(errno);
  errno = 0;
  std::fgetc(file);
  const int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  return error != 0 ? std::strerror(error) : "";
}

std::optional<DatasetSpec> CheckDataset(const Setting& setting,
                                        const std::string& base_dir,
                                        DiagnosticSink& sink) {
  const ast::Expr& expr = *setting.expr;
  const std::string example =
      "e.g. idx(\"train-images-idx3-ubyte.gz\", \"train-labels-idx1-ubyte.gz\")";
  if (expr.kind != ast::Expr::Kind::kCall) {
    ReportSetting(setting, sink,
                  absl::StrCat(setting.field, " must be a data source, got ",
                               DescribeExpr(expr)),
                  example);
    return std::nullopt;
  }
  const std::vector<std::string> formats = {"idx"};
  if (expr.text != "idx") {
    sink.Error(expr.name_span,
               absl::StrCat("unknown data format '", expr.text, "'"),
               SuggestionHint(expr.text, formats, "formats"));
    return std::nullopt;
  }
  if (expr.args.size() != 2) {
    sink.Error(expr.span,
               absl::StrCat("idx takes 2 arguments (images, labels), got ",
                            expr.args.size()),
               example);
    return std::nullopt;
  }
  DatasetSpec dataset;
  dataset.format = "idx";
  bool ok = true;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    const ast::Expr& arg = expr.args[i];
    if (!expr.arg_names[i].empty()) {
      sink.Error(expr.arg_name_spans[i], "idx takes positional arguments",
                 example);
      ok = false;
      continue;
    }
    if (arg.kind != ast::Expr::Kind::kString) {
      sink.Error(arg.span,
                 absl::StrCat("expected a file path (a string), got ",
                              DescribeExpr(arg)),
                 example);
      ok = false;
      continue;
    }
    std::string path = arg.text;
    if (!path.empty() && path[0] != '/' && !base_dir.empty()) {
      path = absl::StrCat(base_dir, "/", path);
    }
    const std::string reason = CannotRead(path);
    if (!reason.empty()) {
      sink.Error(arg.span, absl::StrCat("cannot read '", arg.text, "': ", reason),
                 path != arg.text
                     ? absl::StrCat("relative paths are resolved against the "
                                    ".train file's directory: ",
                                    path)
                     : "");
      ok = false;
      continue;
    }
    dataset.paths.push_back(path);
  }
  if (!ok) return std::nullopt;
  return dataset;
}

}  // namespace

std::optional<DataSpec> CheckData(const ast::Block& block,
                                  const std::string& base_dir,
                                  DiagnosticSink& sink) {
  const int errors_before = sink.error_count();
  std::map<std::string, Setting> settings;
  for (const ast::Item& item : block.items) {
    if (const auto* decl = std::get_if<ast::Declaration>(&item)) {
      sink.Error(decl->kind_span,
                 absl::StrCat("'", decl->kind,
                              "' declarations belong in the model block"));
      continue;
    }
    const auto& assignment = std::get<ast::Assignment>(item);
    bool known = false;
    for (const std::string& field : DataFields()) known |= field == assignment.name;
    if (!known) {
      sink.Error(assignment.name_span,
                 absl::StrCat("unknown data field '", assignment.name, "'"),
                 SuggestionHint(assignment.name, DataFields(), "data fields"));
      continue;
    }
    auto [it, inserted] =
        settings.emplace(assignment.name, FileSetting(assignment));
    if (!inserted) {
      sink.Error(assignment.name_span,
                 absl::StrCat("'", assignment.name, "' is set twice"),
                 absl::StrCat("first set at line ", it->second.name_span.line));
    }
  }

  DataSpec data;
  if (auto it = settings.find("train"); it != settings.end()) {
    if (auto dataset = CheckDataset(it->second, base_dir, sink)) {
      data.train = *dataset;
    }
  } else {
    sink.Error(block.kind_span, "data { } needs a train source",
               "e.g. train = idx(\"train-images-idx3-ubyte.gz\", "
               "\"train-labels-idx1-ubyte.gz\")");
  }
  if (auto it = settings.find("eval"); it != settings.end()) {
    if (auto dataset = CheckDataset(it->second, base_dir, sink)) {
      data.eval = *dataset;
    }
  }
  if (auto it = settings.find("scale"); it != settings.end()) {
    if (auto v = NumberAtLeast(it->second, 0, false, sink)) data.scale = *v;
  }
  if (auto it = settings.find("shuffle"); it != settings.end()) {
    if (auto v = Bool(it->second, sink)) data.shuffle = *v;
  }
  if (sink.error_count() > errors_before) return std::nullopt;
  return data;
}

}  // namespace trainc::frontend
