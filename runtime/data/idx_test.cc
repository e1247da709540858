#include "runtime/data/idx.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <stdexcept>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/dataset.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void BigEndian32(std::vector<unsigned char>* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(v >> shift);
}

std::vector<unsigned char> ImagesFile(uint32_t count, uint32_t rows,
                                      uint32_t cols, int64_t pixels) {
  std::vector<unsigned char> bytes;
  BigEndian32(&bytes, 0x00000803);
  BigEndian32(&bytes, count);
  BigEndian32(&bytes, rows);
  BigEndian32(&bytes, cols);
  for (int64_t i = 0; i < pixels; ++i) bytes.push_back(i % 251);
  return bytes;
}

std::vector<unsigned char> LabelsFile(uint32_t count, int64_t labels) {
  std::vector<unsigned char> bytes;
  BigEndian32(&bytes, 0x00000801);
  BigEndian32(&bytes, count);
  for (int64_t i = 0; i < labels; ++i) bytes.push_back(i % 10);
  return bytes;
}

std::string WriteRaw(const std::string& name,
                     const std::vector<unsigned char>& bytes) {
  std::string path = TempPath(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

std::string WriteGz(const std::string& name,
                    const std::vector<unsigned char>& bytes) {
  std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), bytes.size());
  gzclose(f);
  return path;
}

TEST(IdxTest, ReadsPlainAndGzipImages) {
  auto bytes = ImagesFile(3, 2, 4, 24);
  for (const std::string& path :
       {WriteRaw("img-idx3-ubyte", bytes), WriteGz("img-idx3-ubyte.gz", bytes)}) {
    auto images = ReadIdxImages(path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->count, 3);
    EXPECT_EQ(images->rows, 2);
    EXPECT_EQ(images->cols, 4);
    ASSERT_EQ(images->pixels.size(), 24u);
    EXPECT_EQ(images->pixels[23], 23);
  }
}

TEST(IdxTest, ReadsLabels) {
  auto labels = ReadIdxLabels(WriteGz("lab-idx1-ubyte.gz", LabelsFile(12, 12)));
  ASSERT_TRUE(labels.ok()) << labels.status();
  ASSERT_EQ(labels->labels.size(), 12u);
  EXPECT_EQ(labels->labels[11], 1);
}

TEST(IdxTest, TruncatedLabelsNameTheFileAndTheCount) {
  auto labels =
      ReadIdxLabels(WriteGz("train-labels-idx1-ubyte.gz", LabelsFile(600, 587)));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(),
              HasSubstr("train-labels-idx1-ubyte.gz: expected 600 labels, "
                        "file ends after 587"));
}

TEST(IdxTest, TruncatedImages) {
  auto images = ReadIdxImages(WriteRaw("short-idx3-ubyte", ImagesFile(5, 2, 2, 11)));
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(images.status().message(),
              HasSubstr("short-idx3-ubyte: expected 5 images of 2x2, file "
                        "ends after 2 (and 3 bytes)"));
}

TEST(IdxTest, TrailingData) {
  auto labels = ReadIdxLabels(WriteRaw("long-idx1-ubyte", LabelsFile(4, 6)));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(), HasSubstr("long-idx1-ubyte: unexpected data"));
}

TEST(IdxTest, WrongMagicSaysWhatWasExpected) {
  // A labels file where images are expected.
  auto images = ReadIdxImages(WriteRaw("swapped", LabelsFile(4, 4)));
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(images.status().message(),
              HasSubstr("swapped: bad magic number 0x00000801, expected "
                        "0x00000803"));
}

TEST(IdxTest, HeaderTooShort) {
  auto labels = ReadIdxLabels(WriteRaw("tiny", {0, 0, 8}));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(),
              HasSubstr("tiny: file ends inside the header"));
}

TEST(IdxTest, MissingFile) {
  auto labels = ReadIdxLabels(TempPath("no-such-file.gz"));
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(labels.status().message(), HasSubstr("no-such-file.gz: cannot open"));
}

TEST(IdxTest, CorruptGzip) {
  // A valid gzip stream with its deflate payload damaged.
  std::string good = WriteGz("corrupt.gz", LabelsFile(5000, 5000));
  FILE* f = std::fopen(good.c_str(), "rb");
  std::vector<unsigned char> bytes(1 << 16);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  std::fclose(f);
  for (size_t i = 12; i < bytes.size() - 8; ++i) bytes[i] ^= 0x5a;
  auto labels = ReadIdxLabels(WriteRaw("corrupt.gz", bytes));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(labels.status().message(), HasSubstr("corrupt.gz: "));
}

TEST(IdxTest, TruncatedGzip) {
  std::string good = WriteGz("cut.gz", ImagesFile(100, 8, 8, 6400));
  FILE* f = std::fopen(good.c_str(), "rb");
  std::vector<unsigned char> bytes(1 << 16);
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), f));
  std::fclose(f);
  bytes.resize(bytes.size() / 2);
  auto images = ReadIdxImages(WriteRaw("cut.gz", bytes));
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(images.status().message(), HasSubstr("cut.gz: "));
}

// While alive, this process may map at most `headroom` more bytes, so a
// reader that trusts a header's sizes fails fast (bad_alloc) instead of
// allocating gigabytes.
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(int64_t headroom) {
    getrlimit(RLIMIT_AS, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = MappedBytes() + headroom;
    if (saved_.rlim_max != RLIM_INFINITY && limit.rlim_cur > saved_.rlim_max) {
      limit.rlim_cur = saved_.rlim_max;
    }
    EXPECT_EQ(setrlimit(RLIMIT_AS, &limit), 0);
  }
  ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &saved_); }

 private:
  static int64_t MappedBytes() {
    std::ifstream status("/proc/self/status");
    std::string key;
    int64_t kb = 0;
    while (status >> key) {
      if (key == "VmSize:") {
        status >> kb;
        break;
      }
    }
    return kb * 1024;
  }
  rlimit saved_;
};

// Runs a read with at most 512 MiB of new address space; an attempt to
// allocate what the header promises is a test failure, not a crash or a
// machine out of memory.
template <typename T>
absl::StatusOr<T> Bounded(absl::StatusOr<T> (*read)(const std::string&),
                          const std::string& path) {
  AddressSpaceLimit limit(int64_t{512} << 20);
  try {
    return read(path);
  } catch (const std::bad_alloc&) {
    ADD_FAILURE() << path << ": the reader tried to allocate what the header "
                  << "claims (bad_alloc under a 512 MiB limit)";
  } catch (const std::length_error&) {
    ADD_FAILURE() << path << ": the reader tried to allocate what the header "
                  << "claims (length_error)";
  }
  return absl::InternalError("allocation failed");
}

TEST(IdxTest, AbsurdDimensionIsAClearErrorWithoutAHugeAllocation) {
  struct Case {
    std::string name;
    std::vector<unsigned char> bytes;
    std::string error;
  } images_cases[] = {
      {"count-idx3-ubyte", ImagesFile(0xFFFFFFFFu, 28, 28, 784),
       "count-idx3-ubyte: dimension 0 is 4294967295, too large to be real"},
      {"rows-idx3-ubyte", ImagesFile(1, 0xFFFFFFFFu, 28, 28),
       "rows-idx3-ubyte: dimension 1 is 4294967295, too large to be real"},
      {"all-idx3-ubyte", ImagesFile(0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0),
       "all-idx3-ubyte: dimension 0 is 4294967295, too large to be real"},
  };
  for (const Case& c : images_cases) {
    auto images = Bounded<IdxImages>(&ReadIdxImages, WriteRaw(c.name, c.bytes));
    ASSERT_FALSE(images.ok()) << c.name;
    EXPECT_EQ(images.status().code(), absl::StatusCode::kInvalidArgument)
        << images.status();
    EXPECT_THAT(std::string(images.status().message()), HasSubstr(c.error));
  }
  auto labels = Bounded<IdxLabels>(
      &ReadIdxLabels, WriteGz("huge-idx1-ubyte.gz", LabelsFile(0xFFFFFFFFu, 10)));
  ASSERT_FALSE(labels.ok());
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kInvalidArgument)
      << labels.status();
  EXPECT_THAT(std::string(labels.status().message()),
              HasSubstr("huge-idx1-ubyte.gz: dimension 0 is 4294967295, too "
                        "large to be real"));
}

// Dimensions each within bounds whose product is absurd: 2^72 bytes wraps
// int64 to exactly 0, which once read as an empty, valid file of 16.7M
// images.
TEST(IdxTest, SizesWhoseProductOverflowsAreAnError) {
  const uint32_t big = 1u << 24;
  auto wrapped = Bounded<IdxImages>(
      &ReadIdxImages, WriteRaw("wrap-idx3-ubyte", ImagesFile(big, big, big, 0)));
  ASSERT_FALSE(wrapped.ok());
  EXPECT_THAT(std::string(wrapped.status().message()),
              HasSubstr("wrap-idx3-ubyte: 16777216 images of 16777216x16777216 "
                        "pixels are too large to be real"));
}

// A header within bounds that promises far more than the file holds: the
// memory used follows the bytes actually in the file, not the header.
TEST(IdxTest, HeaderPromisingMoreThanTheFileHolds) {
  const uint32_t big = 1u << 24;
  // 16.7M images of 28x28 (13 GB) promised, 3 present.
  auto images = Bounded<IdxImages>(
      &ReadIdxImages, WriteGz("liar-idx3-ubyte.gz", ImagesFile(big, 28, 28, 3 * 784)));
  ASSERT_FALSE(images.ok());
  EXPECT_EQ(images.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(images.status().message()),
              HasSubstr("liar-idx3-ubyte.gz: expected 16777216 images of 28x28, "
                        "file ends after 3 (and 0 bytes)"));

  auto labels = Bounded<IdxLabels>(
      &ReadIdxLabels, WriteRaw("liar-idx1-ubyte", LabelsFile(big, 7)));
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(std::string(labels.status().message()),
              HasSubstr("liar-idx1-ubyte: expected 16777216 labels, file ends "
                        "after 7"));
}

TEST(DatasetTest, ScalesFeaturesAndKeepsLabels) {
  auto data = LoadIdxDataset(WriteGz("d-img.gz", ImagesFile(3, 2, 2, 12)),
                             WriteGz("d-lab.gz", LabelsFile(3, 3)), 1.0 / 255);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3);
  EXPECT_EQ(data->feature_dim(), 4);
  std::vector<float> row(4);
  data->CopyFeatures(2, row.data());
  EXPECT_EQ(row[3], 11.0f / 255.0f);  // correctly rounded
  EXPECT_EQ(data->label(2), 2);
}

// Every pixel value scales to the correctly rounded pixel / 255, what
// PyTorch's `x.float() / 255` gives (one float division), not the float
// product pixel * (1/255), which is off by one ulp for some values.
TEST(DatasetTest, ScalingIsCorrectlyRoundedForEveryPixelValue) {
  std::vector<unsigned char> bytes;
  BigEndian32(&bytes, 0x00000803);
  BigEndian32(&bytes, 1);
  BigEndian32(&bytes, 16);
  BigEndian32(&bytes, 16);
  for (int v = 0; v < 256; ++v) bytes.push_back(static_cast<unsigned char>(v));
  auto data = LoadIdxDataset(WriteRaw("all-pixels", bytes),
                             WriteRaw("one-label", LabelsFile(1, 1)), 1.0 / 255);
  ASSERT_TRUE(data.ok()) << data.status();
  int wrong = 0;
  std::vector<float> row(256);
  data->CopyFeatures(0, row.data());
  for (int v = 0; v < 256; ++v) {
    const float want = static_cast<float>(v) / 255.0f;  // correctly rounded
    if (row[v] != want) {
      ++wrong;
      ADD_FAILURE() << "pixel " << v << ": " << row[v]
                    << ", want " << want;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(DatasetTest, CountMismatchNamesBothFiles) {
  auto data = LoadIdxDataset(WriteGz("m-img.gz", ImagesFile(3, 2, 2, 12)),
                             WriteGz("m-lab.gz", LabelsFile(4, 4)), 1.0);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("m-img.gz holds 3 images"));
  EXPECT_THAT(data.status().message(), HasSubstr("m-lab.gz holds 4 labels"));
}

TEST(DatasetTest, RejectsOtherFormats) {
  DataConfig config;
  config.format = DataFormat::kNone;  // no format: refused
  EXPECT_FALSE(LoadTrainDataset(config).ok());
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

// A FIFO (or any non-file) is refused at once: opening it must not wait
// for a writer, as gzopen would, with every rank hung.
TEST(IdxTest, AFifoIsRefusedWithoutWaiting) {
  const std::string path = TempPath("images.fifo");
  std::remove(path.c_str());
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_FALSE(images.ok());
  EXPECT_THAT(std::string(images.status().message()), ::testing::HasSubstr("not a regular file"));
  absl::StatusOr<IdxImages> dir = ReadIdxImages(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()), ::testing::HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

// The first load writes the machine's pixel cache, later loads (other
// ranks, later runs) map it: one copy, the same values; an edited file
// gets a new cache entry.
TEST(PixelCacheTest, SecondLoadMapsTheCache) {
  const std::string cache = TempPath("pixel-cache");
  setenv("TRAINC_CACHE_DIR", cache.c_str(), 1);
  const std::string images = WriteGz("cached-img.gz", ImagesFile(3, 2, 2, 12));
  const std::string labels = WriteGz("cached-lab.gz", LabelsFile(3, 3));
  auto first = LoadIdxDataset(images, labels, 1.0 / 255);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->shares_pixels());
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(cache)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::StartsWith("idx-"));
    ++files;
  }
  EXPECT_EQ(files, 1);
  auto second = LoadIdxDataset(images, labels, 1.0 / 255);
  ASSERT_TRUE(second.ok());
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<float> a(4), b(4);
    first->CopyFeatures(i, a.data());
    second->CopyFeatures(i, b.data());
    EXPECT_EQ(a, b);
  }
  // A cache file cut short (replaced, as every write of it is) is not
  // trusted: the images are read again.
  std::vector<float> want(4);
  first->CopyFeatures(2, want.data());
  for (const auto& entry : std::filesystem::directory_iterator(cache)) {
    const std::string short_copy = entry.path().string() + ".short";
    std::ofstream(short_copy, std::ios::binary) << "TRNCPX1";
    std::filesystem::rename(short_copy, entry.path());
    break;
  }
  auto third = LoadIdxDataset(images, labels, 1.0 / 255);
  ASSERT_TRUE(third.ok());
  std::vector<float> c(4);
  third->CopyFeatures(2, c.data());
  EXPECT_EQ(c, want);
  unsetenv("TRAINC_CACHE_DIR");
}

}  // namespace
}  // namespace trainc
