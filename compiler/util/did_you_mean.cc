#include "compiler/util/did_you_mean.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainc {

int EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // Three rolling rows: transpositions look two rows back.
  std::vector<int> two_back(m + 1), previous(m + 1), current(m + 1);
  for (size_t j = 0; j <= m; ++j) previous[j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    current[0] = static_cast<int>(i);
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], two_back[j - 2] + 1);
      }
    }
    std::swap(two_back, previous);
    std::swap(previous, current);
  }
  return previous[m];
}

std::string ClosestMatch(std::string_view word,
                         const std::vector<std::string>& candidates) {
  // Names here are short; a long word (garbage) is never a typo of them.
  if (word.size() > 64) return "";
  const int limit = std::max<int>(1, static_cast<int>(word.size()) / 3);
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& candidate : candidates) {
    const int distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string SuggestionHint(std::string_view word,
                           const std::vector<std::string>& candidates,
                           std::string_view what) {
  const std::string match = ClosestMatch(word, candidates);
  if (!match.empty()) return absl::StrCat("did you mean '", match, "'?");
  if (candidates.empty()) return "";
  return absl::StrCat(std::string(what), ": ", absl::StrJoin(candidates, ", "));
}

}  // namespace trainc
