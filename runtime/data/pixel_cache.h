// One read-only copy of an IDX image set per machine, shared by its ranks.
//
// Each rank used to decompress the images and keep them as floats (188 MB
// for Fashion-MNIST's training set, 400 MB at the peak, per rank). Now the
// first rank to load a file writes its pixels, decompressed, to a cache
// file (atomically; ranks racing write the same bytes) and every rank maps
// that file read-only: the page cache holds one copy, whatever the rank
// count, and a later run starts without decompressing. Pixels stay bytes;
// the loader scales them to floats row by row.
//
// The cache folder is $TRAINC_CACHE_DIR, else $XDG_CACHE_HOME/trainc, else
// ~/.cache/trainc; the file is named after the image file's path, size and
// modification time, so an edited data set gets a new one. Where no cache
// can be written, the pixels are read into this process's memory as before.
#ifndef TRAINC_RUNTIME_DATA_PIXEL_CACHE_H_
#define TRAINC_RUNTIME_DATA_PIXEL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace trainc {

// count images of rows x cols bytes, row-major, in memory shared (mapped)
// or owned.
class PixelBlock {
 public:
  virtual ~PixelBlock() = default;
  int64_t count = 0, rows = 0, cols = 0;
  bool shared = false;  // mapped from the cache file
  std::string cache_path;
  virtual absl::Span<const uint8_t> pixels() const = 0;
};

// The pixels of the IDX images file `path` (plain or gzip), through the
// cache. Errors are the IDX reader's (naming the file).
absl::StatusOr<std::shared_ptr<const PixelBlock>> LoadIdxPixels(const std::string& path);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_DATA_PIXEL_CACHE_H_
