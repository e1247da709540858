// Command-line overrides of train { } fields.
#ifndef TRAINC_COMPILER_FRONTEND_OVERRIDES_H_
#define TRAINC_COMPILER_FRONTEND_OVERRIDES_H_

#include <string>
#include <utility>
#include <vector>

namespace trainc {

// (field, value as typed) pairs, e.g. {"gpus", "4"}, {"steps", "20"},
// {"deterministic", "true"}, {"lr", "3e-4"}. A leading "--" on the field is
// accepted and ignored. Applied before the batch arithmetic and checked by
// the same rules as the file; errors name the flag ("--gpus: ...").
//
// - A flag replaces the file's value of that field.
// - --epochs drops the file's steps and --steps drops its epochs (the two
//   are exclusive; giving both flags is an error).
// - --lr replaces the optimizer's learning rate.
// - gpus / micro_batch / accumulate / global_batch: see batch_arithmetic.h.
//   A flag wins; if it makes the four inconsistent, the first file-given
//   value of accumulate, micro_batch, gpus, global_batch is re-inferred
//   (e.g. --gpus 4 with global_batch = 256, micro_batch = 64 in the file
//   gives accumulate = 1), and a note says so.
using Overrides = std::vector<std::pair<std::string, std::string>>;

// The fields a flag may override, for registering command-line flags.
const std::vector<std::string>& OverridableFields();

// The values a train { } field takes when they are a closed set, in the
// order a user is offered them, from the tables the checker itself checks
// with: {"true", "false"} for a switch, the ZeRO stages {"0", ..., "3"},
// the names of compiler/plan/settings.h ({"fp32", "bf16"} for precision).
// Empty for an open field (a count, a size, a path, a number or auto).
// `train --help` writes its "--zero 0|1|2|3" from it.
std::vector<std::string> FieldChoices(const std::string& field);

}  // namespace trainc

#endif  // TRAINC_COMPILER_FRONTEND_OVERRIDES_H_
