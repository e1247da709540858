#include "runtime/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // u8, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // u8, 1 dimension
// Larger sizes are certainly corruption. Three such dimensions still
// multiply past int64 (2^72), so the total is bounded separately.
constexpr int64_t kMaxDim = 1 << 24;
// 2^40 bytes: far beyond any IDX file, and count * rows * cols below it is
// computed without overflow.
constexpr int64_t kMaxBytes = int64_t{1} << 40;
// Storage grows with the data actually read, this much at a time, so a
// header that promises more than the file holds costs no more memory than
// the file (plus one chunk).
constexpr int64_t kReadChunk = int64_t{64} << 20;

// The file name without its directory, as people know it.
std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// gzread reads plain files unchanged, so one code path serves both.
class IdxFile {
 public:
  static absl::StatusOr<IdxFile> Open(const std::string& path) {
    // Only a regular file: a FIFO would hang every rank waiting for a
    // writer (O_NONBLOCK: opening it does not wait), /dev/zero never ends.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": not a regular file (an IDX data set is a file, optionally gzipped)"));
    }
    // Reads block again (a regular file never waits anyway).
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    errno = 0;
    gzFile f = gzdopen(fd, "rb");
    if (f == nullptr) {
      ::close(fd);
      return absl::NotFoundError(absl::StrCat(
          path, ": cannot open: ",
          errno != 0 ? std::strerror(errno) : "out of memory"));
    }
    // The default 8 KiB buffer makes reading 47 MB of pixels slow.
    gzbuffer(f, 1 << 20);
    return IdxFile(path, f);
  }

  const std::string& name() const { return name_; }

  // Reads up to `n` bytes; returns how many were read (fewer at the end of
  // the file) or the decompression error.
  absl::StatusOr<int64_t> Read(void* dst, int64_t n) {
    int64_t done = 0;
    char* out = static_cast<char*>(dst);
    while (done < n) {
      // gzread takes an unsigned int count.
      unsigned chunk = static_cast<unsigned>(std::min<int64_t>(n - done, 1 << 30));
      int got = gzread(file_.get(), out + done, chunk);
      if (got < 0) {
        int errnum = 0;
        const char* msg = gzerror(file_.get(), &errnum);
        if (errnum == Z_ERRNO) msg = std::strerror(errno);
        return absl::DataLossError(absl::StrCat(
            name_, ": corrupt gzip data after ", offset_ + done,
            " bytes: ", msg));
      }
      if (got == 0) break;
      done += got;
    }
    offset_ += done;
    return done;
  }

  absl::StatusOr<uint32_t> ReadBigEndian32(const char* what) {
    unsigned char b[4];
    ASSIGN_OR_RETURN(int64_t got, Read(b, 4));
    if (got != 4) {
      return absl::DataLossError(absl::StrCat(
          name_, ": file ends inside the header (reading ", what, ")"));
    }
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
           (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  // Checks the magic number and reads the dimensions.
  absl::StatusOr<std::vector<int64_t>> ReadHeader(uint32_t magic,
                                                  const char* kind) {
    ASSIGN_OR_RETURN(uint32_t got, ReadBigEndian32("the magic number"));
    if (got != magic) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: bad magic number 0x%08x, expected 0x%08x (IDX %s of unsigned "
          "bytes); is this the right file?",
          name_, got, magic, kind));
    }
    std::vector<int64_t> dims(magic & 0xff);
    for (size_t i = 0; i < dims.size(); ++i) {
      ASSIGN_OR_RETURN(uint32_t d, ReadBigEndian32("the dimensions"));
      if (d > kMaxDim) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, ": dimension ", i, " is ", d, ", too large to be real"));
      }
      dims[i] = d;
    }
    return dims;
  }

  // Reads up to `n` bytes into `out` (replacing its contents), growing it
  // as the bytes arrive rather than allocating `n` up front; returns how
  // many were read.
  absl::StatusOr<int64_t> ReadInto(std::vector<uint8_t>* out, int64_t n) {
    out->clear();
    out->reserve(static_cast<size_t>(std::min(n, kReadChunk)));
    int64_t done = 0;
    while (done < n) {
      const int64_t want = std::min(n - done, kReadChunk);
      out->resize(static_cast<size_t>(done + want));
      ASSIGN_OR_RETURN(int64_t got, Read(out->data() + done, want));
      done += got;
      if (got < want) break;
    }
    out->resize(static_cast<size_t>(done));
    return done;
  }

  // Fails unless the data ended exactly where the header said it would.
  absl::Status ExpectEnd() {
    char extra;
    ASSIGN_OR_RETURN(int64_t got, Read(&extra, 1));
    if (got != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": unexpected data after the last item (offset ", offset_ - 1,
          "); the header's sizes do not match the file"));
    }
    return absl::OkStatus();
  }

 private:
  IdxFile(const std::string& path, gzFile f)
      : name_(BaseName(path)), file_(f) {}

  std::string name_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
  int64_t offset_ = 0;
};

}  // namespace

absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path) {
  ASSIGN_OR_RETURN(IdxFile file, IdxFile::Open(path));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                   file.ReadHeader(kImagesMagic, "images"));
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  const int64_t per_image = images.rows * images.cols;
  if (per_image == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.name(), ": images of ", images.rows, "x", images.cols,
        " pixels are empty"));
  }
  // per_image <= 2^48, so the division is exact and nothing overflows.
  if (images.count > kMaxBytes / per_image) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.name(), ": ", images.count, " images of ", images.rows, "x",
        images.cols, " pixels are too large to be real"));
  }
  const int64_t total = images.count * per_image;
  ASSIGN_OR_RETURN(int64_t got, file.ReadInto(&images.pixels, total));
  if (got != total) {
    return absl::DataLossError(absl::StrCat(
        file.name(), ": expected ", images.count, " images of ", images.rows,
        "x", images.cols, ", file ends after ", got / per_image,
        " (and ", got % per_image, " bytes)"));
  }
  RETURN_IF_ERROR(file.ExpectEnd());
  return images;
}

absl::StatusOr<IdxLabels> ReadIdxLabels(const std::string& path) {
  ASSIGN_OR_RETURN(IdxFile file, IdxFile::Open(path));
  ASSIGN_OR_RETURN(std::vector<int64_t> dims,
                   file.ReadHeader(kLabelsMagic, "labels"));
  IdxLabels labels;
  ASSIGN_OR_RETURN(int64_t got, file.ReadInto(&labels.labels, dims[0]));
  if (got != dims[0]) {
    return absl::DataLossError(absl::StrCat(file.name(), ": expected ", dims[0],
                                            " labels, file ends after ", got));
  }
  RETURN_IF_ERROR(file.ExpectEnd());
  return labels;
}

}  // namespace trainc
