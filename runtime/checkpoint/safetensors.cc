#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/atomic_file.h"
#include "runtime/json/json.h"

namespace trainc {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is copied as is");

// The reference implementation's limit; a larger header means a bad file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

absl::StatusOr<std::string> BuildHeader(
    const std::vector<TensorRef>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> entries;
  if (!metadata.empty()) {
    std::vector<std::string> items;
    for (const auto& [key, value] : metadata) {
      items.push_back(absl::StrCat(JsonQuote(key), ":", JsonQuote(value)));
    }
    entries.push_back(
        absl::StrCat("\"__metadata__\":{", absl::StrJoin(items, ","), "}"));
  }
  int64_t offset = 0;
  for (const TensorRef& t : tensors) {
    ASSIGN_OR_RETURN(int64_t element_bytes, SafetensorsDTypeBytes(t.dtype));
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    if (elements * element_bytes != static_cast<int64_t>(t.data.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "': ", t.dtype, "[", absl::StrJoin(t.shape, ","),
          "] needs ", elements * element_bytes, " bytes, got ",
          t.data.size()));
    }
    if (t.name == "__metadata__") {
      return absl::InvalidArgumentError("'__metadata__' is not a tensor name");
    }
    entries.push_back(absl::StrCat(
        JsonQuote(t.name), ":{\"dtype\":", JsonQuote(t.dtype), ",\"shape\":[",
        absl::StrJoin(t.shape, ","), "],\"data_offsets\":[", offset, ",",
        offset + t.data.size(), "]}"));
    offset += t.data.size();
  }
  std::string header = absl::StrCat("{", absl::StrJoin(entries, ","), "}");
  // Spaces after the JSON are legal and align the data to 8 bytes, as the
  // reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

std::string LengthPrefix(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

absl::StatusOr<std::vector<int64_t>> IntegerArray(const JsonValue& v,
                                                  const std::string& what) {
  if (!v.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not an array"));
  }
  std::vector<int64_t> out;
  for (const JsonValue& e : v.array_items()) {
    if (!e.is_integer() || e.integer_value() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " holds something other than a non-negative "
                             "integer"));
    }
    out.push_back(e.integer_value());
  }
  return out;
}

}  // namespace

absl::StatusOr<int64_t> SafetensorsDTypeBytes(const std::string& dtype) {
  static const auto* const kBytes = new std::map<std::string, int64_t>{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"I16", 2},  {"U16", 2},
      {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},
      {"I64", 8},  {"U64", 8},  {"F64", 8}};
  auto it = kBytes->find(dtype);
  if (it == kBytes->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown safetensors dtype '", dtype, "'"));
  }
  return it->second;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const std::vector<TensorRef>& tensors,
    const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(std::string header, BuildHeader(tensors, metadata));
  std::string out = LengthPrefix(header.size()) + header;
  for (const TensorRef& t : tensors) out.append(t.data.data(), t.data.size());
  return out;
}

absl::Status WriteSafetensorsFile(
    const std::string& path, const std::vector<TensorRef>& tensors,
    const std::map<std::string, std::string>& metadata) {
  return WriteSafetensorsFiles({{path, tensors, metadata}});
}

absl::Status WriteSafetensorsFiles(const std::vector<SafetensorsOutput>& files) {
  std::vector<std::string> temporaries;
  absl::Status status;
  for (const SafetensorsOutput& file : files) {
    absl::StatusOr<std::string> header = BuildHeader(file.tensors, file.metadata);
    absl::StatusOr<std::string> tmp;
    if (!header.ok()) {
      tmp = header.status();
    } else {
      tmp = WriteTemporaryFile(file.path, [&](int fd, const std::string& tmp) -> absl::Status {
        const std::string prefix = LengthPrefix(header->size());
        RETURN_IF_ERROR(WriteAll(fd, prefix.data(), prefix.size(), tmp));
        RETURN_IF_ERROR(WriteAll(fd, header->data(), header->size(), tmp));
        for (const TensorRef& t : file.tensors) {
          RETURN_IF_ERROR(WriteAll(fd, t.data.data(), t.data.size(), tmp));
        }
        return absl::OkStatus();
      });
    }
    if (!tmp.ok()) {
      status = tmp.status();
      break;
    }
    temporaries.push_back(*tmp);
  }
  if (!status.ok()) {
    for (const std::string& tmp : temporaries) ::unlink(tmp.c_str());
    return status;
  }
  // The first file last: its name under its final name marks the set whole.
  for (size_t i = files.size(); i-- > 0;) {
    absl::Status committed = CommitTemporaryFile(temporaries[i], files[i].path);
    if (!committed.ok()) {
      for (size_t j = 0; j < i; ++j) ::unlink(temporaries[j].c_str());
      return committed;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular
  // file is read (a FIFO would hang every rank, /dev/zero never ends).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a regular file (a checkpoint is a .safetensors file)"));
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      absl::Status error = ErrnoError("read failed", path);
      ::close(fd);
      return error;
    }
    if (got == 0) break;
    bytes.append(buffer, got);
  }
  ::close(fd);
  return Parse(std::move(bytes), path);
}

namespace {

// The errors below are what is wrong, without the file's name: Parse
// prefixes it.
absl::Status Bad(const std::string& what) { return absl::DataLossError(what); }

// "__metadata__": string values only.
absl::Status ParseMetadata(const JsonValue& value, std::map<std::string, std::string>* out) {
  if (!value.is_object()) return Bad("__metadata__ is not an object");
  for (const auto& [mkey, mvalue] : value.object_items()) {
    if (!mvalue.is_string()) {
      return Bad(absl::StrCat("metadata '", mkey, "' is not a string"));
    }
    (*out)[mkey] = mvalue.string_value();
  }
  return absl::OkStatus();
}

// A tensor's header entry: its dtype, shape and data offsets, which must
// agree and lie within the `data_bytes` of the data section.
absl::StatusOr<SafetensorsFile::Tensor> ParseTensorEntry(const std::string& key,
                                                         const JsonValue& value,
                                                         int64_t data_bytes) {
  const std::string where = absl::StrCat("tensor '", key, "'");
  if (!value.is_object() || value.object_items().size() != 3) {
    return Bad(absl::StrCat(where, " must be an object of dtype, shape and data_offsets"));
  }
  const JsonValue* dtype = value.Find("dtype");
  const JsonValue* shape = value.Find("shape");
  const JsonValue* offsets = value.Find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr || !dtype->is_string()) {
    return Bad(absl::StrCat(where, " must be an object of dtype, shape and data_offsets"));
  }
  SafetensorsFile::Tensor t;
  t.dtype = dtype->string_value();
  auto element_bytes = SafetensorsDTypeBytes(t.dtype);
  if (!element_bytes.ok()) {
    return Bad(absl::StrCat(where, ": ", element_bytes.status().message()));
  }
  auto dims = IntegerArray(*shape, where + " shape");
  if (!dims.ok()) return Bad(std::string(dims.status().message()));
  t.shape = *std::move(dims);
  auto range = IntegerArray(*offsets, where + " data_offsets");
  if (!range.ok()) return Bad(std::string(range.status().message()));
  if (range->size() != 2 || (*range)[0] > (*range)[1]) {
    return Bad(absl::StrCat(where, ": data_offsets must be [begin, end]"));
  }
  t.begin = (*range)[0];
  t.end = (*range)[1];
  int64_t elements = 1;
  for (int64_t d : t.shape) {
    if (d != 0 && elements > (INT64_MAX / 8) / d) {
      return Bad(absl::StrCat(where, ": shape [", absl::StrJoin(t.shape, ","),
                              "] is too large to be real"));
    }
    elements *= d;
  }
  if (elements * *element_bytes != t.end - t.begin) {
    return Bad(absl::StrCat(where, ": ", t.dtype, "[", absl::StrJoin(t.shape, ","),
                            "] needs ", elements * *element_bytes,
                            " bytes, its offsets span ", t.end - t.begin));
  }
  if (t.end > data_bytes) {
    return Bad(absl::StrCat("truncated: ", where, " ends at data byte ", t.end,
                            " but the file holds ", data_bytes));
  }
  return t;
}

// The tensors must tile the data section: no holes, no overlaps.
absl::Status CheckTiling(const std::map<std::string, SafetensorsFile::Tensor>& tensors,
                         int64_t data_bytes) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& [key, t] : tensors) ranges.emplace_back(t.begin, t.end);
  std::sort(ranges.begin(), ranges.end());
  int64_t expected = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != expected) {
      return Bad(absl::StrCat("tensor data overlaps or leaves a gap at byte ",
                              std::min(begin, expected)));
    }
    expected = end;
  }
  if (expected != data_bytes) {
    return Bad(absl::StrCat(data_bytes - expected, " bytes after the last tensor's data"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(
    std::string bytes, const std::string& name) {
  auto error = [&name](const std::string& what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  if (bytes.size() < 8) {
    return error(absl::StrCat("too short for a safetensors file (", bytes.size(),
                              " bytes)"));
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) {
    return error(absl::StrCat("header length ", header_bytes,
                              " does not fit the file of ", bytes.size(),
                              " bytes (truncated or not safetensors)"));
  }
  auto json = ParseJson(absl::string_view(bytes).substr(8, header_bytes));
  if (!json.ok()) return error(absl::StrCat("bad header: ", json.status().message()));
  if (!json->is_object()) {
    return error("the header is not a JSON object");
  }

  SafetensorsFile file;
  file.data_start_ = 8 + header_bytes;
  const int64_t data_bytes = bytes.size() - file.data_start_;
  for (const auto& [key, value] : json->object_items()) {
    if (key == "__metadata__") {
      if (absl::Status s = ParseMetadata(value, &file.metadata_); !s.ok()) {
        return error(std::string(s.message()));
      }
      continue;
    }
    absl::StatusOr<Tensor> t = ParseTensorEntry(key, value, data_bytes);
    if (!t.ok()) return error(std::string(t.status().message()));
    file.tensors_.emplace(key, *std::move(t));
  }
  if (absl::Status s = CheckTiling(file.tensors_, data_bytes); !s.ok()) {
    return error(std::string(s.message()));
  }
  file.bytes_ = std::move(bytes);
  return file;
}

const SafetensorsFile::Tensor* SafetensorsFile::Find(
    const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::Span<const char> SafetensorsFile::Data(const Tensor& tensor) const {
  return absl::Span<const char>(bytes_.data() + data_start_ + tensor.begin,
                                tensor.end - tensor.begin);
}

}  // namespace trainc
