#include "compiler/frontend/model_checker.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/const_eval.h"
#include "compiler/frontend/did_you_mean.h"

namespace trainc::frontend {
namespace {

// Larger dimensions are certainly typos, and the bound keeps every
// parameter count far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;

struct OpInfo {
  const char* name;
  int arity;
  const char* arguments;  // for messages
  bool has_parameters;
  bool is_loss;
};

constexpr OpInfo kOps[] = {
    {"linear", 2, "x, out_features", true, false},
    {"relu", 1, "x", false, false},
    {"gelu", 1, "x", false, false},
    {"tanh", 1, "x", false, false},
    {"layernorm", 1, "x", true, false},
    {"add", 2, "a, b", false, false},
    {"cross_entropy", 2, "logits, label", false, true},
    {"mse", 2, "prediction, target", false, true},
};

const OpInfo* FindOp(const std::string& name) {
  for (const OpInfo& op : kOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

std::vector<std::string> OpNames() {
  std::vector<std::string> names;
  for (const OpInfo& op : kOps) names.push_back(op.name);
  return names;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string TypeText(const ValueSpec& value) {
  return absl::StrCat(value.type == ElementType::kI32 ? "i32" : "f32",
                      ShapeText(value.shape));
}

struct Value {
  ValueSpec spec;
  enum class Origin { kInput, kLabel, kStatement, kNested } origin;
  bool is_loss = false;
  bool used = false;
  Span span;
};

class ModelChecker {
 public:
  ModelChecker(const ast::Block& block, DiagnosticSink& sink)
      : block_(block), sink_(sink) {}

  std::optional<ModelSpec> Check() {
    const int errors_before = sink_.error_count();
    model_.name = block_.name;
    if (block_.name.empty()) {
      sink_.Error(block_.kind_span, "the model block needs a name",
                  "e.g. model fashion_mlp { ... }");
    }
    // Every statement name up front, to tell "used before its definition"
    // from "undefined".
    for (const ast::Item& item : block_.items) {
      if (const auto* a = std::get_if<ast::Assignment>(&item)) {
        statement_lines_.emplace(a->name, a->name_span.line);
      }
    }
    for (const ast::Item& item : block_.items) {
      std::string name;
      if (const auto* decl = std::get_if<ast::Declaration>(&item)) {
        name = decl->name;
        if (decl->kind != "label") saw_input_ = true;
        CheckDeclaration(*decl);
      } else {
        name = std::get<ast::Assignment>(item).name;
        CheckStatement(std::get<ast::Assignment>(item));
      }
      // A name whose definition failed is poisoned: its uses fail quietly
      // instead of cascading into "undefined name" errors.
      if (values_.count(name) == 0) {
        poisoned_.insert(name);
      }
    }
    CheckWhole(/*had_errors=*/sink_.error_count() > errors_before);
    if (sink_.error_count() > errors_before) return std::nullopt;
    return model_;
  }

 private:
  SourceLocation Location(const Span& span) const {
    SourceLocation location;
    location.line = span.line;
    location.column = span.column;
    return location;
  }

  // False (and reported) when `name` cannot be defined here.
  bool CheckNewName(const std::string& name, const Span& span) {
    auto it = values_.find(name);
    if (it == values_.end()) return true;
    const Value& existing = it->second;
    const char* what = existing.origin == Value::Origin::kInput   ? "an input"
                       : existing.origin == Value::Origin::kLabel ? "a label"
                                                                  : "a value";
    sink_.Error(span,
                absl::StrCat("'", name, "' is already defined as ", what,
                             " at line ", existing.span.line),
                "each name is defined once; pick another name");
    return false;
  }

  void CheckDeclaration(const ast::Declaration& decl) {
    const bool is_input = decl.kind == "input";
    const bool is_label = decl.kind == "label";
    if (!is_input && !is_label) {
      sink_.Error(decl.kind_span,
                  absl::StrCat("unknown declaration '", decl.kind, "'"),
                  SuggestionHint(decl.kind, {"input", "label"},
                                 "declarations"));
      return;
    }
    if (!CheckNewName(decl.name, decl.name_span)) return;
    ValueSpec spec;
    spec.name = decl.name;
    spec.location = Location(decl.name_span);
    bool ok = true;
    if (decl.element_type == "f32") {
      spec.type = ElementType::kF32;
    } else if (decl.element_type == "i32") {
      spec.type = ElementType::kI32;
    } else {
      Span span = decl.type_span;
      span.length = static_cast<int>(decl.element_type.size());
      sink_.Error(span,
                  absl::StrCat("unknown element type '", decl.element_type, "'"),
                  SuggestionHint(decl.element_type, {"f32", "i32"},
                                 "element types"));
      ok = false;
    }
    if (decl.dims.empty()) {
      sink_.Error(decl.type_span,
                  absl::StrCat("'", decl.name, "' needs a shape"),
                  absl::StrCat("e.g. ", decl.element_type, "[784]"));
      ok = false;
    }
    for (size_t i = 0; i < decl.dims.size(); ++i) {
      if (decl.dims[i] <= 0 || decl.dims[i] > kMaxDim) {
        sink_.Error(decl.dim_spans[i],
                    absl::StrCat("dimension must be in [1, ", kMaxDim,
                                 "], got ", decl.dims[i]));
        ok = false;
      }
    }
    if (ok && is_input && spec.type != ElementType::kF32) {
      sink_.Error(decl.type_span, "inputs must be f32",
                  "class indices are declared with `label`");
      ok = false;
    }
    if (ok && is_label && spec.type == ElementType::kI32 &&
        decl.dims.size() != 1) {
      sink_.Error(decl.type_span,
                  "an i32 class label has one dimension: the number of classes",
                  "e.g. label class: i32[10]");
      ok = false;
    }
    if (!ok) return;
    spec.shape = decl.dims;
    Value value{spec, is_input ? Value::Origin::kInput : Value::Origin::kLabel};
    value.span = decl.name_span;
    values_.emplace(decl.name, value);
    (is_input ? model_.inputs : model_.labels).push_back(spec);
  }

  void CheckStatement(const ast::Assignment& statement) {
    if (!CheckNewName(statement.name, statement.name_span)) return;
    if (statement.value.kind != ast::Expr::Kind::kCall) {
      sink_.Error(statement.value.span,
                  absl::StrCat("a model statement must call an op, got ",
                               DescribeExpr(statement.value)),
                  absl::StrCat("e.g. ", statement.name, " = relu(x); ops: ",
                               absl::StrJoin(OpNames(), ", ")));
      return;
    }
    Flattening flattening{&statement};
    CheckCall(statement.value, /*top=*/true, &flattening);
  }

  // State while flattening one statement's nested calls.
  struct Flattening {
    const ast::Assignment* statement;
    int next_index = 0;
    int parameterised_ops = 0;
  };

  // Resolves a value argument (a name or a nested call) to a value name.
  std::optional<std::string> CheckValueArg(const ast::Expr& arg,
                                           const OpInfo& op, size_t index,
                                           Flattening* flattening) {
    if (arg.kind == ast::Expr::Kind::kCall) {
      return CheckCall(arg, /*top=*/false, flattening);
    }
    if (arg.kind != ast::Expr::Kind::kName) {
      sink_.Error(arg.span,
                  absl::StrCat("argument ", index + 1, " of ", op.name,
                               " must be a value (a name or an op call), got ",
                               DescribeExpr(arg)),
                  absl::StrCat(op.name, "(", op.arguments, ")"));
      return std::nullopt;
    }
    auto it = values_.find(arg.text);
    if (it == values_.end() && poisoned_.count(arg.text) > 0) {
      return std::nullopt;
    }
    if (it == values_.end()) {
      auto later = statement_lines_.find(arg.text);
      if (arg.text == flattening->statement->name) {
        sink_.Error(arg.span,
                    absl::StrCat("'", arg.text, "' is used in its own definition"));
      } else if (later != statement_lines_.end()) {
        sink_.Error(arg.span,
                    absl::StrCat("'", arg.text,
                                 "' is used before its definition at line ",
                                 later->second),
                    "statements run in order; move the definition up");
      } else {
        std::vector<std::string> known;
        for (const auto& [name, value] : values_) {
          if (value.origin != Value::Origin::kNested) known.push_back(name);
        }
        const std::string match = ClosestMatch(arg.text, known);
        sink_.Error(arg.span, absl::StrCat("undefined name '", arg.text, "'"),
                    match.empty() ? ""
                                  : absl::StrCat("did you mean '", match, "'?"));
      }
      return std::nullopt;
    }
    Value& value = it->second;
    value.used = true;
    if (value.is_loss) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text,
                               "' is the scalar loss; it cannot feed another op"));
      return std::nullopt;
    }
    const bool class_label = value.origin == Value::Origin::kLabel &&
                             value.spec.type == ElementType::kI32;
    const bool takes_class_label =
        std::string(op.name) == "cross_entropy" && index == 1;
    if (class_label && !takes_class_label) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text, "' is an i32 class label; only "
                               "cross_entropy's second argument takes it"),
                  absl::StrCat("e.g. loss = cross_entropy(logits, ", arg.text,
                               ")"));
      return std::nullopt;
    }
    if (takes_class_label && !class_label) {
      sink_.Error(arg.span,
                  absl::StrCat("cross_entropy's second argument must be an i32 "
                               "class label, got '",
                               arg.text, "' ", TypeText(value.spec)),
                  "declare it as e.g. label class: i32[10]");
      return std::nullopt;
    }
    return arg.text;
  }

  std::optional<int64_t> CheckOutFeatures(const ast::Expr& arg) {
    const std::string what = "out_features of linear must be a positive integer";
    if (!IsConstantExpr(arg)) {
      sink_.Error(arg.span,
                  absl::StrCat(what, " constant, got ", DescribeExpr(arg)),
                  "e.g. linear(x, 256)");
      return std::nullopt;
    }
    std::optional<Constant> value = EvaluateConstant(arg, sink_);
    if (!value) return std::nullopt;
    if (value->kind != Constant::Kind::kInt || value->int_value <= 0 ||
        value->int_value > kMaxDim) {
      sink_.Error(arg.span, absl::StrCat(what, ", got ", DescribeConstant(*value)),
                  value->kind == Constant::Kind::kInt && value->int_value > 0
                      ? absl::StrCat("the largest dimension is ", kMaxDim)
                      : "");
      return std::nullopt;
    }
    return value->int_value;
  }

  void AddParameter(const std::string& name, std::vector<int64_t> shape,
                    ParameterSpec::Init init, int64_t fan_in, OpSpec* op) {
    ParameterSpec parameter;
    parameter.name = name;
    parameter.shape = std::move(shape);
    parameter.init = init;
    parameter.fan_in = fan_in;
    int64_t count = 1;
    for (int64_t d : parameter.shape) count *= d;  // bounded by kMaxDim^2
    if (__builtin_add_overflow(model_.parameter_count, count,
                               &model_.parameter_count)) {
      model_.parameter_count = INT64_MAX;
    }
    op->parameters.push_back(name);
    model_.parameters.push_back(std::move(parameter));
  }

  // Checks one call (children first) and defines its value; returns the
  // value's name.
  std::optional<std::string> CheckCall(const ast::Expr& call, bool top,
                                       Flattening* flattening) {
    const std::string& statement = flattening->statement->name;
    const OpInfo* op = FindOp(call.text);
    if (op == nullptr) {
      sink_.Error(call.name_span, absl::StrCat("unknown op '", call.text, "'"),
                  SuggestionHint(call.text, OpNames(), "ops"));
      return std::nullopt;
    }
    for (size_t i = 0; i < call.arg_names.size(); ++i) {
      if (!call.arg_names[i].empty()) {
        sink_.Error(call.arg_name_spans[i],
                    absl::StrCat(op->name, " takes positional arguments only"),
                    absl::StrCat(op->name, "(", op->arguments, ")"));
        return std::nullopt;
      }
    }
    if (static_cast<int>(call.args.size()) != op->arity) {
      sink_.Error(call.span,
                  absl::StrCat(op->name, " takes ", op->arity,
                               op->arity == 1 ? " argument (" : " arguments (",
                               op->arguments, "), got ", call.args.size()),
                  "");
      return std::nullopt;
    }
    if (op->is_loss && !(top && statement == "loss")) {
      sink_.Error(call.name_span,
                  absl::StrCat(op->name, " computes the loss: it must be the "
                               "outermost op of the statement named 'loss'"),
                  absl::StrCat("e.g. loss = ", op->name, "(", op->arguments,
                               ")"));
      return std::nullopt;
    }
    if (top && statement == "loss" && !op->is_loss) {
      sink_.Error(call.name_span,
                  absl::StrCat("'loss' must be computed by cross_entropy or "
                               "mse, got ",
                               op->name),
                  "e.g. loss = cross_entropy(logits, class)");
      return std::nullopt;
    }
    if (op->has_parameters && ++flattening->parameterised_ops > 1) {
      sink_.Error(call.name_span,
                  absl::StrCat("a statement holds at most one op with "
                               "parameters; this ",
                               op->name, " is the second in '", statement, "'"),
                  absl::StrCat("give it its own statement, e.g. h = ", op->name,
                               "(...), so its parameters get a name"));
      return std::nullopt;
    }

    // Arguments, nested calls first (post-order = execution order).
    std::vector<std::string> inputs;
    int64_t out_features = 0;
    for (size_t i = 0; i < call.args.size(); ++i) {
      if (op->name == std::string("linear") && i == 1) {
        std::optional<int64_t> n = CheckOutFeatures(call.args[i]);
        if (!n) return std::nullopt;
        out_features = *n;
        continue;
      }
      std::optional<std::string> input =
          CheckValueArg(call.args[i], *op, i, flattening);
      if (!input) return std::nullopt;
      inputs.push_back(*input);
    }

    OpSpec spec;
    spec.name = top ? statement
                    : absl::StrCat(statement, ".", flattening->next_index++);
    spec.op = op->name;
    spec.inputs = inputs;
    spec.out_features = out_features;
    spec.location = Location(call.name_span);
    spec.output.name = spec.name;
    spec.output.type = ElementType::kF32;
    spec.output.location = spec.location;
    if (!InferShape(call, *op, statement, &spec)) return std::nullopt;

    Value value{spec.output, top ? Value::Origin::kStatement
                                 : Value::Origin::kNested};
    value.is_loss = op->is_loss;
    value.used = !top;  // nested values feed their parent by construction
    value.span = top ? flattening->statement->name_span : call.name_span;
    values_.emplace(spec.name, value);
    model_.ops.push_back(std::move(spec));
    return model_.ops.back().name;
  }

  const ValueSpec& ValueOf(const std::string& name) {
    return values_.at(name).spec;
  }

  bool InferShape(const ast::Expr& call, const OpInfo& op,
                  const std::string& statement, OpSpec* spec) {
    const std::string name = op.name;
    const ValueSpec& x = ValueOf(spec->inputs[0]);
    if (name == "linear" || name == "layernorm") {
      if (x.shape.empty()) {
        sink_.Error(call.args[0].span,
                    absl::StrCat(name, " needs an input with at least one "
                                       "dimension, got '",
                                 x.name, "' ", TypeText(x)));
        return false;
      }
      const int64_t features = x.shape.back();
      spec->output.shape = x.shape;
      if (name == "linear") {
        spec->output.shape.back() = spec->out_features;
        AddParameter(statement + ".weight", {spec->out_features, features},
                     ParameterSpec::Init::kUniformFanIn, features, spec);
        AddParameter(statement + ".bias", {spec->out_features},
                     ParameterSpec::Init::kUniformFanIn, features, spec);
      } else {
        AddParameter(statement + ".gamma", {features},
                     ParameterSpec::Init::kOnes, 0, spec);
        AddParameter(statement + ".beta", {features},
                     ParameterSpec::Init::kZeros, 0, spec);
      }
      return true;
    }
    if (name == "relu" || name == "gelu" || name == "tanh") {
      spec->output.shape = x.shape;
      return true;
    }
    const ValueSpec& y = ValueOf(spec->inputs[1]);
    if (name == "add" || name == "mse") {
      if (x.shape != y.shape) {
        const bool is_add = name == "add";
        sink_.Error(call.span,
                    absl::StrCat(name, ": shapes differ: ",
                                 is_add ? "'" : "prediction '", x.name, "' is ",
                                 ShapeText(x.shape), " but ",
                                 is_add ? "'" : "target '", y.name, "' is ",
                                 ShapeText(y.shape)),
                    is_add ? "add sums element-wise: both sides need the same "
                             "shape"
                           : "mse compares element-wise: prediction and target "
                             "need the same shape");
        return false;
      }
      if (name == "add") spec->output.shape = x.shape;  // mse: scalar []
      return true;
    }
    // cross_entropy(logits [C], label i32[C]).
    const int64_t classes = y.shape[0];
    if (x.shape.size() != 1) {
      sink_.Error(call.args[0].span,
                  absl::StrCat("cross_entropy logits must have one dimension "
                               "(the classes), got '",
                               x.name, "' ", ShapeText(x.shape)));
      return false;
    }
    if (x.shape[0] != classes) {
      sink_.Error(call.span,
                  absl::StrCat("cross_entropy: logits '", x.name, "' have ",
                               x.shape[0], " classes but label '", y.name,
                               "' has ", classes),
                  absl::StrCat("logits ", ShapeText(x.shape), " vs label i32",
                               ShapeText(y.shape),
                               "; the last linear needs out_features = ",
                               classes));
      return false;
    }
    return true;
  }

  void CheckWhole(bool had_errors) {
    const Span where = block_.name.empty() ? block_.kind_span : block_.name_span;
    if (!saw_input_) {
      sink_.Error(where, "the model has no input",
                  "declare one, e.g. input image: f32[784]");
    } else if (model_.inputs.size() > 1) {
      sink_.Error(values_.at(model_.inputs[1].name).span,
                  "a model takes one input (the data's samples)");
    }
    if (model_.labels.size() > 1) {
      sink_.Error(values_.at(model_.labels[1].name).span,
                  "a model takes at most one label (the data's labels)");
    }
    auto loss = values_.find("loss");
    if (loss == values_.end() &&
        statement_lines_.find("loss") == statement_lines_.end()) {
      sink_.Error(where, "the model has no 'loss' statement",
                  "add one, e.g. loss = cross_entropy(logits, class)");
    }
    model_.loss = "loss";
    // Unused-value warnings would mostly echo the errors' fallout.
    if (had_errors) return;
    // Unused values: harmless but likely a mistake.
    for (const ast::Item& item : block_.items) {
      std::string name;
      if (const auto* a = std::get_if<ast::Assignment>(&item)) name = a->name;
      if (const auto* d = std::get_if<ast::Declaration>(&item)) name = d->name;
      auto it = values_.find(name);
      if (it == values_.end() || it->second.used || name == "loss") continue;
      if (it->second.span.line != 0 &&
          (std::holds_alternative<ast::Assignment>(item)
               ? std::get<ast::Assignment>(item).name_span.line
               : std::get<ast::Declaration>(item).name_span.line) !=
              it->second.span.line) {
        continue;  // a duplicate definition; the first one is reported
      }
      sink_.Warning(it->second.span,
                    absl::StrCat("'", name, "' is never used"),
                    "it does not contribute to the loss");
    }
  }

  const ast::Block& block_;
  DiagnosticSink& sink_;
  ModelSpec model_;
  std::map<std::string, Value> values_;
  std::map<std::string, int> statement_lines_;  // first definition
  std::set<std::string> poisoned_;
  bool saw_input_ = false;
};

}  // namespace

std::optional<ModelSpec> CheckModel(const ast::Block& block,
                                    DiagnosticSink& sink) {
  return ModelChecker(block, sink).Check();
}

}  // namespace trainc::frontend
