// Finding runs of a repeated block in a sequence, so that a 100-layer model
// draws as "h2..h99 (x98)" instead of 600 boxes.
//
// The input is one signature per element (equal signatures: the same op on
// the same shapes) and, optionally, the statement each element belongs to.
// A block is `repeats` consecutive copies of the same `period` signatures.
// When statements are given, a block must start and end on a statement
// boundary: otherwise "relu, linear" could be folded across layers and the
// label would split layers in the middle.
#ifndef TRAINC_TOOLS_VIZ_REPEAT_FINDER_H_
#define TRAINC_TOOLS_VIZ_REPEAT_FINDER_H_

#include <string>
#include <vector>

namespace trainc::viz {

struct RepeatedBlock {
  int start = 0;    // index of the first element
  int period = 0;   // elements per repetition
  int repeats = 0;  // >= min_repeats
  int end() const { return start + period * repeats; }
};

// Greedy left to right: at each position, the block covering the most
// elements (ties: the shorter period); blocks do not overlap.
// `statements` is empty or the same length as `signatures`.
std::vector<RepeatedBlock> FindRepeatedBlocks(
    const std::vector<std::string>& signatures,
    const std::vector<std::string>& statements, int min_repeats,
    int max_period = 32);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_REPEAT_FINDER_H_
