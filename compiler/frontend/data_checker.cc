#include "compiler/frontend/data_checker.h"

#include <algorithm>

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/setting.h"
#include "compiler/util/did_you_mean.h"

namespace trainc::frontend {
namespace {

const std::vector<std::string>& DataFields() {
  static const auto* fields =
      new std::vector<std::string>{"train",   "eval",        "scale",
                                   "shuffle", "random_crop", "random_flip"};
  return *fields;
}

// "" when `path` reads, else why not. Opened without blocking and checked
// before reading: a FIFO would wait for a writer (and every rank with it).
// Devices pass here (/dev/null stands in for data in plans that never
// load it); the loaders take regular files only.
std::string CannotRead(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (path.find('\0') != std::string::npos) return "the path contains a NUL";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::strerror(errno);
  struct stat st;
  std::string reason;
  char byte;
  if (::fstat(fd, &st) != 0) {
    reason = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    reason = "it is a directory";
  } else if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
    reason = "it is a pipe or a socket, not a file";
  } else if (::read(fd, &byte, 1) < 0) {
    reason = std::strerror(errno);
  }
  ::close(fd);
  return reason;
}

constexpr char kIdxExample[] =
    "e.g. idx(\"train-images-idx3-ubyte.gz\", \"train-labels-idx1-ubyte.gz\")";
constexpr char kSplitExample[] =
    "e.g. split = \"0:95%\" (the first 95%) or split = \"95%:100%\" (the rest)";
// A text file holds no NUL byte; this much is read to tell.
constexpr size_t kBinaryProbeBytes = 4096;

std::string ExampleFor(DataFormat format) {
  if (format == DataFormat::kText) {
    return "e.g. text(\"/usr/share/games/fortunes/*\", split = \"0:95%\")";
  }
  if (format == DataFormat::kTokens) return "e.g. tokens(\"shards/train_*.bin\")";
  return kIdxExample;
}

std::string Plural(int64_t n, const std::string& what) {
  return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
}

// "" when `path` is a readable regular file (a symlink to one is fine:
// the path was named explicitly), else why not.
std::string NotARegularFile(const std::string& path) {
  if (path.empty()) return "the path is empty";
  if (path.find('\0') != std::string::npos) return "the path contains a NUL";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "it is a directory";
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  return CannotRead(path);
}

bool IsGlob(const std::string& text) {
  return text.find_first_of("*?[") != std::string::npos;
}

// `dir` with glob(3)'s special characters escaped, so that only the
// pattern the user wrote is a pattern.
std::string EscapeGlob(const std::string& dir) {
  std::string out;
  for (char c : dir) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// glob(3) matches of `pattern`, sorted, keeping regular files only:
// symlinks (Debian's fortunes has `.u8` links duplicating its files) and
// directories are skipped, and with `text`, so is any file with a NUL byte
// in its first kBinaryProbeBytes (e.g. strfile's `.dat` indexes).
struct GlobMatches {
  std::vector<std::string> files;
  int64_t matched = 0;  // before filtering
  int64_t symlinks = 0;
  int64_t not_regular = 0;
  int64_t binary = 0;
  std::string error;  // a matched file that cannot be read
};

GlobMatches ExpandGlob(const std::string& pattern, bool text) {
  GlobMatches out;
  glob_t matches;
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  if (rc != 0) {
    if (rc != GLOB_NOMATCH) out.error = "glob failed";
    if (rc != GLOB_NOSPACE) ::globfree(&matches);
    return out;
  }
  out.matched = static_cast<int64_t>(matches.gl_pathc);
  std::vector<char> probe(kBinaryProbeBytes);
  for (size_t i = 0; i < matches.gl_pathc; ++i) {
    const std::string path = matches.gl_pathv[i];
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;  // vanished meanwhile
    if (S_ISLNK(st.st_mode)) {
      ++out.symlinks;
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      ++out.not_regular;
      continue;
    }
    FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      out.error = absl::StrCat("cannot read '", path, "': ", std::strerror(errno));
      break;
    }
    const size_t n = text ? std::fread(probe.data(), 1, probe.size(), file) : 0;
    const int error = std::ferror(file) ? errno : 0;
    std::fclose(file);
    if (error != 0) {
      out.error = absl::StrCat("cannot read '", path, "': ", std::strerror(error));
      break;
    }
    if (std::memchr(probe.data(), 0, n) != nullptr) {
      ++out.binary;
      continue;
    }
    out.files.push_back(path);
  }
  ::globfree(&matches);
  return out;
}

// "95%" -> 0.95, "0.95" -> 0.95: a percentage in [0, 100] or a fraction in
// [0, 1], digits and at most one '.' (no sign, exponent or space).
std::optional<double> ParseFraction(std::string text) {
  const bool percent = !text.empty() && text.back() == '%';
  if (percent) text.pop_back();
  int digits = 0, dots = 0;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.') {
      ++dots;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  const double value = std::strtod(text.c_str(), nullptr);
  if (value > (percent ? 100.0 : 1.0)) return std::nullopt;
  return percent ? value / 100.0 : value;
}

// split = "A:B" into dataset->split_begin / split_end.
bool CheckSplit(const ast::Expr& value, DatasetSpec* dataset,
                DiagnosticSink& sink) {
  if (value.kind != ast::Expr::Kind::kString) {
    sink.Error(value.span,
               absl::StrCat("split must be a string like \"0:95%\", got ",
                            DescribeExpr(value)),
               kSplitExample);
    return false;
  }
  const std::string& text = value.text;
  const size_t colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos) {
    sink.Error(value.span,
               absl::StrCat("bad split \"", text,
                            "\": expected \"begin:end\", two fractions of the data"),
               kSplitExample);
    return false;
  }
  const std::string sides[2] = {text.substr(0, colon), text.substr(colon + 1)};
  double bounds[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    std::optional<double> fraction = ParseFraction(sides[i]);
    if (!fraction) {
      sink.Error(value.span,
                 absl::StrCat("bad split \"", text, "\": '", sides[i],
                              "' is neither a percentage like \"95%\" nor a "
                              "fraction in [0, 1] like \"0.95\""),
                 kSplitExample);
      return false;
    }
    bounds[i] = *fraction;
  }
  if (!(bounds[0] < bounds[1])) {
    sink.Error(value.span,
               absl::StrCat("bad split \"", text, "\": its beginning (", sides[0],
                            ") must come before its end (", sides[1], ")"),
               kSplitExample);
    return false;
  }
  dataset->split_begin = bounds[0];
  dataset->split_end = bounds[1];
  return true;
}

std::string RelativePathHint(const std::string& written,
                             const std::string& resolved) {
  return resolved != written
             ? absl::StrCat("relative paths are resolved against the .train "
                            "file's directory: ",
                            resolved)
             : "";
}

// "" when the files of one path or glob hold something, else why not:
// every file is empty (0 bytes). A shard with a header and no tokens is
// named by the loader, which reads the header.
std::string NothingToTrainOn(const std::vector<std::string>& paths, bool text,
                             const std::string& written) {
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || st.st_size > 0) return "";
  }
  const std::string what =
      paths.size() == 1 ? absl::StrCat("'", written, "' is")
                        : absl::StrCat("'", written, "' matches ", paths.size(), " files, all");
  return text ? absl::StrCat(what, " empty: no text to train on")
              : absl::StrCat(what, " empty (an llm.c token shard is a 1024-byte header, "
                                   "then its tokens)");
}

// tokenizer = "file.model": a SentencePiece model, resolved against the
// .train file's directory; readable when the data is read.
bool CheckTokenizer(const ast::Expr& arg, const std::string& base_dir, bool read_files,
                    DatasetSpec* dataset, DiagnosticSink& sink) {
  if (arg.kind != ast::Expr::Kind::kString) {
    sink.Error(arg.span,
               absl::StrCat("tokenizer must be a SentencePiece model's path (a string), got ",
                            DescribeExpr(arg)),
               "e.g. text(\"corpus/*.txt\", tokenizer = \"spm.model\")");
    return false;
  }
  dataset->tokenizer = ResolvePath(base_dir, arg.text);
  if (!read_files) return true;
  if (const std::string reason = NotARegularFile(dataset->tokenizer); !reason.empty()) {
    sink.Error(arg.span, absl::StrCat("cannot read tokenizer '", arg.text, "': ", reason),
               RelativePathHint(arg.text, dataset->tokenizer));
    return false;
  }
  return true;
}

// The named argument `i` of text(...) / tokens(...): split = "A:B", and
// for text(...) also tokenizer = "file.model" (a SentencePiece model).
// `seen`: the names given so far, to refuse one given twice.
bool CheckSourceOption(const ast::Expr& expr, size_t i, DataFormat format,
                       const std::string& base_dir, bool read_files,
                       std::vector<std::string>* seen, DatasetSpec* dataset,
                       DiagnosticSink& sink) {
  const ast::Expr& arg = expr.args[i];
  const std::string& name = expr.arg_names[i];
  const std::vector<std::string> named = format == DataFormat::kText
                                             ? std::vector<std::string>{"split", "tokenizer"}
                                             : std::vector<std::string>{"split"};
  if (std::find(named.begin(), named.end(), name) == named.end()) {
    sink.Error(expr.arg_name_spans[i],
               absl::StrCat("unknown argument '", name, "' to ", EnumName(format)),
               SuggestionHint(name, named, "arguments"));
    return false;
  }
  if (std::find(seen->begin(), seen->end(), name) != seen->end()) {
    sink.Error(expr.arg_name_spans[i], absl::StrCat(name, " is given twice"));
    return false;
  }
  seen->push_back(name);
  if (name == "split") return CheckSplit(arg, dataset, sink);
  return CheckTokenizer(arg, base_dir, read_files, dataset, sink);
}

// Why a glob `written` matched nothing to train on: what it matched, and
// why each match was skipped.
std::string NoFileMatched(const GlobMatches& matches, const std::string& written, bool text) {
  if (matches.matched == 0) return absl::StrCat("'", written, "' matches no file");
  std::vector<std::string> skipped;
  if (matches.symlinks > 0) skipped.push_back(Plural(matches.symlinks, "symlink"));
  if (matches.not_regular > 0) {
    skipped.push_back(absl::StrCat(matches.not_regular,
                                   matches.not_regular == 1
                                       ? " directory or special file"
                                       : " directories or special files"));
  }
  if (matches.binary > 0) {
    skipped.push_back(absl::StrCat(Plural(matches.binary, "file"),
                                   " with a NUL byte in the first 4 KiB"));
  }
  const std::string what = text ? "text file" : "regular file";
  return absl::StrCat("'", written, "' matches ", Plural(matches.matched, "path"),
                      " but no ", what, " (skipped: ", absl::StrJoin(skipped, ", "), ")");
}

// A glob argument: the files it matches, which must hold something to
// train on, appended to the dataset's paths.
bool CheckSourceGlob(const ast::Expr& arg, bool text, const std::string& base_dir,
                     DatasetSpec* dataset, DiagnosticSink& sink) {
  const bool relative = ResolvePath(base_dir, arg.text) != arg.text;
  const std::string pattern =
      relative ? absl::StrCat(EscapeGlob(base_dir), "/", arg.text) : arg.text;
  GlobMatches matches = ExpandGlob(pattern, text);
  if (!matches.error.empty()) {
    sink.Error(arg.span, absl::StrCat("'", arg.text, "': ", matches.error));
    return false;
  }
  if (matches.files.empty()) {
    sink.Error(arg.span, NoFileMatched(matches, arg.text, text),
               relative ? RelativePathHint(arg.text, pattern)
                        : "a glob matches regular files only, not symlinks");
    return false;
  }
  if (const std::string empty = NothingToTrainOn(matches.files, text, arg.text);
      !empty.empty()) {
    sink.Error(arg.span, empty);
    return false;
  }
  for (std::string& path : matches.files) dataset->paths.push_back(std::move(path));
  return true;
}

// A positional argument of text(...) / tokens(...): a file path or glob,
// resolved against the .train file's directory; with `read_files` its
// files must be readable and hold something to train on.
bool CheckSourcePath(const ast::Expr& arg, DataFormat format, const std::string& base_dir,
                     bool read_files, DatasetSpec* dataset, DiagnosticSink& sink) {
  const bool text = format == DataFormat::kText;
  if (arg.kind != ast::Expr::Kind::kString) {
    sink.Error(arg.span,
               absl::StrCat("expected a file path or glob (a string), got ",
                            DescribeExpr(arg)),
               ExampleFor(format));
    return false;
  }
  const std::string resolved = ResolvePath(base_dir, arg.text);
  if (!read_files) {  // the form only: a path or glob as written, resolved
    dataset->paths.push_back(resolved);
    return true;
  }
  if (IsGlob(arg.text)) return CheckSourceGlob(arg, text, base_dir, dataset, sink);
  const std::string& path = resolved;
  const std::string reason = NotARegularFile(path);
  if (!reason.empty()) {
    sink.Error(arg.span, absl::StrCat("cannot read '", arg.text, "': ", reason),
               RelativePathHint(arg.text, path));
    return false;
  }
  if (const std::string empty = NothingToTrainOn({path}, text, arg.text); !empty.empty()) {
    sink.Error(arg.span, empty);
    return false;
  }
  dataset->paths.push_back(path);
  return true;
}

// text(paths..., split = "A:B"[, tokenizer = "file.model"]) /
// tokens(paths..., split = "A:B").
// `format`: kText or kTokens, `expr`'s name.
std::optional<DatasetSpec> CheckTokenSource(const ast::Expr& expr, DataFormat format,
                                            const std::string& base_dir, bool read_files,
                                            DiagnosticSink& sink) {
  DatasetSpec dataset;
  dataset.format = format;
  bool ok = true;
  std::vector<std::string> seen;
  int positional = 0;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    if (!expr.arg_names[i].empty()) {
      ok &= CheckSourceOption(expr, i, format, base_dir, read_files, &seen, &dataset, sink);
      continue;
    }
    ++positional;
    ok &= CheckSourcePath(expr.args[i], format, base_dir, read_files, &dataset, sink);
  }
  if (positional == 0) {
    sink.Error(expr.span,
               absl::StrCat(EnumName(format), " needs at least one file path or glob"),
               ExampleFor(format));
    ok = false;
  }
  if (!ok) return std::nullopt;
  return dataset;
}

std::optional<DatasetSpec> CheckDataset(const Setting& setting,
                                        const std::string& base_dir, bool read_files,
                                        DiagnosticSink& sink) {
  const ast::Expr& expr = *setting.expr;
  if (expr.kind != ast::Expr::Kind::kCall) {
    ReportSetting(setting, sink,
                  absl::StrCat(setting.field, " must be a data source, got ",
                               DescribeExpr(expr)),
                  "e.g. text(\"corpus/*.txt\"), tokens(\"shards/train_*.bin\") "
                  "or idx(\"images.gz\", \"labels.gz\")");
    return std::nullopt;
  }
  const std::optional<DataFormat> format = ParseEnum<DataFormat>(expr.text);
  if (format == DataFormat::kText || format == DataFormat::kTokens) {
    return CheckTokenSource(expr, *format, base_dir, read_files, sink);
  }
  if (format != DataFormat::kIdx) {
    sink.Error(expr.name_span,
               absl::StrCat("unknown data format '", expr.text, "'"),
               SuggestionHint(expr.text, EnumNames<DataFormat>(), "formats"));
    return std::nullopt;
  }
  const std::string example = kIdxExample;
  if (expr.args.size() != 2) {
    sink.Error(expr.span,
               absl::StrCat("idx takes 2 arguments (images, labels), got ",
                            expr.args.size()),
               example);
    return std::nullopt;
  }
  DatasetSpec dataset;
  dataset.format = DataFormat::kIdx;
  bool ok = true;
  for (size_t i = 0; i < expr.args.size(); ++i) {
    const ast::Expr& arg = expr.args[i];
    if (!expr.arg_names[i].empty()) {
      sink.Error(expr.arg_name_spans[i], "idx takes positional arguments",
                 example);
      ok = false;
      continue;
    }
    if (arg.kind != ast::Expr::Kind::kString) {
      sink.Error(arg.span,
                 absl::StrCat("expected a file path (a string), got ",
                              DescribeExpr(arg)),
                 example);
      ok = false;
      continue;
    }
    const std::string path = ResolvePath(base_dir, arg.text);
    const std::string reason = read_files ? CannotRead(path) : "";
    if (!reason.empty()) {
      sink.Error(arg.span, absl::StrCat("cannot read '", arg.text, "': ", reason),
                 RelativePathHint(arg.text, path));
      ok = false;
      continue;
    }
    dataset.paths.push_back(path);
  }
  if (!ok) return std::nullopt;
  return dataset;
}

}  // namespace

std::optional<DataSpec> CheckData(const ast::Block& block,
                                  const std::string& base_dir,
                                  DiagnosticSink& sink, bool read_files) {
  const int errors_before = sink.error_count();
  const std::map<std::string, Setting> settings =
      FileSettings(block, "data", DataFields(), sink);

  DataSpec data;
  if (auto it = settings.find("train"); it != settings.end()) {
    if (auto dataset = CheckDataset(it->second, base_dir, read_files, sink)) {
      data.train = *dataset;
    }
  } else {
    sink.Error(block.kind_span, "data { } needs a train source",
               "e.g. train = idx(\"train-images-idx3-ubyte.gz\", "
               "\"train-labels-idx1-ubyte.gz\")");
  }
  if (auto it = settings.find("eval"); it != settings.end()) {
    if (auto dataset = CheckDataset(it->second, base_dir, read_files, sink)) {
      // One format per plan (DataConfig::format).
      if (data.train.format != DataFormat::kNone && dataset->format != data.train.format) {
        sink.Error(it->second.expr->name_span,
                   absl::StrCat("eval is ", EnumName(dataset->format), "(...) but train is ",
                                EnumName(data.train.format), "(...)"),
                   "both sets must have the same format");
      }
      if (dataset->tokenizer != data.train.tokenizer) {
        sink.Error(it->second.expr->name_span,
                   dataset->tokenizer.empty()
                       ? "eval has no tokenizer but train has one"
                       : "eval's tokenizer is not train's",
                   "both sets must be tokenized alike (one vocabulary)");
      }
      data.eval = *dataset;
    }
  }
  if (auto it = settings.find("scale"); it != settings.end()) {
    if (auto v = NumberAtLeast(it->second, 0, false, sink)) data.scale = *v;
  }
  if (auto it = settings.find("shuffle"); it != settings.end()) {
    if (auto v = Bool(it->second, sink)) data.shuffle = *v;
  }
  // Augmentation moves pixels: images only.
  auto images_only = [&](const Setting& s) {
    if (data.train.format == DataFormat::kNone || data.train.format == DataFormat::kIdx) {
      return true;
    }
    sink.Error(s.expr ? s.expr->span : s.name_span,
               absl::StrCat(s.field, " augments images: it needs idx(...) data, not ",
                            EnumName(data.train.format), "(...)"));
    return false;
  };
  if (auto it = settings.find("random_crop"); it != settings.end()) {
    if (auto v = NumberAtLeast(it->second, 0, false, sink)) {
      if (*v != std::floor(*v) || *v > 64) {
        sink.Error(it->second.expr->span,
                   "random_crop is a shift in whole pixels, at most 64",
                   "e.g. random_crop = 2 (PyTorch's RandomCrop(28, padding = 2))");
      } else if (images_only(it->second)) {
        data.random_crop = static_cast<int64_t>(*v);
      }
    }
  }
  if (auto it = settings.find("random_flip"); it != settings.end()) {
    if (auto v = Bool(it->second, sink)) {
      if (images_only(it->second)) data.random_flip = *v;
    }
  }
  if (sink.error_count() > errors_before) return std::nullopt;
  return data;
}

namespace {

// rows x cols from an IDX images header (plain or gzip), or nullopt when
// the file cannot be read as one (the loader reports that, in full).
std::optional<std::pair<int64_t, int64_t>> IdxImageSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  unsigned char header[16];
  const int got = gzread(f, header, sizeof(header));
  gzclose(f);
  if (got != static_cast<int>(sizeof(header))) return std::nullopt;
  auto word = [&](int i) {
    return (int64_t{header[4 * i]} << 24) | (int64_t{header[4 * i + 1]} << 16) |
           (int64_t{header[4 * i + 2]} << 8) | int64_t{header[4 * i + 3]};
  };
  if (word(0) != 0x00000803) return std::nullopt;  // u8, 3 dimensions
  return std::make_pair(word(2), word(3));
}

}  // namespace

void CheckDataFitsModel(const ModelSpec& model, const DataSpec& data,
                        DiagnosticSink& sink) {
  const ValueSpec* input = nullptr;
  for (const ValueSpec& v : model.inputs) {
    if (v.type == ElementType::kF32) {
      input = &v;
      break;
    }
  }
  if (input == nullptr) return;
  int64_t values = 1;
  for (int64_t d : input->shape) values *= d;
  std::string declared = "[";
  for (size_t i = 0; i < input->shape.size(); ++i) {
    absl::StrAppend(&declared, i ? ", " : "", input->shape[i]);
  }
  declared += "]";
  for (const DatasetSpec* set : {&data.train, &data.eval}) {
    if (set->format != DataFormat::kIdx || set->paths.empty()) continue;
    const std::optional<std::pair<int64_t, int64_t>> size = IdxImageSize(set->paths[0]);
    if (!size || size->first * size->second == values) continue;
    const Span at{input->location.line, input->location.column,
                  static_cast<int>(input->name.size())};
    sink.Error(at,
               absl::StrCat("input ", input->name, " is f32", declared, " (", values,
                            " values per example) but ", set->paths[0], " holds ",
                            size->first, "x", size->second, " images (",
                            size->first * size->second, " values)"),
               absl::StrCat("declare input ", input->name, ": f32[1, ", size->first, ", ",
                            size->second, "] for convolutions, or f32[",
                            size->first * size->second, "]"));
    return;
  }
}

}  // namespace trainc::frontend
