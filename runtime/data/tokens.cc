#include "runtime/data/tokens.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

absl::StatusOr<File> Open(const std::string& path) {
  errno = 0;
  File file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  return file;
}

uint32_t LittleEndian(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const char* TokenTypeName(int bytes_per_token) {
  return bytes_per_token == 1 ? "byte" : bytes_per_token == 2 ? "uint16" : "uint32";
}

}  // namespace

absl::StatusOr<TokenFile> InspectTokenFile(DataFormat format, const std::string& path) {
  if (format != DataFormat::kText && format != DataFormat::kTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token data format '", EnumName(format), "' is not supported (text or tokens)"));
  }
  ASSIGN_OR_RETURN(File file, Open(path));
  struct stat st;
  if (::fstat(::fileno(file.get()), &st) != 0) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const int64_t size = st.st_size;
  TokenFile out;
  out.path = path;
  if (format == DataFormat::kText) {
    out.tokens = size;
    return out;
  }
  if (size < kLlmcHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an llm.c token shard: the file has ", size,
        " bytes, fewer than the ", kLlmcHeaderBytes, "-byte header"));
  }
  unsigned char header[kLlmcHeaderBytes];
  if (std::fread(header, 1, sizeof(header), file.get()) != sizeof(header)) {
    return absl::DataLossError(absl::StrCat(path, ": cannot read the header: ",
                                            std::ferror(file.get())
                                                ? std::strerror(errno)
                                                : "the file ended early"));
  }
  const int32_t magic = static_cast<int32_t>(LittleEndian(header, 4));
  const int32_t version = static_cast<int32_t>(LittleEndian(header + 4, 4));
  const int32_t count = static_cast<int32_t>(LittleEndian(header + 8, 4));
  int32_t expected_version = 0;
  if (magic == kLlmcMagicU16) {
    expected_version = 1;
    out.bytes_per_token = 2;
  } else if (magic == kLlmcMagicU32) {
    expected_version = 7;
    out.bytes_per_token = 4;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an llm.c token shard: header[0] (magic) is ", magic,
        ", expected ", kLlmcMagicU16, " (uint16 tokens) or ", kLlmcMagicU32,
        " (uint32 tokens)"));
  }
  if (version != expected_version) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": unsupported llm.c shard: magic ", magic, " with version ",
        version, ", expected version ", expected_version));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": corrupt llm.c shard: header[2] (token count) is ", count));
  }
  // count < 2^31 and 4 bytes each: no overflow.
  const int64_t expected_size =
      kLlmcHeaderBytes + int64_t{count} * out.bytes_per_token;
  if (size != expected_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, size < expected_size ? ": truncated llm.c shard: " : ": corrupt llm.c shard: ",
        "its header says ", count, " ", TokenTypeName(out.bytes_per_token),
        " tokens (", expected_size, " bytes with the header) but the file has ",
        size, " bytes"));
  }
  out.tokens = count;
  out.data_offset = kLlmcHeaderBytes;
  return out;
}

absl::Status ReadTokens(const TokenFile& file, int64_t first, int64_t count,
                        int64_t vocab, std::vector<int32_t>* out) {
  if (first < 0 || count < 0 || first > file.tokens || count > file.tokens - first) {
    return absl::OutOfRangeError(absl::StrCat(
        file.path, ": tokens [", first, ", ", first + count,
        ") are outside the file's ", file.tokens));
  }
  if (count == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(File f, Open(file.path));
  const int width = file.bytes_per_token;
  if (::fseeko(f.get(), file.data_offset + first * width, SEEK_SET) != 0) {
    return absl::DataLossError(
        absl::StrCat(file.path, ": cannot seek: ", std::strerror(errno)));
  }
  constexpr int64_t kChunkTokens = int64_t{1} << 20;
  std::vector<unsigned char> chunk(std::min(count, kChunkTokens) * width);
  out->reserve(out->size() + count);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(count - done, kChunkTokens);
    const size_t got = std::fread(chunk.data(), width, n, f.get());
    if (static_cast<int64_t>(got) != n) {
      return absl::DataLossError(absl::StrCat(
          file.path, ": ",
          std::ferror(f.get()) ? std::strerror(errno) : "the file ended early",
          " at token ", first + done + static_cast<int64_t>(got), " of ",
          file.tokens, " (did it change after it was checked?)"));
    }
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t v = LittleEndian(chunk.data() + j * width, width);
      if (v > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()) ||
          (vocab > 0 && v >= static_cast<uint64_t>(vocab))) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.path, ": token ", first + done + j, " is ", v,
            vocab > 0 ? absl::StrCat(", not below the model's vocabulary size ",
                                     vocab)
                      : ", which does not fit an i32"));
      }
      out->push_back(static_cast<int32_t>(v));
    }
    done += n;
  }
  return absl::OkStatus();
}

int64_t SplitPosition(double fraction, int64_t n) {
  if (!(fraction > 0) || n <= 0) return 0;
  if (fraction >= 1) return n;
  const double x = fraction * static_cast<double>(n);
  const double nearest = std::round(x);
  // A decimal fraction is stored to within 2^-53 of its value: a product
  // that close to an integer is that integer.
  const int64_t position =
      std::abs(x - nearest) <= 1e-9 * std::max(1.0, x)
          ? static_cast<int64_t>(nearest)
          : static_cast<int64_t>(std::floor(x));
  return std::clamp<int64_t>(position, 0, n);
}

absl::StatusOr<std::vector<int32_t>> ReadTokenStream(
    DataFormat format, const std::vector<std::string>& paths,
    TokenSplit split, int64_t vocab) {
  if (paths.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", EnumName(format), " data set needs at least one file"));
  }
  if (!(0 <= split.begin && split.begin < split.end && split.end <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad split ", split.begin, ":", split.end,
                     ": expected 0 <= begin < end <= 1"));
  }
  std::vector<TokenFile> files;
  int64_t total = 0;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(TokenFile file, InspectTokenFile(format, path));
    total += file.tokens;
    files.push_back(std::move(file));
  }
  const int64_t begin = SplitPosition(split.begin, total);
  const int64_t end = SplitPosition(split.end, total);
  std::vector<int32_t> tokens;
  tokens.reserve(end - begin);
  int64_t start = 0;  // of the current file in the stream
  for (const TokenFile& file : files) {
    const int64_t from = std::max(begin, start);
    const int64_t to = std::min(end, start + file.tokens);
    if (from < to) {
      RETURN_IF_ERROR(ReadTokens(file, from - start, to - from, vocab, &tokens));
    }
    start += file.tokens;
  }
  return tokens;
}

}  // namespace trainc
