// Syntax tree of a .train file, as written (before any checking).
//
// Deliberately independent of ANTLR: the checkers see plain structs, and
// the parse tree (owned by the parser) is gone once the AST is built.
#ifndef TRAINC_COMPILER_FRONTEND_AST_H_
#define TRAINC_COMPILER_FRONTEND_AST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "compiler/frontend/diagnostics.h"

namespace trainc::frontend::ast {

struct Expr {
  enum class Kind {
    kInt,     // int_value
    kFloat,   // float_value
    kBool,    // bool_value
    kString,  // text: contents, escapes resolved
    kName,    // text
    kCall,    // text: callee; args, arg_names
    kTuple,   // args
    kUnary,   // text: "-" or "+"; args[0]
    kBinary,  // text: "+", "-", "*", "/"; args[0], args[1]
  };
  Kind kind = Kind::kInt;
  Span span;       // the whole expression (clipped to its first line)
  Span name_span;  // kCall: the callee; kBinary/kUnary: the operator
  int64_t int_value = 0;
  double float_value = 0.0;
  bool bool_value = false;
  std::string text;
  std::vector<Expr> args;
  std::vector<std::string> arg_names;  // kCall: "" when positional
  std::vector<Span> arg_name_spans;    // kCall
};

// `input image: f32[784]` / `label class: i32[10]` / `input t: i32[ctx]`.
struct Declaration {
  std::string kind;  // "input", "label", or whatever was written
  Span kind_span;
  std::string name;
  Span name_span;
  std::string element_type;  // "f32", "i32", ...
  Span type_span;            // the whole type, e.g. f32[784]
  std::vector<Expr> dims;    // constant expressions
};

// `name = value`.
struct Assignment {
  std::string name;
  Span name_span;
  Expr value;
};

// `const vocab = 256, width = 128` (model block only).
struct Constants {
  std::string kind;  // "const", or whatever was written
  Span kind_span;
  std::vector<Assignment> definitions;
};

// `return e` (nested blocks only).
struct Return {
  std::string kind;  // "return", or whatever was written
  Span kind_span;
  Expr value;
};

struct Block;
// `block name(x, y) { ... }` inside the model block.
struct NestedBlock {
  std::shared_ptr<Block> block;
};

using Item = std::variant<Declaration, Assignment, Constants, Return, NestedBlock>;

struct Block {
  std::string kind;  // "model", "data", "train", "block", or as written
  Span kind_span;
  std::string name;  // empty when absent
  Span name_span;
  std::vector<std::string> params;  // nested blocks: the argument names
  std::vector<Span> param_spans;
  std::vector<Item> items;
};

struct File {
  std::vector<Block> blocks;
};

}  // namespace trainc::frontend::ast

#endif  // TRAINC_COMPILER_FRONTEND_AST_H_
