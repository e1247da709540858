// The .train language front end: source text -> checked TrainSpec.
//
//   trainc::FrontendResult result =
//       trainc::CompileFile("fashion_mlp.train", {{"gpus", "4"}});
//   std::cerr << trainc::FormatDiagnostics(result.diagnostics, result.source);
//   if (!result.spec) return 1;  // there were errors
//
// Parsing (ANTLR grammar Train.g4), name resolution, shape inference, the
// batch arithmetic (batch_arithmetic.h) and field checks all report
// file:line:col diagnostics; several errors are reported at once (at most
// 20). Nothing here throws or exits, whatever the input.
#ifndef TRAINC_COMPILER_FRONTEND_FRONTEND_H_
#define TRAINC_COMPILER_FRONTEND_FRONTEND_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/frontend/diagnostics.h"  // Diagnostic, FormatDiagnostics
#include "compiler/frontend/overrides.h"    // Overrides, OverridableFields
#include "compiler/spec/train_spec.h"

namespace trainc {

struct FrontendResult {
  std::optional<TrainSpec> spec;         // present iff there are no errors
  std::vector<Diagnostic> diagnostics;   // errors, warnings, notes
  std::string source;                    // the text compiled, for rendering
};

// What a compile checks beyond the file itself.
struct CompileOptions {
  // Whether the data files must be there and readable (training needs
  // them; sampling a checkpoint needs only the model, and the data
  // block's form).
  bool read_data = true;
};

// Compiles `source`; `file_name` is used in diagnostics, and its directory
// resolves relative data paths.
FrontendResult CompileSource(std::string_view source,
                             std::string_view file_name,
                             const Overrides& overrides = {},
                             const CompileOptions& options = {});

// Reads and compiles `path`. An unreadable or oversized (> 32 MiB) file is
// an error diagnostic, not a crash.
FrontendResult CompileFile(const std::string& path,
                           const Overrides& overrides = {},
                           const CompileOptions& options = {});

// A human summary: each statement with its shape, the parameter table and
// count, "global_batch 256 = 2 gpus × 64 micro_batch × 2 accumulate", the
// run length, optimizer, schedule and data.
std::string DescribeSpec(const TrainSpec& spec);

}  // namespace trainc

#endif  // TRAINC_COMPILER_FRONTEND_FRONTEND_H_
