#include "compiler/frontend/frontend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/data_checker.h"
#include "compiler/frontend/model_checker.h"
#include "compiler/frontend/parser.h"
#include "compiler/frontend/train_checker.h"
#include "compiler/util/did_you_mean.h"

namespace trainc {
namespace {

using frontend::DiagnosticSink;
using frontend::Span;

// Far above any real .train file; keeps memory bounded on a mistaken path
// (ANTLR holds 4 bytes per character plus the tokens).
constexpr size_t kMaxSourceBytes = size_t{32} << 20;

std::string DirectoryOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return "";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

// The three blocks, each at most once; reports unknown, repeated and
// missing blocks.
struct Blocks {
  const frontend::ast::Block* model = nullptr;
  const frontend::ast::Block* data = nullptr;
  const frontend::ast::Block* train = nullptr;
};

Blocks FindBlocks(const frontend::ast::File& file, DiagnosticSink& sink) {
  Blocks blocks;
  const std::vector<std::string> kinds = {"model", "data", "train"};
  for (const frontend::ast::Block& block : file.blocks) {
    const frontend::ast::Block** slot =
        block.kind == "model" ? &blocks.model
        : block.kind == "data" ? &blocks.data
        : block.kind == "train" ? &blocks.train
                                : nullptr;
    if (slot == nullptr) {
      sink.Error(block.kind_span,
                 absl::StrCat("unknown block '", block.kind, "'"),
                 SuggestionHint(block.kind, kinds, "blocks"));
      continue;
    }
    if (*slot != nullptr) {
      sink.Error(block.kind_span,
                 absl::StrCat("a second ", block.kind, " block"),
                 absl::StrCat("the first is at line ", (*slot)->kind_span.line,
                              "; a file has one of each"));
      continue;
    }
    if (block.kind != "model" && !block.name.empty()) {
      sink.Error(block.name_span,
                 absl::StrCat("the ", block.kind, " block takes no name"),
                 absl::StrCat("write ", block.kind, " { ... }"));
    }
    *slot = &block;
  }
  const Span nowhere{0, 0, 1};
  if (blocks.model == nullptr) {
    sink.Error(nowhere, "missing model block",
               "e.g. model mlp { input x: f32[784]  label y: i32[10]  ... }");
  }
  if (blocks.data == nullptr) {
    sink.Error(nowhere, "missing data block",
               "e.g. data { train = idx(\"images.gz\", \"labels.gz\") }");
  }
  if (blocks.train == nullptr) {
    sink.Error(nowhere, "missing train block",
               "e.g. train { micro_batch = 64  epochs = 10 }");
  }
  return blocks;
}

}  // namespace

FrontendResult CompileSource(std::string_view source,
                             std::string_view file_name,
                             const Overrides& overrides,
                             const CompileOptions& options) {
  FrontendResult result;
  result.source = std::string(source);
  DiagnosticSink sink{std::string(file_name)};
  std::optional<frontend::ast::File> file;
  if (source.size() > kMaxSourceBytes) {
    sink.Error(Span{0, 0, 1},
               absl::StrCat("the file is too large (", source.size(),
                            " bytes; the limit is ", kMaxSourceBytes, ")"));
  } else {
    file = frontend::ParseTrain(result.source, sink);
  }
  if (file) {
    const Blocks blocks = FindBlocks(*file, sink);
    TrainSpec spec;
    spec.source_path = std::string(file_name);
    std::optional<ModelSpec> model;
    std::optional<DataSpec> data;
    Overrides train_overrides = overrides;
    if (blocks.model) {
      train_overrides.clear();
      model = frontend::CheckModel(*blocks.model, overrides, sink,
                                   &train_overrides);
    }
    if (blocks.data) {
      data = frontend::CheckData(*blocks.data, DirectoryOf(file_name), sink, options.read_data);
    }
    // Checked even without a train block, so flag errors still show.
    std::optional<TrainConfig> train =
        frontend::CheckTrain(blocks.train, train_overrides, sink, DirectoryOf(file_name));
    if (sink.error_count() == 0 && model && data && options.read_data) {
      frontend::CheckDataFitsModel(*model, *data, sink);
    }
    if (sink.error_count() == 0 && model && data && train) {
      spec.model = std::move(*model);
      spec.data = std::move(*data);
      spec.train = std::move(*train);
      result.spec = std::move(spec);
    }
  }
  result.diagnostics = sink.Take();
  return result;
}

namespace {

// The text of a .train file, or why it cannot be read: a folder, a FIFO
// (never opened for reading: it would wait for a writer) and a file past
// kMaxSourceBytes (its real size) are refused before reading.
absl::StatusOr<std::string> ReadSourceFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string error = std::strerror(errno);
    ::close(fd);
    return absl::InternalError(error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(S_ISDIR(st.st_mode)
                                          ? "is a directory, not a .train file"
                                          : "not a regular file (a pipe or a device?)");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxSourceBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "the file is too large (", st.st_size, " bytes; the limit is ", kMaxSourceBytes, ")"));
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string error = std::strerror(errno);
      ::close(fd);
      return absl::InternalError(error);
    }
    if (n == 0) break;
    text.append(buffer, n);
    if (text.size() > kMaxSourceBytes) break;  // grew while read: CompileSource says so
  }
  ::close(fd);
  return text;
}

}  // namespace

FrontendResult CompileFile(const std::string& path,
                           const Overrides& overrides,
                           const CompileOptions& options) {
  absl::StatusOr<std::string> text = ReadSourceFile(path);
  if (!text.ok()) {
    FrontendResult result;
    Diagnostic d;
    d.location.file = path;
    d.message = absl::StrCat("cannot read '", path, "': ", text.status().message());
    result.diagnostics.push_back(std::move(d));
    return result;
  }
  return CompileSource(*text, path, overrides, options);
}

}  // namespace trainc
