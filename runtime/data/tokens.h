// Token streams for language models: raw text (each byte one token, vocab
// 256) and llm.c token shards.
//
// An llm.c shard (llm.c's dev/data/data_common.py) is a header of 256
// little-endian int32, then the tokens:
//   header[0] = 20240520, header[1] = 1: uint16 tokens (GPT-2's tokenizer)
//   header[0] = 20240801, header[1] = 7: uint32 tokens (LLaMA 3's)
//   header[2] = the number of tokens; the file is exactly
//               1024 + header[2] * sizeof(token) bytes.
// The header is checked against the file's size before anything is
// allocated from it.
//
// A source is the concatenation of its files; a TokenSplit slices it:
//
//   ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
//                    ReadTokenStream("tokens", paths, {0.0, 0.95}, 50257));
//
// Every error names the file and says what was expected, e.g.
//   "shards/train_000.bin: truncated llm.c shard: its header says 1000
//    uint16 tokens (3024 bytes with the header) but the file has 2048 bytes".
#ifndef TRAINC_RUNTIME_DATA_TOKENS_H_
#define TRAINC_RUNTIME_DATA_TOKENS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"

namespace trainc {

inline constexpr int32_t kLlmcMagicU16 = 20240520;  // version 1
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // version 7
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// One file of a token source, its header (if any) checked.
struct TokenFile {
  std::string path;
  int64_t tokens = 0;        // how many
  int64_t data_offset = 0;   // bytes before the first token
  int bytes_per_token = 1;   // 1 (text), 2 or 4 (llm.c)
};

// `format` is kText or kTokens. Reads only the header (tokens) or the
// size (text).
absl::StatusOr<TokenFile> InspectTokenFile(DataFormat format, const std::string& path);

// Tokens [first, first + count) of `file`, appended to `out`. With
// vocab > 0, each must be < vocab; the error names the file, the token's
// index in the file and its value.
absl::Status ReadTokens(const TokenFile& file, int64_t first, int64_t count,
                        int64_t vocab, std::vector<int32_t>* out);

// Position of a split boundary in a stream of n tokens: floor(fraction *
// n), where a fraction written in decimal ("29%", 0.29) counts as that
// decimal: 0.29 * 100 is 29, although the double 0.29 is a hair below it.
int64_t SplitPosition(double fraction, int64_t n);

// The slice `split` of the concatenation of `paths`, reading only the
// files (and the parts of them) that it covers.
absl::StatusOr<std::vector<int32_t>> ReadTokenStream(
    DataFormat format, const std::vector<std::string>& paths,
    TokenSplit split, int64_t vocab);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_TOKENS_H_
