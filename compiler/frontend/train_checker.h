// Checks the train { } block (with command-line overrides) into a
// TrainConfig: field names and types, optimizer, schedule, epochs/steps and
// the batch arithmetic.
#ifndef TRAINC_COMPILER_FRONTEND_TRAIN_CHECKER_H_
#define TRAINC_COMPILER_FRONTEND_TRAIN_CHECKER_H_

#include <optional>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/frontend/overrides.h"
#include "compiler/spec/train_spec.h"

namespace trainc::frontend {

// `block` may be null (no train block; already reported): the overrides are
// still checked. Returns nullopt if anything was reported as an error.
//
// Exactly one of epochs and steps must be given (no default: how long to
// train is never guessed). A relative `machine = "x.profile"` in the file
// is resolved from `base_dir`, the .train file's folder, like data paths
// (from the command line it is the user's, relative to where they typed).
std::optional<TrainConfig> CheckTrain(const ast::Block* block,
                                      const Overrides& overrides,
                                      DiagnosticSink& sink,
                                      const std::string& base_dir = "");

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_TRAIN_CHECKER_H_
