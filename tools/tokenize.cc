// tokenize: text files into an llm.c token shard with a SentencePiece
// model, so a large corpus is encoded once and then streamed with
// tokens("shard.bin") instead of text(..., tokenizer = ...).
//
//   bazel-bin/tools/tokenize --tokenizer spm.model --out train.bin corpus/*.txt
//
// The files are concatenated in the order given and encoded as one text,
// as text(..., tokenizer = ...) encodes its split; the shard is llm.c's
// (runtime/data/tokens.h): uint16 tokens when the model has at most 65,536
// pieces, else uint32. The shard is written whole, then renamed
// (runtime/checkpoint/atomic_file.h).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/data/tokenizer.h"
#include "runtime/data/tokens.h"
#include "tools/cli/option_parser.h"

namespace trainc {
namespace {

struct Args {
  std::string tokenizer, out;
  std::vector<std::string> inputs;
};

absl::StatusOr<std::optional<Args>> ParseArgs(int argc, char** argv) {
  Args args;
  OptionParser parser;
  parser.Usage({"tokenize --tokenizer MODEL --out SHARD TEXT_FILE..."})
      .Description(
          "Encodes the TEXT_FILEs, concatenated, with the SentencePiece MODEL and\n"
          "writes the ids as one llm.c token shard (uint16 up to 65,536 pieces, else\n"
          "uint32), for tokens(\"SHARD\") in a data block.\n")
      .Value({"--tokenizer"}, "MODEL", "a SentencePiece model (spm_train writes one)",
             [&args](const std::string& v) {
               args.tokenizer = v;
               return absl::OkStatus();
             })
      .Value({"--out"}, "SHARD", "the shard to write", [&args](const std::string& v) {
        args.out = v;
        return absl::OkStatus();
      });
  ASSIGN_OR_RETURN(const bool help, parser.Parse(argc, argv, &args.inputs));
  if (help) {
    std::cout << parser.Help();
    return std::optional<Args>();
  }
  if (args.tokenizer.empty() || args.out.empty() || args.inputs.empty()) {
    return absl::InvalidArgumentError("needs --tokenizer, --out and text files (see --help)");
  }
  return std::optional<Args>(args);
}

absl::StatusOr<std::string> ReadAll(const std::vector<std::string>& paths) {
  std::string text;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError("cannot read " + path);
    std::stringstream data;
    data << in.rdbuf();
    text += data.str();
  }
  return text;
}

// llm.c's header, then the ids little-endian in `width` bytes each.
std::string Shard(const std::vector<int32_t>& ids, int width) {
  std::vector<int32_t> header(256, 0);
  header[0] = width == 2 ? kLlmcMagicU16 : kLlmcMagicU32;
  header[1] = width == 2 ? 1 : 7;
  header[2] = static_cast<int32_t>(ids.size());
  std::string out(reinterpret_cast<const char*>(header.data()), kLlmcHeaderBytes);
  out.reserve(out.size() + ids.size() * width);
  for (int32_t id : ids) {
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
  }
  return out;
}

absl::Status Run(const Args& args) {
  ASSIGN_OR_RETURN(const Tokenizer tokenizer, Tokenizer::Load(args.tokenizer));
  ASSIGN_OR_RETURN(const std::string text, ReadAll(args.inputs));
  ASSIGN_OR_RETURN(const std::vector<int32_t> ids, tokenizer.Encode(text));
  if (ids.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("more than 2^31 tokens: split the corpus into shards");
  }
  const int width = tokenizer.vocab() <= 65536 ? 2 : 4;
  // Whole, then renamed: a full disk leaves no half shard behind.
  RETURN_IF_ERROR(WriteFileAtomically(args.out, Shard(ids, width)));
  std::cout << "tokenize: " << args.out << ": " << ids.size() << " tokens ("
            << (width == 2 ? "uint16" : "uint32") << ") from " << text.size() << " bytes, "
            << absl::StrCat(static_cast<double>(text.size()) / std::max<size_t>(ids.size(), 1))
            << " bytes per token\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace trainc

int main(int argc, char** argv) {
  absl::StatusOr<std::optional<trainc::Args>> args = trainc::ParseArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << "tokenize: " << args.status().message() << "\n";
    return 2;
  }
  if (!args->has_value()) return 0;
  if (const absl::Status s = trainc::Run(**args); !s.ok()) {
    std::cerr << "tokenize: error: " << s.message() << "\n";
    return 1;
  }
  return 0;
}
