#include "compiler/frontend/ast_builder.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/source_text.h"

namespace trainc::frontend {
namespace {

using trainc_antlr::TrainParser;

// The AST builder recurses once per expression level; binary chains
// (1 + 1 + ... ) nest on the left without brackets, so they are bounded
// here rather than by the lexer's bracket count.
constexpr int kMaxExprDepth = 1024;

std::string Clip(const std::string& text) {
  return text.size() > 24 ? text.substr(0, 24) + "..." : text;
}

class AstBuilder {
 public:
  explicit AstBuilder(DiagnosticSink& sink) : sink_(sink) {}

  bool Build(TrainParser::FileContext* tree, ast::File* file) {
    if (tree == nullptr) return Fail(Span{1, 1, 1}, "empty parse tree");
    for (TrainParser::BlockContext* block : tree->block()) {
      file->blocks.emplace_back();
      if (!BuildBlock(block, &file->blocks.back())) return false;
    }
    return ok_;
  }

 private:
  bool Fail(Span span, std::string message, std::string hint = "") {
    sink_.Error(span, std::move(message), std::move(hint));
    ok_ = false;
    return false;
  }

  static Span ContextSpan(antlr4::ParserRuleContext* ctx) {
    Span span = TokenSpan(ctx->getStart());
    const antlr4::Token* stop = ctx->getStop();
    if (stop != nullptr && stop->getLine() == ctx->getStart()->getLine() &&
        stop->getStopIndex() >= ctx->getStart()->getStartIndex()) {
      span.length = static_cast<int>(stop->getStopIndex() -
                                     ctx->getStart()->getStartIndex() + 1);
    }
    return span;
  }

  bool BuildBlock(TrainParser::BlockContext* ctx, ast::Block* block) {
    if (ctx->kind == nullptr) return Fail(ContextSpan(ctx), "malformed block");
    block->kind = ctx->kind->getText();
    block->kind_span = TokenSpan(ctx->kind);
    if (ctx->name != nullptr) {
      block->name = ctx->name->getText();
      block->name_span = TokenSpan(ctx->name);
    }
    return BuildItems(ctx->item(), /*depth=*/0, block);
  }

  // Items of a top-level block (depth 0) or of a nested block. Constants
  // and nested blocks belong to the model; `return` to nested blocks.
  bool BuildItems(const std::vector<TrainParser::ItemContext*>& items,
                  int depth, ast::Block* block) {
    const bool in_model = depth > 0 || block->kind == "model";
    for (TrainParser::ItemContext* item : items) {
      if (auto* decl = dynamic_cast<TrainParser::DeclarationContext*>(item)) {
        ast::Declaration out;
        if (!BuildDeclaration(decl, &out)) return false;
        block->items.emplace_back(std::move(out));
      } else if (auto* assign =
                     dynamic_cast<TrainParser::AssignmentContext*>(item)) {
        ast::Assignment out;
        if (!BuildAssignment(assign->name, assign->expr(), assign, &out)) {
          return false;
        }
        block->items.emplace_back(std::move(out));
      } else if (auto* c = dynamic_cast<TrainParser::ConstantsContext*>(item)) {
        if (!BuildConstants(c, in_model, block)) return false;
      } else if (auto* r = dynamic_cast<TrainParser::ReturnContext*>(item)) {
        if (!BuildReturn(r, depth, block)) return false;
      } else if (auto* b = dynamic_cast<TrainParser::SubBlockContext*>(item)) {
        if (!BuildSubBlock(b, depth, in_model, block)) return false;
      } else {
        return Fail(ContextSpan(item), "malformed item");
      }
    }
    return true;
  }

  // const name = value, ...: only in the model block (or a nested one).
  bool BuildConstants(TrainParser::ConstantsContext* c, bool in_model, ast::Block* block) {
    ast::Constants out;
    out.kind = c->kind->getText();
    out.kind_span = TokenSpan(c->kind);
    if (out.kind != "const") {
      return Fail(out.kind_span,
                  absl::StrCat("unknown item '", Clip(out.kind), "'"),
                  "constants are written const name = value, ...");
    }
    if (!in_model) {
      return Fail(out.kind_span,
                  absl::StrCat("constants belong in the model block, not ",
                               block->kind),
                  "move them into model { }");
    }
    for (TrainParser::ConstDefContext* def : c->constDef()) {
      out.definitions.emplace_back();
      if (!BuildAssignment(def->name, def->expr(), def,
                           &out.definitions.back())) {
        return false;
      }
    }
    block->items.emplace_back(std::move(out));
    return true;
  }

  // return EXPR: only inside a nested block.
  bool BuildReturn(TrainParser::ReturnContext* r, int depth, ast::Block* block) {
    ast::Return out;
    out.kind = "return";
    out.kind_span = TokenSpan(r->RETURN()->getSymbol());
    if (depth == 0) {
      return Fail(out.kind_span,
                  "return is only allowed inside a nested block",
                  "e.g. block mlp(x) { h = relu(linear(x, 64)) return h }");
    }
    if (!BuildExpr(r->expr(), 0, &out.value)) return false;
    block->items.emplace_back(std::move(out));
    return true;
  }

  // block name(params) { items }: a reusable block, defined at the top of
  // the model block.
  bool BuildSubBlock(TrainParser::SubBlockContext* b, int depth, bool in_model,
                     ast::Block* block) {
    auto nested = std::make_shared<ast::Block>();
    nested->kind = b->kind->getText();
    nested->kind_span = TokenSpan(b->kind);
    nested->name = b->name->getText();
    nested->name_span = TokenSpan(b->name);
    if (nested->kind != "block") {
      return Fail(nested->kind_span,
                  absl::StrCat("unknown item '", Clip(nested->kind), "'"),
                  "a reusable block is written block name(x) { ... }");
    }
    if (!in_model) {
      return Fail(nested->kind_span,
                  "blocks belong in the model block", "");
    }
    if (depth >= 1) {
      return Fail(nested->kind_span,
                  "blocks are defined at the top of the model block, "
                  "not inside another block",
                  "define it beside the others; blocks can call each "
                  "other");
    }
    for (antlr4::Token* param : b->params) {
      nested->params.push_back(param->getText());
      nested->param_spans.push_back(TokenSpan(param));
    }
    if (!BuildItems(b->item(), depth + 1, nested.get())) return false;
    block->items.emplace_back(ast::NestedBlock{std::move(nested)});
    return true;
  }

  bool BuildAssignment(antlr4::Token* name, TrainParser::ExprContext* expr,
                       antlr4::ParserRuleContext* ctx, ast::Assignment* out) {
    if (name == nullptr || expr == nullptr) {
      return Fail(ContextSpan(ctx), "malformed assignment");
    }
    out->name = name->getText();
    out->name_span = TokenSpan(name);
    return BuildExpr(expr, 0, &out->value);
  }

  bool BuildDeclaration(TrainParser::DeclarationContext* ctx,
                        ast::Declaration* out) {
    TrainParser::TypeContext* type = ctx->type();
    if (ctx->kind == nullptr || ctx->name == nullptr || type == nullptr ||
        type->elem == nullptr) {
      return Fail(ContextSpan(ctx), "malformed declaration");
    }
    out->kind = ctx->kind->getText();
    out->kind_span = TokenSpan(ctx->kind);
    out->name = ctx->name->getText();
    out->name_span = TokenSpan(ctx->name);
    out->element_type = type->elem->getText();
    out->type_span = ContextSpan(type);
    for (TrainParser::ExprContext* dim : type->expr()) {
      out->dims.emplace_back();
      if (!BuildExpr(dim, 0, &out->dims.back())) return false;
    }
    return true;
  }

  bool ParseInt(const std::string& text, Span span, int64_t* value) {
    if (!absl::SimpleAtoi(text, value)) {
      return Fail(span, absl::StrCat("integer ", Clip(text), " is too large"),
                  absl::StrCat("the largest integer is ",
                               std::numeric_limits<int64_t>::max()));
    }
    return true;
  }

  bool BuildExpr(TrainParser::ExprContext* ctx, int depth, ast::Expr* out) {
    if (ctx == nullptr) return Fail(Span{1, 1, 1}, "malformed expression");
    out->span = ContextSpan(ctx);
    if (depth > kMaxExprDepth) {
      return Fail(out->span,
                  absl::StrCat("expression nested too deeply (more than ",
                               kMaxExprDepth, " levels)"),
                  "split it into several statements");
    }
    using Kind = ast::Expr::Kind;
    if (auto* c = dynamic_cast<TrainParser::IntContext*>(ctx)) {
      out->kind = Kind::kInt;
      return ParseInt(c->getText(), out->span, &out->int_value);
    }
    if (auto* c = dynamic_cast<TrainParser::FloatContext*>(ctx)) return BuildFloat(c, out);
    if (auto* c = dynamic_cast<TrainParser::BoolContext*>(ctx)) {
      out->kind = Kind::kBool;
      out->bool_value = c->getText() == "true";
      return true;
    }
    if (auto* c = dynamic_cast<TrainParser::StringContext*>(ctx)) {
      out->kind = Kind::kString;
      if (!Unquote(c->STRING()->getText(), out->span, &out->text)) return false;
      out->text = RestoreInvalidBytes(out->text);  // a path's bytes as written
      return true;
    }
    if (auto* c = dynamic_cast<TrainParser::NameContext*>(ctx)) {
      out->kind = Kind::kName;
      out->text = c->getText();
      return true;
    }
    if (auto* c = dynamic_cast<TrainParser::CallContext*>(ctx)) {
      return BuildCall(c, depth, out);
    }
    if (auto* c = dynamic_cast<TrainParser::GroupContext*>(ctx)) {
      return BuildGroup(c, depth, out);
    }
    if (auto* c = dynamic_cast<TrainParser::UnaryContext*>(ctx)) {
      return BuildUnary(c, depth, out);
    }
    if (auto* c = dynamic_cast<TrainParser::BinaryContext*>(ctx)) {
      return BuildBinary(c, depth, out);
    }
    return Fail(out->span, "malformed expression");
  }

  bool BuildFloat(TrainParser::FloatContext* c, ast::Expr* out) {
    out->kind = ast::Expr::Kind::kFloat;
    const std::string text = c->getText();
    errno = 0;
    out->float_value = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(out->float_value)) {
      return Fail(out->span,
                  absl::StrCat("number ", Clip(text), " is out of range"),
                  "the largest number is about 1.8e308");
    }
    return true;
  }

  // callee(args...), each argument positional or name = value.
  bool BuildCall(TrainParser::CallContext* c, int depth, ast::Expr* out) {
    out->kind = ast::Expr::Kind::kCall;
    if (c->callee == nullptr) return Fail(out->span, "malformed call");
    out->text = c->callee->getText();
    out->name_span = TokenSpan(c->callee);
    for (TrainParser::ArgContext* arg : c->arg()) {
      out->args.emplace_back();
      if (!BuildExpr(arg->expr(), depth + 1, &out->args.back())) return false;
      out->arg_names.push_back(arg->name ? arg->name->getText() : "");
      out->arg_name_spans.push_back(arg->name ? TokenSpan(arg->name)
                                              : out->args.back().span);
    }
    return true;
  }

  // (a, b, ...): a tuple; (a) alone: a, with the parentheses' span.
  bool BuildGroup(TrainParser::GroupContext* c, int depth, ast::Expr* out) {
    const std::vector<TrainParser::ExprContext*> elements = c->expr();
    if (c->COMMA().empty() && elements.size() == 1) {
      // A parenthesised expression: the group itself leaves no trace.
      const Span span = out->span;
      if (!BuildExpr(elements[0], depth + 1, out)) return false;
      out->span = span;
      return true;
    }
    out->kind = ast::Expr::Kind::kTuple;
    for (TrainParser::ExprContext* element : elements) {
      out->args.emplace_back();
      if (!BuildExpr(element, depth + 1, &out->args.back())) return false;
    }
    return true;
  }

  bool BuildUnary(TrainParser::UnaryContext* c, int depth, ast::Expr* out) {
    out->kind = ast::Expr::Kind::kUnary;
    if (c->op == nullptr) return Fail(out->span, "malformed expression");
    out->text = c->op->getText();
    out->name_span = TokenSpan(c->op);
    out->args.emplace_back();
    return BuildExpr(c->expr(), depth + 1, &out->args.back());
  }

  bool BuildBinary(TrainParser::BinaryContext* c, int depth, ast::Expr* out) {
    out->kind = ast::Expr::Kind::kBinary;
    if (c->op == nullptr || c->expr().size() != 2) {
      return Fail(out->span, "malformed expression");
    }
    out->text = c->op->getText();
    out->name_span = TokenSpan(c->op);
    out->args.resize(2);
    return BuildExpr(c->expr(0), depth + 1, &out->args[0]) &&
           BuildExpr(c->expr(1), depth + 1, &out->args[1]);
  }

  // Strips the quotes (an unterminated string has only the first) and
  // resolves \" \\ \n \t.
  bool Unquote(const std::string& token, Span span, std::string* out) {
    std::string_view body(token);
    if (!body.empty() && body.front() == '"') body.remove_prefix(1);
    if (!body.empty() && body.back() == '"') body.remove_suffix(1);
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\') {
        out->push_back(body[i]);
        continue;
      }
      if (i + 1 >= body.size()) break;
      const char next = body[++i];
      switch (next) {
        case '"':
        case '\\':
          out->push_back(next);
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        default:
          return Fail(span,
                      absl::StrCat("unknown escape sequence '\\",
                                   std::string(1, next), "' in string"),
                      "accepted escapes: \\\" \\\\ \\n \\t");
      }
    }
    return true;
  }

  DiagnosticSink& sink_;
  bool ok_ = true;
};

}  // namespace

Span TokenSpan(const antlr4::Token* token) {
  if (token == nullptr) return Span{1, 1, 1};
  Span span;
  span.line = static_cast<int>(token->getLine());
  span.column = static_cast<int>(token->getCharPositionInLine()) + 1;
  span.length = 1;
  if (token->getType() != antlr4::Token::EOF &&
      token->getStopIndex() >= token->getStartIndex()) {
    span.length =
        static_cast<int>(token->getStopIndex() - token->getStartIndex() + 1);
  }
  return span;
}

bool BuildAst(TrainParser::FileContext* tree, DiagnosticSink& sink,
              ast::File* file) {
  return AstBuilder(sink).Build(tree, file);
}

}  // namespace trainc::frontend
