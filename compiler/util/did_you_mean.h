// "Did you mean" suggestions for misspelt names (ops, fields, flags).
#ifndef TRAINC_COMPILER_UTIL_DID_YOU_MEAN_H_
#define TRAINC_COMPILER_UTIL_DID_YOU_MEAN_H_

#include <string>
#include <string_view>
#include <vector>

namespace trainc {

// Optimal-string-alignment distance: insertions, deletions, substitutions
// and adjacent transpositions ("rleu" -> "relu" is 1) each cost 1.
int EditDistance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is close enough to be a plausible
// typo (distance <= max(1, length / 3)); empty otherwise.
std::string ClosestMatch(std::string_view word,
                         const std::vector<std::string>& candidates);

// "did you mean 'relu'?" when there is a close match, otherwise
// "<what>: a, b, c" listing every candidate (e.g. "ops: linear, relu").
std::string SuggestionHint(std::string_view word,
                           const std::vector<std::string>& candidates,
                           std::string_view what);

}  // namespace trainc

#endif  // TRAINC_COMPILER_UTIL_DID_YOU_MEAN_H_
