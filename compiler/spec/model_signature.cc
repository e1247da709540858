#include "compiler/spec/model_signature.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/number_text.h"

namespace trainc {
namespace {

std::string ArgText(const ops::ArgValue& v) {
  switch (v.kind) {
    case ops::ArgValue::Kind::kInt:
      return absl::StrCat(v.i);
    case ops::ArgValue::Kind::kFloat:
      return ShortestDouble(v.f);
    case ops::ArgValue::Kind::kString:
      return absl::StrCat("\"", v.s, "\"");
    case ops::ArgValue::Kind::kBool:
      return v.b ? "true" : "false";
  }
  return "";
}

bool IsInit(ops::ModelOp op, const std::string& arg) {
  for (const ops::ArgDef& a : ops::DefOf(op).args) {
    if (a.name == arg) return a.kind == ops::ArgDef::Kind::kInit;
  }
  return false;
}

std::string CallText(const OpSpec& op) {
  std::vector<std::string> args;
  for (const auto& [name, value] : op.args) {
    if (!IsInit(op.op, name)) args.push_back(absl::StrCat(name, "=", ArgText(value)));
  }
  for (const auto& [name, parameter] : op.shared_parameters) {
    args.push_back(absl::StrCat(name, "=", parameter));
  }
  return absl::StrCat(ops::ModelOpName(op.op), "(", absl::StrJoin(args, ", "), ")");
}

std::string ValueText(const char* kind, const ValueSpec& v) {
  return absl::StrCat(kind, " ", v.name, ": ", v.type == ElementType::kI32 ? "i32" : "f32", "[",
                      absl::StrJoin(v.shape, ", "), "]");
}

}  // namespace

std::vector<std::string> ModelSignatureLines(const ModelSpec& model) {
  std::map<std::string, int> calls;
  for (const OpSpec& op : model.ops) {
    // Regularisation, the identity outside training: weights trained with
    // one dropout rate are fine-tuned with another (or none).
    if (op.op == ops::ModelOp::kDropout) continue;
    ++calls[CallText(op)];
  }
  std::vector<std::string> lines;
  for (const auto& [call, count] : calls) lines.push_back(absl::StrCat(count, " x ", call));
  for (const ValueSpec& v : model.inputs) lines.push_back(ValueText("input", v));
  for (const ValueSpec& v : model.labels) lines.push_back(ValueText("label", v));
  return lines;
}

std::string ModelSignature(const ModelSpec& model) {
  return absl::StrJoin(ModelSignatureLines(model), "\n");
}

std::string ModelSignatureDifference(const std::string& a, const std::string& a_name,
                                     const std::string& b, const std::string& b_name) {
  if (a == b) return "";
  const std::vector<std::string> a_lines = absl::StrSplit(a, '\n');
  const std::vector<std::string> b_lines = absl::StrSplit(b, '\n');
  const std::set<std::string> in_a(a_lines.begin(), a_lines.end());
  const std::set<std::string> in_b(b_lines.begin(), b_lines.end());
  std::vector<std::string> only_a, only_b;
  for (const std::string& line : a_lines) {
    if (!in_b.count(line)) only_a.push_back(line);
  }
  for (const std::string& line : b_lines) {
    if (!in_a.count(line)) only_b.push_back(line);
  }
  auto list = [](const std::vector<std::string>& lines) {
    return lines.empty() ? std::string("nothing else") : absl::StrJoin(lines, "; ");
  };
  return absl::StrCat(a_name, " has ", list(only_a), " where ", b_name, " has ", list(only_b));
}

}  // namespace trainc
