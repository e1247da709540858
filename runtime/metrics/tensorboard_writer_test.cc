#include "runtime/metrics/tensorboard_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

// An independent CRC-32C (bitwise, from the definition) and TFRecord mask.
uint32_t Crc(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
  }
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t LittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = v << 8 | static_cast<unsigned char>(s[at + i]);
  }
  return v;
}

// A minimal protobuf reader: field number -> raw values, in order.
struct Field {
  int wire = 0;
  uint64_t number = 0;  // varint, fixed32, fixed64
  std::string bytes;    // length-delimited
};
std::multimap<int, Field> ParseMessage(const std::string& s) {
  std::multimap<int, Field> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    for (int shift = 0; i < s.size(); shift += 7) {
      const unsigned char b = s[i++];
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  while (i < s.size()) {
    const uint64_t key = varint();
    Field f;
    f.wire = key & 7;
    if (f.wire == 0) {
      f.number = varint();
    } else if (f.wire == 1) {
      f.number = LittleEndian(s, i, 8);
      i += 8;
    } else if (f.wire == 5) {
      f.number = LittleEndian(s, i, 4);
      i += 4;
    } else if (f.wire == 2) {
      const uint64_t n = varint();
      f.bytes = s.substr(i, n);
      i += n;
    } else {
      ADD_FAILURE() << "unexpected wire type " << f.wire;
      break;
    }
    out.emplace(static_cast<int>(key >> 3), f);
  }
  return out;
}

double AsDouble(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}
float AsFloat(uint64_t bits) {
  const uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The records of a TFRecord file, checking both CRCs of each.
std::vector<std::string> ReadRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  std::vector<std::string> records;
  size_t at = 0;
  while (at < file.size()) {
    EXPECT_LE(at + 12, file.size());
    const uint64_t n = LittleEndian(file, at, 8);
    EXPECT_EQ(LittleEndian(file, at + 8, 4), Crc(file.substr(at, 8)))
        << "length CRC of record " << records.size();
    EXPECT_LE(at + 16 + n, file.size());
    const std::string data = file.substr(at + 12, n);
    EXPECT_EQ(LittleEndian(file, at + 12 + n, 4), Crc(data))
        << "data CRC of record " << records.size();
    records.push_back(data);
    at += 16 + n;
  }
  return records;
}

TEST(TensorboardWriterTest, ScalarEventBytes) {
  // Event{wall_time: 1.5, step: 3, summary{value{tag: "a", simple_value: 1}}}
  // as protoc would serialise it.
  EXPECT_EQ(absl::BytesToHexString(EncodeScalarEvent(1.5, 3, {{"a", 1.0f}})),
            "09000000000000f83f"    // 1: wall_time, fixed64
            "1003"                  // 2: step, varint
            "2a0a"                  // 5: summary, 10 bytes
            "0a08"                  //   1: value, 8 bytes
            "0a0161"                //     1: tag "a"
            "150000803f");          //     2: simple_value, fixed32
  EXPECT_EQ(absl::BytesToHexString(EncodeFileVersionEvent(0.0)),
            "090000000000000000" "1a0d" + absl::BytesToHexString("brain.Event:2"));
}

TEST(TensorboardWriterTest, TfRecordFraming) {
  const std::string r = TfRecord("hello");
  ASSERT_EQ(r.size(), 8 + 4 + 5 + 4u);
  EXPECT_EQ(LittleEndian(r, 0, 8), 5u);
  EXPECT_EQ(LittleEndian(r, 8, 4), Crc(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 5), "hello");
  EXPECT_EQ(LittleEndian(r, 17, 4), Crc("hello"));
}

TEST(TensorboardWriterTest, WritesAFileTensorboardCanRead) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/tb/run1";
  std::filesystem::remove_all(dir);
  auto writer = EventFileWriter::Create(dir, 1718000000.75);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string name = std::filesystem::path((*writer)->path()).filename();
  EXPECT_TRUE(absl::StartsWith(name, "events.out.tfevents.1718000000."))
      << name;
  ASSERT_TRUE((*writer)
                  ->WriteScalars(1718000001.5, 1, {{"train/loss", 2.25f},
                                                   {"train/lr", 1e-3f}})
                  .ok());
  // Step 300 needs a two-byte varint.
  ASSERT_TRUE((*writer)->WriteScalars(1718000002.5, 300, {{"eval/loss", 0.5f}}).ok());

  // Flushed as written: readable before the writer is closed.
  const std::vector<std::string> records = ReadRecords((*writer)->path());
  ASSERT_EQ(records.size(), 3u);
  auto first = ParseMessage(records[0]);
  EXPECT_EQ(first.find(3)->second.bytes, "brain.Event:2");
  EXPECT_EQ(AsDouble(first.find(1)->second.number), 1718000000.75);

  auto event = ParseMessage(records[1]);
  EXPECT_EQ(AsDouble(event.find(1)->second.number), 1718000001.5);
  EXPECT_EQ(event.find(2)->second.number, 1u);
  auto summary = ParseMessage(event.find(5)->second.bytes);
  ASSERT_EQ(summary.count(1), 2u);
  auto it = summary.equal_range(1).first;
  auto v0 = ParseMessage(it->second.bytes);
  auto v1 = ParseMessage(std::next(it)->second.bytes);
  EXPECT_EQ(v0.find(1)->second.bytes, "train/loss");
  EXPECT_EQ(AsFloat(v0.find(2)->second.number), 2.25f);
  EXPECT_EQ(v0.find(2)->second.wire, 5);
  EXPECT_EQ(v1.find(1)->second.bytes, "train/lr");
  EXPECT_EQ(AsFloat(v1.find(2)->second.number), 1e-3f);

  auto last = ParseMessage(records[2]);
  EXPECT_EQ(last.find(2)->second.number, 300u);
}

TEST(TensorboardWriterTest, UnwritableFolderIsAnError) {
  auto writer = EventFileWriter::Create("/proc/no/such/dir", 0);
  EXPECT_FALSE(writer.ok());
}

}  // namespace
}  // namespace trainc
