#include "runtime/data/pixel_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/data/idx.h"

namespace trainc {
namespace {

// The cache file: this header, then count * rows * cols bytes.
struct CacheHeader {
  char magic[8];  // "TRNCPX1\0"
  int64_t count, rows, cols;
};
constexpr char kMagic[8] = {'T', 'R', 'N', 'C', 'P', 'X', '1', '\0'};

class OwnedPixels : public PixelBlock {
 public:
  explicit OwnedPixels(std::vector<uint8_t> v) : bytes_(std::move(v)) {}
  absl::Span<const uint8_t> pixels() const override { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

class MappedPixels : public PixelBlock {
 public:
  MappedPixels(void* base, size_t length) : base_(base), length_(length) {}
  ~MappedPixels() override { ::munmap(base_, length_); }
  absl::Span<const uint8_t> pixels() const override {
    return {static_cast<const uint8_t*>(base_) + sizeof(CacheHeader),
            length_ - sizeof(CacheHeader)};
  }

 private:
  void* base_;
  size_t length_;
};

std::string CacheDir() {
  if (const char* d = std::getenv("TRAINC_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/trainc";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/trainc";
  return "";
}

// FNV-1a 64 of the file's identity: path, size, modification time.
std::string CacheName(const std::string& path, const struct stat& st) {
  std::string key = absl::StrCat(path, "|", st.st_size, "|", st.st_mtim.tv_sec, ".",
                                 st.st_mtim.tv_nsec);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return absl::StrCat("idx-", absl::Hex(h, absl::kZeroPad16), ".pixels");
}

// Maps `cache` when it is a whole cache file; nullptr otherwise.
std::shared_ptr<const PixelBlock> MapCache(const std::string& cache) {
  const int fd = ::open(cache.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return nullptr;
  struct stat st;
  CacheHeader h;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size < static_cast<off_t>(sizeof(h)) ||
      ::pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)) ||
      std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.count < 0 || h.rows <= 0 ||
      h.cols <= 0 || h.rows > (1 << 24) || h.cols > (1 << 24) ||
      st.st_size != static_cast<off_t>(sizeof(h) + h.count * h.rows * h.cols)) {
    ::close(fd);
    return nullptr;
  }
  void* base = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return nullptr;
  auto block = std::make_shared<MappedPixels>(base, static_cast<size_t>(st.st_size));
  block->count = h.count;
  block->rows = h.rows;
  block->cols = h.cols;
  block->shared = true;
  block->cache_path = cache;
  return block;
}

// Writes the cache file atomically; false when it cannot (no room, a
// read-only folder): the caller keeps its own copy.
bool WriteCache(const std::string& cache, const IdxImages& images) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(cache).parent_path(), error);
  std::string tmp = cache + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return false;
  CacheHeader h;
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.count = images.count;
  h.rows = images.rows;
  h.cols = images.cols;
  bool ok = ::write(fd, &h, sizeof(h)) == static_cast<ssize_t>(sizeof(h));
  size_t done = 0;
  while (ok && done < images.pixels.size()) {
    const ssize_t n = ::write(fd, images.pixels.data() + done, images.pixels.size() - done);
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ::close(fd) == 0 && ok && ::chmod(tmp.c_str(), 0644) == 0 &&
       ::rename(tmp.c_str(), cache.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PixelBlock>> LoadIdxPixels(const std::string& path) {
  struct stat st;
  const std::string dir = CacheDir();
  const bool cacheable = !dir.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  std::error_code error;
  const std::string absolute = std::filesystem::absolute(path, error).string();
  const std::string cache = cacheable ? dir + "/" + CacheName(absolute, st) : "";
  if (cacheable) {
    if (auto mapped = MapCache(cache)) return mapped;
  }
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  if (!images.ok()) return images.status();
  if (cacheable && WriteCache(cache, *images)) {
    if (auto mapped = MapCache(cache)) return mapped;
  }
  auto owned = std::make_shared<OwnedPixels>(std::move(images->pixels));
  owned->count = images->count;
  owned->rows = images->rows;
  owned->cols = images->cols;
  return owned;
}

}  // namespace trainc
