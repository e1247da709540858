// Checks the data { } block into a DataSpec.
#ifndef TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_
#define TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_

#include <optional>
#include <string>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/spec/train_spec.h"

namespace trainc::frontend {

// Fields: train = idx("images", "labels") (required), eval = idx(...)
// (optional), scale = number > 0 (default 1), shuffle = bool (default
// true). Every data file must be readable now, so that a typo fails at
// compile time and not after the model is built. Relative paths are
// resolved against `base_dir` (the .train file's directory; "" for the
// working directory) and stored resolved in the spec.
std::optional<DataSpec> CheckData(const ast::Block& block,
                                  const std::string& base_dir,
                                  DiagnosticSink& sink);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_
