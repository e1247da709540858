// Checks the model { } block into a ModelSpec: name resolution, nested-call
// flattening, op arity and argument types, shape inference and parameters
// (the rules are documented on OpSpec in compiler/spec/train_spec.h).
#ifndef TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_
#define TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_

#include <optional>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/spec/train_spec.h"

namespace trainc::frontend {

// Beyond the ops' own rules, v1 models have exactly one `input` (the
// images) and at most one `label`, and exactly one statement named `loss`,
// computed by cross_entropy or mse as its outermost op. Values that do not
// reach the loss get a warning. Returns nullopt if an error was reported.
std::optional<ModelSpec> CheckModel(const ast::Block& block,
                                    DiagnosticSink& sink);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_
