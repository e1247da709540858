// Checks the model { } block into a ModelSpec: constants, blocks and their
// instances (repeat), name resolution, nested-call flattening, op arguments
// (positional or named, defaults from the op table), shape inference and
// parameters, every op through its rule in compiler/ops/op_table.h (the
// naming rules are documented on OpSpec in compiler/spec/train_spec.h).
#ifndef TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_
#define TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_

#include <optional>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/frontend/overrides.h"
#include "compiler/spec/train_spec.h"

namespace trainc::frontend {

// A model has exactly one `input` and at most one `label`, and exactly one
// statement named `loss`, computed by cross_entropy or mse as its
// outermost op. Values that do not reach the loss get a warning. Returns
// nullopt if an error was reported.
//
// `overrides` that name one of the model's constants (`--width 256`)
// replace its value; the others are appended to `rest` (for the train
// block).
std::optional<ModelSpec> CheckModel(const ast::Block& block,
                                    const Overrides& overrides,
                                    DiagnosticSink& sink, Overrides* rest);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_MODEL_CHECKER_H_
