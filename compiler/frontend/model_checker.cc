#include "compiler/frontend/model_checker.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/const_eval.h"
#include "compiler/frontend/setting.h"
#include "compiler/ops/op_table.h"
#include "compiler/util/did_you_mean.h"

namespace trainc::frontend {
namespace {

using ops::ArgDef;
using ops::ArgValue;
using ops::ModelOpDef;

// Larger dimensions are certainly typos, and the bound keeps every
// parameter count far from int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 31;
// Block instances nested deeper than this are a block calling itself.
constexpr int kMaxBlockDepth = 32;
constexpr int64_t kMaxRepeat = 10000;

using ops::ShapeText;

std::string TypeText(const ValueSpec& value) {
  return absl::StrCat(value.type == ElementType::kI32 ? "i32" : "f32",
                      ShapeText(value.shape));
}

// Every name a user can call in a statement: ops, then the model's blocks,
// then `repeat`.
std::vector<std::string> Callables(
    const std::map<std::string, const ast::Block*>& blocks) {
  std::vector<std::string> names = ops::ModelOpNames();
  for (const auto& [name, block] : blocks) names.push_back(name);
  names.push_back("repeat");
  return names;
}

struct Value {
  ValueSpec spec;
  enum class Origin { kInput, kLabel, kStatement, kNested } origin;
  bool is_loss = false;
  bool used = false;
  Span span;
};

// Names visible in the model block or in one block instance.
struct Scope {
  std::string prefix;   // "" or "h.3.attn.": prepended to every new name
  std::map<std::string, std::string> values;  // local name -> global value
  std::map<std::string, int> statement_lines;  // first definition
  std::set<std::string> poisoned;
  int depth = 0;
  bool root() const { return depth == 0; }
};

// State while flattening one statement's nested calls.
struct Flattening {
  const ast::Assignment* statement;  // null for a `return`
  std::string global_name;           // the statement's value name
  int next_index = 0;
  int parameterised_ops = 0;
};

class ModelChecker {
 public:
  ModelChecker(const ast::Block& block, const Overrides& overrides,
               DiagnosticSink& sink, Overrides* rest)
      : block_(block), sink_(sink) {
    for (const auto& [raw, value] : overrides) {
      std::string name = raw;
      while (!name.empty() && name[0] == '-') name.erase(0, 1);
      overrides_.emplace_back(name, value);
    }
    rest_ = rest;
  }

  std::optional<ModelSpec> Check() {
    const int errors_before = sink_.error_count();
    model_.name = block_.name;
    if (block_.name.empty()) {
      sink_.Error(block_.kind_span, "the model block needs a name",
                  "e.g. model fashion_mlp { ... }");
    }
    CollectBlocksAndConstants();
    ApplyConstantOverrides();
    Scope root;
    CheckItems(block_, root);
    CheckWhole(root, /*had_errors=*/sink_.error_count() > errors_before);
    if (sink_.error_count() > errors_before) return std::nullopt;
    for (const auto& [name, value] : constants_) {
      model_.constants.emplace_back(name, DescribeConstant(value));
    }
    return model_;
  }

 private:
  SourceLocation Location(const Span& span) const {
    SourceLocation location;
    location.line = span.line;
    location.column = span.column;
    return location;
  }

  // Blocks first (a statement may call a block defined below it), then the
  // model's constants in order (a constant may use those before it).
  void CollectBlocksAndConstants() {
    for (const ast::Item& item : block_.items) {
      if (const auto* nested = std::get_if<ast::NestedBlock>(&item)) {
        const ast::Block& b = *nested->block;
        if (ops::FindModelOp(b.name) != nullptr || b.name == "repeat") {
          sink_.Error(b.name_span,
                      absl::StrCat("block '", b.name,
                                   "' has the name of a built-in op"),
                      "pick another name");
          continue;
        }
        if (!blocks_.emplace(b.name, &b).second) {
          sink_.Error(b.name_span,
                      absl::StrCat("block '", b.name, "' is defined twice"),
                      absl::StrCat("first defined at line ",
                                   blocks_.at(b.name)->name_span.line));
        }
      }
    }
    for (const ast::Item& item : block_.items) {
      const auto* c = std::get_if<ast::Constants>(&item);
      if (c == nullptr) continue;
      for (const ast::Assignment& def : c->definitions) {
        if (constants_.count(def.name)) {
          sink_.Error(def.name_span,
                      absl::StrCat("constant '", def.name, "' is defined twice"));
          continue;
        }
        if (!IsConstantExpr(def.value, &constants_)) {
          sink_.Error(def.value.span,
                      absl::StrCat("constant '", def.name,
                                   "' must be a number, a string or a boolean "
                                   "computed from literals and earlier "
                                   "constants, got ",
                                   DescribeExpr(def.value)),
                      "e.g. const width = 128, hidden = 4 * width");
          continue;
        }
        std::optional<ArgValue> value =
            EvaluateConstant(def.value, sink_, &constants_);
        if (!value) continue;
        constants_.emplace(def.name, *value);
      }
    }
  }

  // `--width 256` replaces `const width = 128` (same kind of value); the
  // flags that name no constant are left for the train block.
  void ApplyConstantOverrides() {
    for (const auto& [name, text] : overrides_) {
      auto it = constants_.find(name);
      if (it == constants_.end()) {
        const std::vector<std::string>& fields = OverridableFields();
        if (constants_.empty() ||
            std::find(fields.begin(), fields.end(), name) != fields.end()) {
          if (rest_ != nullptr) rest_->emplace_back(name, text);  // train's
          continue;
        }
        std::vector<std::string> known = fields;
        for (const auto& [constant, value] : constants_) known.push_back(constant);
        const std::string match = ClosestMatch(name, known);
        sink_.CommandLineError(
            absl::StrCat("--", name, ": unknown flag"),
            match.empty()
                ? absl::StrCat("the model's constants: --",
                               absl::StrJoin(ConstantKeys(), ", --"),
                               "; train { } fields: --",
                               absl::StrJoin(fields, ", --"))
                : absl::StrCat("did you mean '--", match, "'?"));
        continue;
      }
      ArgValue& c = it->second;
      if (std::optional<ArgValue> value = ParseFlagAs(c.kind, text)) {
        c = *std::move(value);
        continue;
      }
      sink_.CommandLineError(
          absl::StrCat("--", name, ": '", text, "' is not ",
                       c.kind == ArgValue::Kind::kInt     ? "an integer"
                       : c.kind == ArgValue::Kind::kFloat ? "a number"
                                                          : "true or false"),
          absl::StrCat("the model's constant ", name, " is ",
                       DescribeConstant(c)));
    }
  }

  // The model block's items (root) or one block instance's.
  // Returns the value of the instance's `return`, if any.
  std::optional<std::string> CheckItems(const ast::Block& block, Scope& scope) {
    for (const ast::Item& item : block.items) {
      if (const auto* a = std::get_if<ast::Assignment>(&item)) {
        scope.statement_lines.emplace(a->name, a->name_span.line);
      }
    }
    std::optional<std::string> result;
    bool returned = false;
    for (const ast::Item& item : block.items) {
      std::string name;
      if (const auto* decl = std::get_if<ast::Declaration>(&item)) {
        name = decl->name;
        if (!scope.root()) {
          sink_.Error(decl->kind_span,
                      absl::StrCat(decl->kind, " is declared in the model "
                                               "block, not inside a block"),
                      "pass values to a block as its arguments");
          continue;
        }
        if (decl->kind != "label") saw_input_ = true;
        CheckDeclaration(*decl, scope);
      } else if (const auto* a = std::get_if<ast::Assignment>(&item)) {
        name = a->name;
        if (returned) {
          sink_.Error(a->name_span, "statements after return are never run",
                      "return ends the block");
        }
        CheckStatement(*a, scope);
      } else if (const auto* r = std::get_if<ast::Return>(&item)) {
        if (returned) {
          sink_.Error(r->kind_span, "a block returns once");
          continue;
        }
        returned = true;
        Flattening flattening{nullptr, scope.prefix + "return"};
        result = CheckValueExpr(r->value, scope, &flattening);
        continue;
      } else if (const auto* c = std::get_if<ast::Constants>(&item)) {
        if (!scope.root()) {
          sink_.Error(c->kind_span,
                      "constants are defined in the model block, not inside "
                      "a block");
        }
        continue;
      } else {
        continue;  // nested blocks: collected up front
      }
      // A name whose definition failed is poisoned: its uses fail quietly
      // instead of cascading into "undefined name" errors.
      if (scope.values.count(name) == 0) scope.poisoned.insert(name);
    }
    if (!scope.root() && !returned) {
      sink_.Error(block.name_span,
                  absl::StrCat("block '", block.name, "' has no return"),
                  "end it with return <value>");
    }
    return result;
  }

  // False (and reported) when `name` cannot be defined in `scope`.
  bool CheckNewName(const std::string& name, const Span& span, Scope& scope) {
    if (constants_.count(name)) {
      sink_.Error(span,
                  absl::StrCat("'", name, "' is already defined as a constant"),
                  "each name is defined once; pick another name");
      return false;
    }
    auto it = scope.values.find(name);
    if (it == scope.values.end()) return true;
    const Value& existing = values_.at(it->second);
    const char* what = existing.origin == Value::Origin::kInput   ? "an input"
                       : existing.origin == Value::Origin::kLabel ? "a label"
                                                                  : "a value";
    sink_.Error(span,
                absl::StrCat("'", name, "' is already defined as ", what,
                             " at line ", existing.span.line),
                "each name is defined once; pick another name");
    return false;
  }

  void CheckDeclaration(const ast::Declaration& decl, Scope& scope) {
    const bool is_input = decl.kind == "input";
    const bool is_label = decl.kind == "label";
    if (!is_input && !is_label) {
      sink_.Error(decl.kind_span,
                  absl::StrCat("unknown declaration '", decl.kind, "'"),
                  SuggestionHint(decl.kind, {"input", "label"},
                                 "declarations"));
      return;
    }
    if (!CheckNewName(decl.name, decl.name_span, scope)) return;
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
    for (const ast::Expr& dim : decl.dims) {
      std::optional<int64_t> d = CheckDimension(dim, "dimension");
      if (!d) {
        ok = false;
        continue;
      }
      spec.shape.push_back(*d);
    }
    if (!ok) return;
    Value value{spec, is_input ? Value::Origin::kInput : Value::Origin::kLabel};
    value.span = decl.name_span;
    values_.emplace(decl.name, value);
    scope.values.emplace(decl.name, decl.name);
    (is_input ? model_.inputs : model_.labels).push_back(spec);
  }

  // A positive integer constant (a dimension, out_features, heads...).
  std::optional<int64_t> CheckDimension(const ast::Expr& expr,
                                        const std::string& what) {
    if (!IsConstantExpr(expr, &constants_)) {
      sink_.Error(expr.span,
                  absl::StrCat(what, " must be a positive integer constant, "
                                     "got ",
                               DescribeExpr(expr)),
                  constants_.empty() ? "" : "constants in scope: " + ConstantNames());
      return std::nullopt;
    }
    std::optional<ArgValue> value = EvaluateConstant(expr, sink_, &constants_);
    if (!value) return std::nullopt;
    if (ReportTooLarge(*value, what, expr.span)) return std::nullopt;
    if (value->kind != ArgValue::Kind::kInt || value->i <= 0) {
      sink_.Error(expr.span,
                  absl::StrCat(what, " must be a positive integer, got ",
                               DescribeConstant(*value)));
      return std::nullopt;
    }
    return value->i;
  }

  // Reports an integer above kMaxDim where a dimension or count is wanted.
  bool ReportTooLarge(const ArgValue& value, const std::string& what,
                      const Span& span) {
    if (value.kind != ArgValue::Kind::kInt || value.i <= kMaxDim) return false;
    sink_.Error(span,
                absl::StrCat(what, " is too large: ", value.i,
                             " (the largest dimension is ", kMaxDim, ")"),
                overrides_.empty()
                    ? ""
                    : "a constant given on the command line feeds into it");
    return true;
  }

  std::vector<std::string> ConstantKeys() const {
    std::vector<std::string> names;
    for (const auto& [name, value] : constants_) names.push_back(name);
    return names;
  }

  std::string ConstantNames() const {
    return absl::StrJoin(ConstantKeys(), ", ");
  }

  void CheckStatement(const ast::Assignment& statement, Scope& scope) {
    if (!CheckNewName(statement.name, statement.name_span, scope)) return;
    const ast::Expr& e = statement.value;
    const bool computes = e.kind == ast::Expr::Kind::kCall ||
                          (e.kind == ast::Expr::Kind::kBinary &&
                           ops::FindInfixOp(e.text) != nullptr &&
                           !IsConstantExpr(e, &constants_));
    if (!computes) {
      sink_.Error(e.span,
                  absl::StrCat("a model statement must call an op, got ",
                               DescribeExpr(e)),
                  IsConstantExpr(e, &constants_)
                      ? absl::StrCat("a named number is a constant: const ",
                                     statement.name, " = ...")
                      : absl::StrCat("e.g. ", statement.name,
                                     " = relu(x); ops: ",
                                     absl::StrJoin(ops::ModelOpNames(), ", ")));
      return;
    }
    Flattening flattening{&statement, scope.prefix + statement.name};
    std::optional<std::string> value =
        CheckValueExpr(e, scope, &flattening, /*top=*/true);
    if (!value) return;
    scope.values.emplace(statement.name, *value);
    // A root statement's warnings point at its name (a block call's value
    // is the block's return, defined elsewhere).
    if (scope.root()) values_.at(*value).span = statement.name_span;
  }

  // A tensor-valued expression: a name, an op or block call, `a + b`.
  // Returns the global name of its value.
  std::optional<std::string> CheckValueExpr(const ast::Expr& e, Scope& scope,
                                            Flattening* flattening,
                                            bool top = false) {
    switch (e.kind) {
      case ast::Expr::Kind::kName:
        return LookupValue(e, scope, flattening);
      case ast::Expr::Kind::kCall:
        return CheckCall(e, scope, flattening, top);
      case ast::Expr::Kind::kBinary:
        if (const ops::ModelOpDef* def = ops::FindInfixOp(e.text)) {
          return CheckInfix(e, *def, scope, flattening, top);
        }
        [[fallthrough]];
      default:
        sink_.Error(e.span,
                    absl::StrCat("expected a tensor (a name, an op call or "
                                 "a + b), got ",
                                 DescribeExpr(e)));
        return std::nullopt;
    }
  }

  std::optional<std::string> LookupValue(const ast::Expr& arg, Scope& scope,
                                         Flattening* flattening) {
    auto it = scope.values.find(arg.text);
    if (it != scope.values.end()) {
      Value& value = values_.at(it->second);
      value.used = true;
      return it->second;
    }
    if (scope.poisoned.count(arg.text) > 0) return std::nullopt;
    if (constants_.count(arg.text)) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text, "' is a constant, not a tensor"));
      return std::nullopt;
    }
    auto later = scope.statement_lines.find(arg.text);
    if (flattening->statement != nullptr &&
        arg.text == flattening->statement->name) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text, "' is used in its own definition"));
    } else if (later != scope.statement_lines.end()) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text,
                               "' is used before its definition at line ",
                               later->second),
                  "statements run in order; move the definition up");
    } else {
      std::vector<std::string> known;
      for (const auto& [name, global] : scope.values) known.push_back(name);
      const std::string match = ClosestMatch(arg.text, known);
      sink_.Error(arg.span, absl::StrCat("undefined name '", arg.text, "'"),
                  match.empty() ? (scope.root() ? ""
                                                : "a block sees only its "
                                                  "arguments and its own "
                                                  "statements")
                                : absl::StrCat("did you mean '", match, "'?"));
    }
    return std::nullopt;
  }

  std::string NewValueName(Flattening* f, bool top) {
    return top ? f->global_name
               : absl::StrCat(f->global_name, ".", f->next_index++);
  }

  // `a + b`: the model op written with that infix, on two tensors.
  std::optional<std::string> CheckInfix(const ast::Expr& e, const ops::ModelOpDef& def,
                                        Scope& scope, Flattening* flattening, bool top) {
    std::vector<std::string> inputs;
    for (const ast::Expr& side : e.args) {
      if (IsConstantExpr(side, &constants_)) {
        sink_.Error(side.span,
                    absl::StrCat("cannot ", def.name, " ", DescribeExpr(side),
                                 " and a tensor"),
                    absl::StrCat(def.infix, " takes two tensors of the same shape"));
        return std::nullopt;
      }
      std::optional<std::string> v = CheckValueExpr(side, scope, flattening);
      if (!v) return std::nullopt;
      if (!CheckTensorUse(side, *v, def, ArgDef::Kind::kValue)) {
        return std::nullopt;
      }
      inputs.push_back(*v);
    }
    ops::OpCall call;
    for (const std::string& v : inputs) {
      call.values.push_back(values_.at(v).spec.shape);
      call.value_names.push_back(v);
    }
    return Define(e, e.name_span, def, call, inputs, {},
                  flattening, top);
  }

  // The checks every tensor argument gets: not the loss, the right element
  // type.
  bool CheckTensorUse(const ast::Expr& arg, const std::string& global,
                      const ModelOpDef& op, ArgDef::Kind kind) {
    const Value& value = values_.at(global);
    if (value.is_loss) {
      sink_.Error(arg.span,
                  absl::StrCat("'", arg.text,
                               "' is the scalar loss; it cannot feed another op"));
      return false;
    }
    const bool is_i32 = value.spec.type == ElementType::kI32;
    if (is_i32 && kind != ArgDef::Kind::kIndices) {
      sink_.Error(arg.span,
                  absl::StrCat("'", DescribeName(arg), "' is ", TypeText(value.spec),
                               " (indices); ", op.name, " takes an f32 tensor here"),
                  value.origin == Value::Origin::kLabel
                      ? absl::StrCat("only cross_entropy's second argument "
                                     "takes a class label, e.g. loss = "
                                     "cross_entropy(logits, ",
                                     DescribeName(arg), ")")
                      : "i32 token ids go through embedding(ids, vocab, dim)");
      return false;
    }
    if (!is_i32 && kind == ArgDef::Kind::kIndices) {
      sink_.Error(arg.span,
                  absl::StrCat(op.name, " takes i32 indices here, got '",
                               DescribeName(arg), "' ", TypeText(value.spec)),
                  op.op == ops::ModelOp::kCrossEntropy
                      ? "declare the label as e.g. label class: i32[10]"
                      : "declare token ids as e.g. input tokens: i32[128]");
      return false;
    }
    return true;
  }

  static std::string DescribeName(const ast::Expr& arg) {
    return arg.kind == ast::Expr::Kind::kName ? arg.text : arg.text + "(...)";
  }

  std::optional<std::string> CheckCall(const ast::Expr& call, Scope& scope,
                                       Flattening* flattening, bool top) {
    if (call.text == "repeat") return CheckRepeat(call, scope, flattening, top);
    if (auto b = blocks_.find(call.text); b != blocks_.end()) {
      return CheckBlockCall(call, *b->second, scope, flattening, top);
    }
    const ModelOpDef* op = ops::FindModelOp(call.text);
    if (op == nullptr) {
      sink_.Error(call.name_span, absl::StrCat("unknown op '", call.text, "'"),
                  SuggestionHint(call.text, Callables(blocks_), "ops"));
      return std::nullopt;
    }
    if (!CheckLossPlacement(call, *op, scope, flattening, top)) return std::nullopt;
    std::optional<std::vector<const ast::Expr*>> bound = BindArguments(call, *op);
    if (!bound) return std::nullopt;
    std::optional<CheckedArgs> args = CheckArguments(call, *op, *bound, scope, flattening);
    if (!args) return std::nullopt;
    if (op->op == ops::ModelOp::kCrossEntropy &&
        !MatchLabel(call, args->tensor_args, args->inputs, &args->call)) {
      return std::nullopt;
    }
    return Define(call, call.name_span, *op, args->call, args->inputs, args->shared,
                  flattening, top, &*bound);
  }

  // A loss op is the outermost op of the statement named 'loss', and that
  // statement's outermost op is a loss.
  bool CheckLossPlacement(const ast::Expr& call, const ModelOpDef& op, const Scope& scope,
                          const Flattening* flattening, bool top) {
    const std::string statement =
        flattening->statement ? flattening->statement->name : "return";
    if (op.is_loss && !(top && statement == "loss" && scope.root())) {
      sink_.Error(call.name_span,
                  absl::StrCat(op.name, " computes the loss: it must be the "
                               "outermost op of the statement named 'loss'"),
                  absl::StrCat("e.g. loss = ", op.Signature()));
      return false;
    }
    if (top && statement == "loss" && scope.root() && !op.is_loss) {
      sink_.Error(call.name_span,
                  absl::StrCat("'loss' must be computed by cross_entropy or "
                               "mse, got ",
                               op.name),
                  "e.g. loss = cross_entropy(logits, class)");
      return false;
    }
    return true;
  }

  // The call's arguments matched to the op's, positional first, then by
  // name (nullptr: not given); nullopt after an error, or when a required
  // one is missing.
  std::optional<std::vector<const ast::Expr*>> BindArguments(const ast::Expr& call,
                                                             const ModelOpDef& op) {
    std::vector<const ast::Expr*> bound(op.args.size(), nullptr);
    size_t positional = 0;
    for (size_t i = 0; i < call.args.size(); ++i) {
      const std::string& name = call.arg_names[i];
      int index;
      if (name.empty()) {
        if (positional != i) {
          sink_.Error(call.args[i].span,
                      "a positional argument cannot follow a named one",
                      op.Signature());
          return std::nullopt;
        }
        index = static_cast<int>(positional++);
        if (index >= static_cast<int>(op.args.size()) ||
            op.args[index].kind == ArgDef::Kind::kParameter) {
          sink_.Error(call.span, ArityMessage(op, call.args.size()), "");
          return std::nullopt;
        }
      } else {
        index = op.ArgIndex(name);
        if (index < 0) {
          std::vector<std::string> names;
          for (const ArgDef& a : op.args) names.push_back(a.name);
          sink_.Error(call.arg_name_spans[i],
                      absl::StrCat(op.name, " has no argument '", name, "'"),
                      absl::StrCat(SuggestionHint(name, names, "arguments"),
                                   "; ", op.Signature()));
          return std::nullopt;
        }
        if (bound[index] != nullptr) {
          sink_.Error(call.arg_name_spans[i],
                      absl::StrCat("argument '", name, "' is given twice"));
          return std::nullopt;
        }
      }
      bound[index] = &call.args[i];
    }
    for (size_t i = 0; i < op.args.size(); ++i) {
      const ArgDef& def = op.args[i];
      if (bound[i] == nullptr && def.default_value == nullptr &&
          def.kind != ArgDef::Kind::kParameter) {
        sink_.Error(call.span, ArityMessage(op, call.args.size()), "");
        return std::nullopt;
      }
    }
    return bound;
  }

  // A call's checked arguments: what its rule reads, the values it reads
  // (and the expressions naming them), the parameters it was passed.
  struct CheckedArgs {
    ops::OpCall call;
    std::vector<std::string> inputs;
    std::vector<const ast::Expr*> tensor_args;
    std::map<std::string, std::string> shared;  // arg -> parameter
  };

  // Tensor arguments first, nested calls in order (post-order = execution
  // order); then constants and parameter references.
  std::optional<CheckedArgs> CheckArguments(const ast::Expr& call, const ModelOpDef& op,
                                            const std::vector<const ast::Expr*>& bound,
                                            Scope& scope, Flattening* flattening) {
    CheckedArgs out;
    for (size_t i = 0; i < op.args.size(); ++i) {
      const ArgDef& def = op.args[i];
      const ast::Expr* arg = bound[i];
      switch (def.kind) {
        case ArgDef::Kind::kValue:
        case ArgDef::Kind::kIndices: {
          std::optional<std::string> v = CheckTensorArg(*arg, i, op, def, scope, flattening);
          if (!v) return std::nullopt;
          out.inputs.push_back(*v);
          out.tensor_args.push_back(arg);
          out.call.values.push_back(values_.at(*v).spec.shape);
          out.call.value_names.push_back(*v);
          break;
        }
        case ArgDef::Kind::kParameter: {
          if (arg == nullptr) break;
          std::optional<std::string> p = LookupParameter(*arg, scope, op, def);
          if (!p) return std::nullopt;
          out.shared[def.name] = *p;
          out.call.shared_parameters[def.name] = model_.parameters[parameters_.at(*p)].shape;
          break;
        }
        default: {
          std::optional<ArgValue> c =
              CheckConstantArg(arg, def, op, arg != nullptr ? arg->span : call.span);
          if (!c) return std::nullopt;
          out.call.constants[def.name] = *c;
        }
      }
    }
    return out;
  }

  // Argument `i`, a tensor: a value expression, checked; its value's name.
  std::optional<std::string> CheckTensorArg(const ast::Expr& arg, size_t i,
                                            const ModelOpDef& op, const ArgDef& def,
                                            Scope& scope, Flattening* flattening) {
    if (IsConstantExpr(arg, &constants_) ||
        (arg.kind != ast::Expr::Kind::kName && arg.kind != ast::Expr::Kind::kCall &&
         arg.kind != ast::Expr::Kind::kBinary)) {
      sink_.Error(arg.span,
                  absl::StrCat("argument ", i + 1, " of ", op.name,
                               " must be a value (a name or an op "
                               "call), got ",
                               DescribeExpr(arg)),
                  op.Signature());
      return std::nullopt;
    }
    std::optional<std::string> v = CheckValueExpr(arg, scope, flattening);
    if (!v || !CheckTensorUse(arg, *v, op, def.kind)) return std::nullopt;
    return v;
  }

  static std::string ArityMessage(const ModelOpDef& op, size_t got) {
    size_t required = 0;
    for (const ArgDef& a : op.args) {
      required += a.default_value == nullptr &&
                  a.kind != ArgDef::Kind::kParameter;
    }
    std::vector<std::string> names;
    for (const ArgDef& a : op.args) {
      if (a.default_value == nullptr && a.kind != ArgDef::Kind::kParameter) {
        names.push_back(a.name);
      }
    }
    return absl::StrCat(op.name, " takes ", required,
                        required == 1 ? " argument (" : " arguments (",
                        absl::StrJoin(names, ", "), "), got ", got,
                        required == op.args.size()
                            ? ""
                            : absl::StrCat("; in full: ", op.Signature()));
  }

  std::optional<ArgValue> CheckConstantArg(const ast::Expr* arg,
                                           const ArgDef& def,
                                           const ModelOpDef& op,
                                           const Span& span) {
    std::optional<ArgValue> value;
    std::string what = absl::StrCat(def.name, " of ", op.name);
    if (arg != nullptr && def.kind == ArgDef::Kind::kInit) return CheckInit(*arg, what);
    if (arg == nullptr) {
      std::optional<ArgValue> d = ops::DefaultValue(def);
      if (d) return d;
      sink_.Error(span, absl::StrCat(what, " is required"), op.Signature());
      return std::nullopt;
    } else {
      if (!IsConstantExpr(*arg, &constants_)) {
        sink_.Error(arg->span,
                    absl::StrCat(what, " must be a ",
                                 def.kind == ArgDef::Kind::kInt
                                     ? "positive integer"
                                 : def.kind == ArgDef::Kind::kCount
                                     ? "non-negative integer"
                                     : def.kind == ArgDef::Kind::kFloat
                                           ? "number"
                                           : def.kind == ArgDef::Kind::kBool
                                                 ? "boolean"
                                                 : "string",
                                 " constant, got ", DescribeExpr(*arg)),
                    absl::StrCat("e.g. ", op.Signature()));
        return std::nullopt;
      }
      value = EvaluateConstant(*arg, sink_, &constants_);
      if (!value) return std::nullopt;
    }
    switch (def.kind) {
      case ArgDef::Kind::kInt:
      case ArgDef::Kind::kCount: {
        const int64_t least = def.kind == ArgDef::Kind::kInt ? 1 : 0;
        if (ReportTooLarge(*value, what, arg ? arg->span : span)) {
          return std::nullopt;
        }
        if (value->kind != ArgValue::Kind::kInt || value->i < least) {
          sink_.Error(arg ? arg->span : span,
                      absl::StrCat(what, " must be a ",
                                   least ? "positive" : "non-negative",
                                   " integer, got ", DescribeConstant(*value)),
                      absl::StrCat("e.g. ", op.Signature()));
          return std::nullopt;
        }
        return value;
      }
      case ArgDef::Kind::kFloat:
        if (!value->is_number()) break;
        return ArgValue::Float(value->AsDouble());  // 2 is taken as 2.0
      case ArgDef::Kind::kBool:
        if (value->kind != ArgValue::Kind::kBool) break;
        return value;
      case ArgDef::Kind::kString:
        if (value->kind != ArgValue::Kind::kString) break;
        return value;
      default:
        break;
    }
    sink_.Error(arg ? arg->span : span,
                absl::StrCat(what, " must be a ",
                             def.kind == ArgDef::Kind::kFloat  ? "number"
                             : def.kind == ArgDef::Kind::kBool ? "boolean"
                                                               : "string",
                             ", got ", DescribeConstant(*value)),
                absl::StrCat("e.g. ", op.Signature()));
    return std::nullopt;
  }

  // `init = normal(STD)`: STD, a constant > 0.
  std::optional<ArgValue> CheckInit(const ast::Expr& arg, const std::string& what) {
    const char* hint = "e.g. init = normal(0.02), or normal(0.02 / sqrt(2 * layers)) for "
                       "GPT-2's residual projections";
    if (arg.kind != ast::Expr::Kind::kCall || arg.text != "normal" || arg.args.size() != 1 ||
        !arg.arg_names[0].empty()) {
      sink_.Error(arg.span, absl::StrCat(what, " must be normal(STD), got ", DescribeExpr(arg)),
                  hint);
      return std::nullopt;
    }
    const ast::Expr& std_dev = arg.args[0];
    if (!IsConstantExpr(std_dev, &constants_)) {
      sink_.Error(std_dev.span,
                  absl::StrCat("normal's std must be a number constant, got ",
                               DescribeExpr(std_dev)),
                  hint);
      return std::nullopt;
    }
    std::optional<ArgValue> value = EvaluateConstant(std_dev, sink_, &constants_);
    if (!value) return std::nullopt;
    if (!value->is_number() || !(value->AsDouble() > 0)) {
      sink_.Error(std_dev.span,
                  absl::StrCat("normal's std must be > 0, got ", DescribeConstant(*value)), hint);
      return std::nullopt;
    }
    return ArgValue::Float(value->AsDouble());
  }

  // `weight = wte.weight`: a parameter created by an earlier statement,
  // named relative to this scope first, then from the model's root.
  std::optional<std::string> LookupParameter(const ast::Expr& arg,
                                             const Scope& scope,
                                             const ModelOpDef& op,
                                             const ArgDef& def) {
    if (arg.kind == ast::Expr::Kind::kName) {
      for (const std::string& name : {scope.prefix + arg.text, arg.text}) {
        if (parameters_.count(name)) return name;
      }
    }
    std::vector<std::string> known;
    for (const auto& [name, p] : parameters_) known.push_back(name);
    const std::string match =
        arg.kind == ast::Expr::Kind::kName ? ClosestMatch(arg.text, known) : "";
    sink_.Error(arg.span,
                absl::StrCat(def.name, " of ", op.name,
                             " must name an existing parameter, got ",
                             DescribeExpr(arg)),
                match.empty()
                    ? absl::StrCat("e.g. ", def.name,
                                   " = wte.weight (a parameter defined above)")
                    : absl::StrCat("did you mean '", match, "'?"));
    return std::nullopt;
  }

  // cross_entropy(logits [.., C], label): the label holds one class index
  // per row of logits: i32[..] (tokens) or, for 1-D logits, the v1 form
  // i32[C] (the class count).
  bool MatchLabel(const ast::Expr& call,
                  const std::vector<const ast::Expr*>& args,
                  const std::vector<std::string>& inputs, ops::OpCall* op_call) {
    Value& label = values_.at(inputs[1]);
    const ValueSpec& logits = values_.at(inputs[0]).spec;
    const std::vector<int64_t>& x = logits.shape;
    const std::vector<int64_t>& y = label.spec.shape;
    if (label.origin != Value::Origin::kLabel) {
      sink_.Error(args[1]->span,
                  absl::StrCat("cross_entropy's second argument must be a "
                               "declared label, got '",
                               args[1]->text, "'"),
                  "declare it as e.g. label class: i32[10]");
      return false;
    }
    if (x.size() == 1) {
      if (y.size() != 1) {
        sink_.Error(call.span,
                    absl::StrCat("cross_entropy: logits '", logits.name,
                                 "' are ", ShapeText(x), " but label '",
                                 label.spec.name, "' is i32", ShapeText(y)),
                    "with 1-D logits the label is one class index, declared "
                    "with the class count: i32[C]");
        return false;
      }
      if (x[0] != y[0]) {
        sink_.Error(call.span,
                    absl::StrCat("cross_entropy: logits '", logits.name,
                                 "' have ", x[0], " classes but label '",
                                 label.spec.name, "' has ", y[0]),
                    absl::StrCat("logits ", ShapeText(x), " vs label i32",
                                 ShapeText(y),
                                 "; the last linear needs out_features = ",
                                 y[0]));
        return false;
      }
      MarkClassIndex(label.spec.name);
      op_call->values[1] = {};
      return true;
    }
    const std::vector<int64_t> rows(x.begin(), x.end() - 1);
    if (rows != y) {
      sink_.Error(call.span,
                  absl::StrCat("cross_entropy: logits '", logits.name, "' are ",
                               ShapeText(x), " but label '", label.spec.name,
                               "' is i32", ShapeText(y)),
                  absl::StrCat("the label holds one class index per row of "
                               "logits: i32",
                               ShapeText(rows)));
      return false;
    }
    return true;
  }

  void MarkClassIndex(const std::string& label) {
    values_.at(label).spec.class_index = true;
    for (ValueSpec& l : model_.labels) {
      if (l.name == label) l.class_index = true;
    }
  }

  // A statement holds at most one op that creates parameters (they are
  // named after the statement): counts `op` when it does.
  bool CountParameterisedOp(const ModelOpDef& op, const ops::Lowering& lowering,
                            const Span& name_span, Flattening* flattening) {
    bool creates_parameters = false;
    for (const ops::ParamSlot& slot : lowering.params) {
      creates_parameters |= slot.shared_arg.empty();
    }
    if (creates_parameters && ++flattening->parameterised_ops > 1) {
      sink_.Error(name_span,
                  absl::StrCat("a statement holds at most one op with "
                               "parameters; this ",
                               op.name, " is the second in '",
                               flattening->global_name, "'"),
                  absl::StrCat("give it its own statement, e.g. h = ", op.name,
                               "(...), so its parameters get a name"));
      return false;
    }
    return true;
  }

  // The parameters of `spec`, one per slot of the lowering: a shared one
  // by its name in `shared`, else a new one, "<statement>.<suffix>", added
  // to the model and its parameter count.
  bool AddParameters(const ops::Lowering& lowering,
                     const std::map<std::string, std::string>& shared,
                     const Span& name_span, const Flattening& flattening, OpSpec* spec) {
    for (const ops::ParamSlot& slot : lowering.params) {
      if (!slot.shared_arg.empty()) {
        spec->parameters.push_back(shared.at(slot.shared_arg));
        continue;
      }
      const std::string name =
          absl::StrCat(flattening.global_name, ".", slot.suffix);
      if (parameters_.count(name)) {
        sink_.Error(name_span,
                    absl::StrCat("parameter '", name, "' is created twice"));
        return false;
      }
      ParameterSpec parameter;
      parameter.name = name;
      parameter.shape = slot.shape;
      parameter.init = slot.init;
      parameter.init_scale = slot.init_scale;
      int64_t count = 1;
      for (int64_t d : parameter.shape) {
        if (__builtin_mul_overflow(count, d, &count)) count = INT64_MAX;
      }
      if (__builtin_add_overflow(model_.parameter_count, count,
                                 &model_.parameter_count)) {
        model_.parameter_count = INT64_MAX;
      }
      spec->parameters.push_back(name);
      parameters_[name] = model_.parameters.size();
      model_.parameters.push_back(std::move(parameter));
    }
    return true;
  }

  // Applies the op table's rule to a checked call and defines its value.
  std::optional<std::string> Define(
      const ast::Expr& call, const Span& name_span, const ModelOpDef& op,
      const ops::OpCall& op_call, const std::vector<std::string>& inputs,
      const std::map<std::string, std::string>& shared, Flattening* flattening,
      bool top, const std::vector<const ast::Expr*>* bound = nullptr) {
    ops::OpCall named_call = op_call;
    named_call.name = top ? flattening->global_name
                          : absl::StrCat(flattening->global_name, ".",
                                         flattening->next_index);
    auto result = op.rule(named_call);
    if (auto* e = std::get_if<ops::ShapeError>(&result)) {
      Span span = call.span;
      if (bound != nullptr && e->arg >= 0 && (*bound)[e->arg] != nullptr) {
        span = (*bound)[e->arg]->span;
      }
      sink_.Error(span, e->message, e->hint);
      return std::nullopt;
    }
    const ops::Lowering& lowering = std::get<ops::Lowering>(result);
    if (!CountParameterisedOp(op, lowering, name_span, flattening)) return std::nullopt;
    OpSpec spec;
    spec.name = NewValueName(flattening, top);
    spec.op = op.op;
    spec.inputs = inputs;
    for (const auto& [name, value] : op_call.constants) spec.args[name] = value;
    spec.shared_parameters = shared;
    spec.location = Location(name_span);
    spec.output.name = spec.name;
    spec.output.type = ElementType::kF32;
    spec.output.shape = lowering.shape;
    spec.output.location = spec.location;
    if (!AddParameters(lowering, shared, name_span, *flattening, &spec)) return std::nullopt;
    if (op.is_loss) model_.loss_terms = lowering.loss_terms;
    if (values_.count(spec.name)) {
      sink_.Error(name_span,
                  absl::StrCat("'", spec.name, "' is defined twice"));
      return std::nullopt;
    }
    Value value{spec.output, top ? Value::Origin::kStatement
                                 : Value::Origin::kNested};
    value.is_loss = op.is_loss;
    value.used = !top;  // nested values feed their parent by construction
    value.span = name_span;
    values_.emplace(spec.name, value);
    model_.ops.push_back(std::move(spec));
    return model_.ops.back().name;
  }

  // `attn = attention(ln_1)`: the block's statements, named
  // "<statement>.<name>"; the call's value is what the block returns.
  std::optional<std::string> CheckBlockCall(const ast::Expr& call,
                                            const ast::Block& block,
                                            Scope& scope,
                                            Flattening* flattening, bool top) {
    if (call.args.size() != block.params.size()) {
      sink_.Error(call.span,
                  absl::StrCat("block ", block.name, " takes ",
                               block.params.size(), " argument",
                               block.params.size() == 1 ? "" : "s", " (",
                               absl::StrJoin(block.params, ", "), "), got ",
                               call.args.size()));
      return std::nullopt;
    }
    std::vector<std::string> args;
    for (size_t i = 0; i < call.args.size(); ++i) {
      if (!call.arg_names[i].empty()) {
        sink_.Error(call.arg_name_spans[i],
                    "block arguments are positional");
        return std::nullopt;
      }
      std::optional<std::string> v =
          CheckValueExpr(call.args[i], scope, flattening);
      if (!v) return std::nullopt;
      args.push_back(*v);
    }
    if (++flattening->parameterised_ops > 1) {
      sink_.Error(call.name_span,
                  absl::StrCat("a statement holds at most one op or block "
                               "with parameters; this ",
                               block.name, " is the second in '",
                               flattening->global_name, "'"),
                  "give it its own statement so its parameters get a name");
      return std::nullopt;
    }
    const std::string path = NewValueName(flattening, top);
    return Instantiate(call, block, args, path, scope.depth + 1);
  }

  std::optional<std::string> Instantiate(const ast::Expr& call,
                                         const ast::Block& block,
                                         const std::vector<std::string>& args,
                                         const std::string& path, int depth) {
    if (depth > kMaxBlockDepth) {
      sink_.Error(call.name_span,
                  absl::StrCat("blocks nested more than ", kMaxBlockDepth,
                               " deep: does block ", block.name,
                               " call itself?"));
      return std::nullopt;
    }
    Scope inner;
    inner.prefix = path + ".";
    inner.depth = depth;
    for (size_t i = 0; i < args.size(); ++i) {
      inner.values.emplace(block.params[i], args[i]);
    }
    const int errors_before = sink_.error_count();
    std::optional<std::string> result = CheckItems(block, inner);
    if (sink_.error_count() > errors_before) return std::nullopt;
    return result;
  }

  // `h = repeat(layer, 12, x)`: layer applied 12 times in a chain, instance
  // i named "h.<i>" (a PyTorch nn.ModuleList).
  std::optional<std::string> CheckRepeat(const ast::Expr& call, Scope& scope,
                                         Flattening* flattening, bool top) {
    const std::string usage = "repeat(block, times, x, recompute = false), e.g. h = "
                              "repeat(layer, 4, x)";
    // recompute = true|false, named, after the three positional arguments.
    bool recompute = false;
    if (call.args.size() == 4 && call.arg_names[3] == "recompute") {
      const ast::Expr& flag = call.args[3];
      if (flag.kind != ast::Expr::Kind::kBool) {
        sink_.Error(flag.span,
                    absl::StrCat("recompute must be true or false, got ", DescribeExpr(flag)),
                    usage);
        return std::nullopt;
      }
      recompute = flag.bool_value;
    } else if (call.args.size() == 4 && !call.arg_names[3].empty()) {
      sink_.Error(call.arg_name_spans[3],
                  absl::StrCat("repeat has no argument '", call.arg_names[3], "'"), usage);
      return std::nullopt;
    }
    if (call.args.size() != 3 && !(call.args.size() == 4 && !call.arg_names[3].empty())) {
      sink_.Error(call.span,
                  absl::StrCat("repeat takes 3 arguments (block, times, x), "
                               "got ",
                               call.args.size()),
                  usage);
      return std::nullopt;
    }
    const ast::Expr& which = call.args[0];
    auto b = which.kind == ast::Expr::Kind::kName ? blocks_.find(which.text)
                                                  : blocks_.end();
    if (b == blocks_.end()) {
      std::vector<std::string> names;
      for (const auto& [name, block] : blocks_) names.push_back(name);
      sink_.Error(which.span,
                  absl::StrCat("repeat's first argument must name a block, "
                               "got ",
                               DescribeExpr(which)),
                  names.empty() ? "define one: block layer(x) { ... }"
                                : SuggestionHint(which.text, names, "blocks"));
      return std::nullopt;
    }
    const ast::Block& block = *b->second;
    if (block.params.size() != 1) {
      sink_.Error(which.span,
                  absl::StrCat("repeat chains a block of one argument; ",
                               block.name, " takes ", block.params.size()));
      return std::nullopt;
    }
    std::optional<int64_t> times = CheckDimension(call.args[1], "repeat's count");
    if (!times) return std::nullopt;
    if (*times > kMaxRepeat) {
      sink_.Error(call.args[1].span,
                  absl::StrCat("repeat's count is at most ", kMaxRepeat));
      return std::nullopt;
    }
    std::optional<std::string> x =
        CheckValueExpr(call.args[2], scope, flattening);
    if (!x) return std::nullopt;
    if (++flattening->parameterised_ops > 1) {
      sink_.Error(call.name_span,
                  "a statement holds at most one op or block with parameters",
                  "give repeat its own statement");
      return std::nullopt;
    }
    const std::string path = NewValueName(flattening, top);
    model_.repeat_locations[path] = Location(call.name_span);
    for (int64_t i = 0; i < *times; ++i) {
      x = Instantiate(call, block, {*x}, absl::StrCat(path, ".", i),
                      scope.depth + 1);
      if (!x) return std::nullopt;
      model_.repeat_blocks.push_back(absl::StrCat(path, ".", i));
      if (recompute) model_.recompute_blocks.push_back(absl::StrCat(path, ".", i));
    }
    return x;
  }

  void CheckWhole(const Scope& root, bool had_errors) {
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
    if (root.values.count("loss") == 0 &&
        root.statement_lines.count("loss") == 0) {
      sink_.Error(where, "the model has no 'loss' statement",
                  "add one, e.g. loss = cross_entropy(logits, class)");
    }
    model_.loss = root.values.count("loss") ? root.values.at("loss") : "loss";
    // Unused-value warnings would mostly echo the errors' fallout.
    if (had_errors) return;
    for (const ast::Item& item : block_.items) {
      std::string name;
      Span span;
      if (const auto* a = std::get_if<ast::Assignment>(&item)) {
        name = a->name;
        span = a->name_span;
      } else if (const auto* d = std::get_if<ast::Declaration>(&item)) {
        name = d->name;
        span = d->name_span;
      } else {
        continue;
      }
      auto it = root.values.find(name);
      if (it == root.values.end() || name == "loss") continue;
      const Value& value = values_.at(it->second);
      if (value.used || value.span.line != span.line) continue;
      sink_.Warning(value.span, absl::StrCat("'", name, "' is never used"),
                    "it does not contribute to the loss");
    }
  }

  const ast::Block& block_;
  DiagnosticSink& sink_;
  Overrides overrides_;
  Overrides* rest_ = nullptr;
  ModelSpec model_;
  std::map<std::string, Value> values_;  // by global name
  std::map<std::string, size_t> parameters_;  // -> model_.parameters
  std::map<std::string, const ast::Block*> blocks_;
  ConstantScope constants_;
  bool saw_input_ = false;
};

}  // namespace

std::optional<ModelSpec> CheckModel(const ast::Block& block,
                                    const Overrides& overrides,
                                    DiagnosticSink& sink, Overrides* rest) {
  return ModelChecker(block, overrides, sink, rest).Check();
}

}  // namespace trainc::frontend
