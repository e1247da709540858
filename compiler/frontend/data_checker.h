// Checks the data { } block into a DataSpec.
#ifndef TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_
#define TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_

#include <optional>
#include <string>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/diagnostics.h"
#include "compiler/spec/train_spec.h"

namespace trainc::frontend {

// Fields: train = <source> (required), eval = <source> (optional, same
// format as train), scale = number > 0 (default 1, idx only), shuffle =
// bool (default true). Sources:
//   idx("images", "labels")
//   text(path_or_glob, ..., split = "A:B")    each byte one token
//   tokens(path_or_glob, ..., split = "A:B")  llm.c token shards
// A glob (glob(3): `*`, `?`, `[...]`) expands to its sorted matches that
// are regular files (symlinks and directories skipped; for text, files
// with a NUL byte in their first 4 KiB too) and must keep at least one;
// a path without glob characters must be a readable regular file. split
// (default "0:100%") slices the concatenated token stream: each side is a
// percentage ("95%") or a fraction in [0, 1] ("0.95"), begin < end.
// Every data file must be readable now, so that a typo fails at compile
// time and not after the model is built (shard headers are checked when
// loading). Relative paths are resolved against `base_dir` (the .train
// file's directory; "" for the working directory) and stored resolved in
// the spec. Without `read_files` only the block's form is checked and the
// paths are kept as written (resolved), globs unexpanded: for tools that
// need the model alone (sampling a checkpoint on a machine without the data).
std::optional<DataSpec> CheckData(const ast::Block& block,
                                  const std::string& base_dir,
                                  DiagnosticSink& sink, bool read_files = true);

// An idx data set must fit the model's image input: the values per image
// in each images file's header (rows x cols) must be the input's per-sample
// size, else an error at the input's declaration showing both. Only the
// headers are read.
void CheckDataFitsModel(const ModelSpec& model, const DataSpec& data,
                        DiagnosticSink& sink);

}  // namespace trainc::frontend

#endif  // TRAINC_COMPILER_FRONTEND_DATA_CHECKER_H_
