#include "runtime/checkpoint/safetensors.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// Every entry of path's folder whose name starts with "<file name>.tmp".
std::vector<std::string> TempFilesOf(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) found.push_back(name);
  }
  return found;
}

absl::Span<const char> Bytes(const void* p, size_t n) {
  return absl::Span<const char>(static_cast<const char*>(p), n);
}

std::string Header(const std::string& json) {
  std::string out(8, '\0');
  out[0] = static_cast<char>(json.size());
  out[1] = static_cast<char>(json.size() >> 8);
  return out + json;
}

TEST(SafetensorsTest, ExactByteLayout) {
  const float w[2] = {1.0f, -2.0f};
  const int32_t n[1] = {7};
  auto bytes = SerializeSafetensors(
      {{"w", "F32", {2}, Bytes(w, 8)}, {"n", "I32", {}, Bytes(n, 4)}},
      {{"step", "3"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string json =
      R"({"__metadata__":{"step":"3"},)"
      R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("n":{"dtype":"I32","shape":[],"data_offsets":[8,12]}})";
  // Padded with spaces so that the data starts at a multiple of 8.
  const std::string padded = json + std::string((8 - json.size() % 8) % 8, ' ');
  std::string expected(8, '\0');
  expected[0] = static_cast<char>(padded.size());
  expected += padded;
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07\x00\x00\x00", 12);
  EXPECT_EQ(*bytes, expected);
  EXPECT_EQ((8 + padded.size()) % 8, 0u);
}

TEST(SafetensorsTest, FileRoundTrip) {
  std::vector<float> a(100);
  for (int i = 0; i < 100; ++i) a[i] = i * 0.5f;
  const std::string path = TempPath("round.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"a", "F32", {10, 10}, Bytes(a.data(), 400)}},
                                   {{"k", "v"}})
                  .ok());
  auto file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("k"), "v");
  const SafetensorsFile::Tensor* t = file->Find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{10, 10}));
  absl::Span<const char> data = file->Data(*t);
  ASSERT_EQ(data.size(), 400u);
  EXPECT_EQ(std::memcmp(data.data(), a.data(), 400), 0);
  // No temporary file is left behind: they are named path.tmp.XXXXXX
  // (mkstemp), so look for anything in the folder starting with that.
  EXPECT_THAT(TempFilesOf(path), ::testing::IsEmpty());
  // Writing again replaces the file (rename over it), again leaving nothing.
  a[0] = 42.0f;
  ASSERT_TRUE(WriteSafetensorsFile(path, {{"a", "F32", {10, 10}, Bytes(a.data(), 400)}},
                                   {{"k", "w"}})
                  .ok());
  auto again = SafetensorsFile::Read(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->metadata().at("k"), "w");
  EXPECT_THAT(TempFilesOf(path), ::testing::IsEmpty());
}

TEST(SafetensorsTest, RejectsDataThatDoesNotMatchTheShape) {
  const float w[3] = {};
  auto bytes = SerializeSafetensors({{"w", "F32", {2}, Bytes(w, 12)}}, {});
  EXPECT_FALSE(bytes.ok());
}

TEST(SafetensorsTest, TruncatedFile) {
  const float w[4] = {};
  auto bytes = SerializeSafetensors({{"w", "F32", {4}, Bytes(w, 16)}}, {});
  ASSERT_TRUE(bytes.ok());
  auto file = SafetensorsFile::Parse(bytes->substr(0, bytes->size() - 3), "f");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(),
              HasSubstr("f: truncated: tensor 'w' ends at data byte 16 but "
                        "the file holds 13"));
  EXPECT_FALSE(SafetensorsFile::Parse(bytes->substr(0, 20), "f").ok());
  EXPECT_FALSE(SafetensorsFile::Parse("abc", "f").ok());
}

TEST(SafetensorsTest, BadHeaders) {
  struct Case {
    std::string json;
    std::string error;
  } cases[] = {
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})", "bad header"},
      {R"({"w":{"dtype":"Q8","shape":[1],"data_offsets":[0,4]}})", "unknown safetensors dtype 'Q8'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "F32[2] needs 8 bytes"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "non-negative"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", "must be an object"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "gap at byte 0"},
      {R"({"__metadata__":{"a":1}})", "metadata 'a' is not a string"},
      {R"([1])", "not a JSON object"},
  };
  for (const Case& c : cases) {
    auto file = SafetensorsFile::Parse(Header(c.json) + std::string(8, '\0'), "x");
    ASSERT_FALSE(file.ok()) << c.json;
    EXPECT_THAT(file.status().message(), HasSubstr(c.error)) << c.json;
  }
}

TEST(SafetensorsTest, HeaderLengthBeyondTheFile) {
  std::string bytes(16, '\0');
  bytes[0] = 100;
  auto file = SafetensorsFile::Parse(bytes, "x");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("header length 100"));
}

// A file written by hand with Python's struct and json, the way other
// tools lay it out (no padding, keys in another order), when Python exists.
TEST(SafetensorsTest, ReadsAFileWrittenByPython) {
  const std::string path = TempPath("py.safetensors");
  const std::string script = absl::StrCat(
      "import json, struct\n"
      "h = json.dumps({'b': {'dtype': 'I32', 'shape': [2], 'data_offsets': [8, 16]},\n"
      "                'a': {'dtype': 'F32', 'shape': [1, 2], 'data_offsets': [0, 8]},\n"
      "                '__metadata__': {'format': 'pt'}}).encode()\n"
      "open('", path, "', 'wb').write(struct.pack('<Q', len(h)) + h +\n"
      "    struct.pack('<2f', 0.5, 2.0) + struct.pack('<2i', -1, 9))\n");
  const std::string script_path = TempPath("write.py");
  std::ofstream(script_path) << script;
  if (std::system(absl::StrCat("/usr/bin/python3 ", script_path).c_str()) != 0) {
    GTEST_SKIP() << "/usr/bin/python3 is not available";
  }
  auto file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  float a[2];
  std::memcpy(a, file->Data(*file->Find("a")).data(), 8);
  EXPECT_EQ(a[1], 2.0f);
  int32_t b[2];
  std::memcpy(b, file->Data(*file->Find("b")).data(), 8);
  EXPECT_EQ(b[0], -1);
}

}  // namespace
}  // namespace trainc
