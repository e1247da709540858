#include "runtime/data/tokens.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/dataset.h"

namespace trainc {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::string WriteBytes(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

void PutLittleEndian(std::string* out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}

// An llm.c shard: 256 int32 header, then the tokens (2 or 4 bytes each).
std::string Shard(int32_t magic, int32_t version, int32_t count,
                  const std::vector<uint32_t>& tokens, int token_bytes) {
  std::string bytes;
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  for (int32_t h : header) PutLittleEndian(&bytes, static_cast<uint32_t>(h), 4);
  for (uint32_t t : tokens) PutLittleEndian(&bytes, t, token_bytes);
  return bytes;
}

std::string GoodShardV1(const std::vector<uint32_t>& tokens) {
  return Shard(kLlmcMagicU16, 1, tokens.size(), tokens, 2);
}
std::string GoodShardV7(const std::vector<uint32_t>& tokens) {
  return Shard(kLlmcMagicU32, 7, tokens.size(), tokens, 4);
}

TEST(SplitPositionTest, FloorOfFractionTimesCount) {
  EXPECT_EQ(SplitPosition(0.0, 100), 0);
  EXPECT_EQ(SplitPosition(1.0, 100), 100);
  EXPECT_EQ(SplitPosition(0.95, 100), 95);
  EXPECT_EQ(SplitPosition(0.95, 99), 94);  // 94.05
  EXPECT_EQ(SplitPosition(0.5, 7), 3);     // 3.5
  EXPECT_EQ(SplitPosition(1.0 / 3, 9), 3);
  EXPECT_EQ(SplitPosition(0.9, 0), 0);
  EXPECT_EQ(SplitPosition(0.95, 2600000), 2470000);
}

TEST(SplitPositionTest, DecimalFractionsCountAsWritten) {
  // The doubles 0.29 and 0.57 are a hair below their decimal values, so a
  // plain floor(0.29 * 100) would give 28.
  EXPECT_EQ(SplitPosition(0.29, 100), 29);
  EXPECT_EQ(SplitPosition(29.0 / 100, 100), 29);
  EXPECT_EQ(SplitPosition(0.57, 100), 57);
  EXPECT_EQ(SplitPosition(0.07, 1000000), 70000);
}

TEST(TokenStreamTest, TextIsBytesConcatenatedInOrder) {
  const std::string a = WriteBytes("a.txt", "hello ");
  const std::string b = WriteBytes("b.txt", "world\xff");
  auto all = ReadTokenStream(DataFormat::kText, {a, b}, {0, 1}, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (std::vector<int32_t>{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o',
                                         'r', 'l', 'd', 255}));
}

TEST(TokenStreamTest, SplitSlicesAcrossFiles) {
  const std::string a = WriteBytes("s1.txt", "0123");
  const std::string b = WriteBytes("s2.txt", "");
  const std::string c = WriteBytes("s3.txt", "456789");
  // 10 tokens: [0, 2) [2, 7) [7, 10).
  auto head = ReadTokenStream(DataFormat::kText, {a, b, c}, {0, 0.2}, 0);
  auto middle = ReadTokenStream(DataFormat::kText, {a, b, c}, {0.2, 0.7}, 0);
  auto tail = ReadTokenStream(DataFormat::kText, {a, b, c}, {0.7, 1}, 0);
  ASSERT_TRUE(head.ok() && middle.ok() && tail.ok());
  EXPECT_THAT(*head, ElementsAre('0', '1'));
  EXPECT_THAT(*middle, ElementsAre('2', '3', '4', '5', '6'));
  EXPECT_THAT(*tail, ElementsAre('7', '8', '9'));
}

TEST(SplitPositionTest, EveryPercentageIsExact) {
  // "k%" reads as k / 100.0: its boundary is floor(k * n / 100) exactly.
  for (int64_t n : {1, 7, 99, 100, 101, 2593, 1000003}) {
    for (int k = 0; k <= 100; ++k) {
      EXPECT_EQ(SplitPosition(k / 100.0, n), k * n / 100) << k << "% of " << n;
    }
  }
}

TEST(TokenStreamTest, ReadsBothLlmcShardVersions) {
  const std::string v1 = WriteBytes("v1.bin", GoodShardV1({50256, 15496, 0, 65535}));
  const std::string v7 = WriteBytes("v7.bin", GoodShardV7({128000, 9906, 7}));
  auto f1 = InspectTokenFile(DataFormat::kTokens, v1);
  ASSERT_TRUE(f1.ok()) << f1.status();
  EXPECT_EQ(f1->tokens, 4);
  EXPECT_EQ(f1->bytes_per_token, 2);
  auto f7 = InspectTokenFile(DataFormat::kTokens, v7);
  ASSERT_TRUE(f7.ok()) << f7.status();
  EXPECT_EQ(f7->tokens, 3);
  EXPECT_EQ(f7->bytes_per_token, 4);
  auto both = ReadTokenStream(DataFormat::kTokens, {v1, v7}, {0, 1}, 0);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(*both, ElementsAre(50256, 15496, 0, 65535, 128000, 9906, 7));
  // Part of each, read with a seek into the middle of the first.
  auto part = ReadTokenStream(DataFormat::kTokens, {v1, v7}, {2.0 / 7, 5.0 / 7}, 0);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_THAT(*part, ElementsAre(0, 65535, 128000));
}

// Every slice of three shards of both widths, read with seeks, is the same
// slice of the whole stream: a seek off by a token, a header or a width
// shows in some slice.
TEST(TokenStreamTest, EverySliceSeeksToTheRightTokens) {
  const std::vector<uint32_t> a = {11, 12, 13, 14, 15}, b = {70000, 70001, 70002},
                              c = {21, 22, 23, 24};
  const std::vector<std::string> paths = {WriteBytes("sa.bin", GoodShardV1(a)),
                                          WriteBytes("sb.bin", GoodShardV7(b)),
                                          WriteBytes("sc.bin", GoodShardV1(c))};
  std::vector<int32_t> all;
  for (const auto* shard : {&a, &b, &c}) all.insert(all.end(), shard->begin(), shard->end());
  const int64_t n = static_cast<int64_t>(all.size());
  for (int64_t i = 0; i <= n; ++i) {
    for (int64_t j = i + 1; j <= n; ++j) {
      const TokenSplit split{static_cast<double>(i) / n, static_cast<double>(j) / n};
      auto got = ReadTokenStream(DataFormat::kTokens, paths, split, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      const int64_t begin = SplitPosition(split.begin, n), end = SplitPosition(split.end, n);
      EXPECT_EQ(*got, std::vector<int32_t>(all.begin() + begin, all.begin() + end))
          << "tokens " << begin << ".." << end;
    }
  }
}

// Each bad shard fails with the file named and what was expected.
TEST(TokenStreamTest, BadShardsAreClearErrors) {
  struct Case {
    std::string name;
    std::string bytes;
    std::vector<std::string> expected;
  };
  std::string truncated = GoodShardV1({1, 2, 3, 4});
  truncated.resize(truncated.size() - 3);
  std::string extra = GoodShardV7({1, 2});
  extra += "xy";
  const std::vector<Case> cases = {
      {"magic.bin", Shard(20240519, 1, 2, {1, 2}, 2),
       {"not an llm.c token shard", "magic) is 20240519",
        "expected 20240520 (uint16 tokens) or 20240801 (uint32 tokens)"}},
      {"version.bin", Shard(kLlmcMagicU16, 2, 2, {1, 2}, 2),
       {"magic 20240520 with version 2, expected version 1"}},
      {"version7.bin", Shard(kLlmcMagicU32, 1, 2, {1, 2}, 4),
       {"magic 20240801 with version 1, expected version 7"}},
      {"truncated.bin", truncated,
       {"truncated llm.c shard", "says 4 uint16 tokens (1032 bytes",
        "file has 1029 bytes"}},
      {"header_only.bin", std::string(100, '\0'),
       {"the file has 100 bytes, fewer than the 1024-byte header"}},
      {"count_too_big.bin", Shard(kLlmcMagicU32, 7, 1000000, {1, 2, 3}, 4),
       {"truncated llm.c shard", "says 1000000 uint32 tokens (4001024 bytes",
        "file has 1036 bytes"}},
      {"count_too_small.bin", extra,
       {"corrupt llm.c shard", "says 2 uint32 tokens (1032 bytes",
        "file has 1034 bytes"}},
      {"count_negative.bin", Shard(kLlmcMagicU16, 1, -4, {}, 2),
       {"header[2] (token count) is -4"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = WriteBytes(c.name, c.bytes);
    absl::Status inspect = InspectTokenFile(DataFormat::kTokens, path).status();
    absl::Status load =
        LoadTokenDataset(DataFormat::kTokens, {path}, {0, 1}, 1, 0, "training").status();
    for (const absl::Status& status : {inspect, load}) {
      ASSERT_FALSE(status.ok());
      EXPECT_THAT(status.message(), HasSubstr(path + ": "));
      for (const std::string& e : c.expected) {
        EXPECT_THAT(status.message(), HasSubstr(e));
      }
    }
  }
  EXPECT_THAT(InspectTokenFile(DataFormat::kTokens, TempPath("missing.bin")).status().message(),
              AllOf(HasSubstr("missing.bin: cannot open"),
                    HasSubstr("No such file")));
}

TEST(TokenStreamTest, TokensAtOrAboveTheVocabularyAreNamed) {
  const std::string shard =
      WriteBytes("vocab.bin", GoodShardV1({5, 255, 256, 3}));
  EXPECT_TRUE(ReadTokenStream(DataFormat::kTokens, {shard}, {0, 1}, 257).ok());
  absl::Status s = ReadTokenStream(DataFormat::kTokens, {shard}, {0, 1}, 256).status();
  EXPECT_THAT(s.message(),
              HasSubstr(shard + ": token 2 is 256, not below the model's "
                        "vocabulary size 256"));
  // Only what the split reads is checked.
  EXPECT_TRUE(ReadTokenStream(DataFormat::kTokens, {shard}, {0, 0.5}, 256).ok());
  // The index is the token's in its file, not in the stream.
  const std::string first = WriteBytes("vocab1.txt", "abc");
  const std::string second = WriteBytes("vocab2.txt", "de\x80");
  s = ReadTokenStream(DataFormat::kText, {first, second}, {0, 1}, 128).status();
  EXPECT_THAT(s.message(), HasSubstr(second + ": token 2 is 128, not below"));
  EXPECT_TRUE(ReadTokenStream(DataFormat::kText, {first, second}, {0, 1}, 0).ok());
  // Through the loader too, with the vocabulary from the config.
  DataConfig config;
  config.format = DataFormat::kTokens;
  config.train_paths = {shard};
  config.token_vocab = 100;
  EXPECT_THAT(LoadTrainDataset(config, 2).status().message(),
              HasSubstr(shard + ": token 1 is 255, not below"));
}

TEST(TokenStreamTest, Uint32TokensBeyondI32AreRejected) {
  const std::string shard = WriteBytes("huge.bin", GoodShardV7({1, 0x80000000u}));
  EXPECT_THAT(ReadTokenStream(DataFormat::kTokens, {shard}, {0, 1}, 0).status().message(),
              HasSubstr(shard + ": token 1 is 2147483648, which does not fit an i32"));
}

TEST(TokenDatasetTest, WindowsOverlapByOneToken) {
  // 11 tokens 0..10, T = 4: windows [0..4], [4..8]; token 9, 10 unused.
  std::string bytes;
  for (char c = 0; c <= 10; ++c) bytes.push_back(c);
  const std::string path = WriteBytes("windows.txt", bytes);
  auto data = LoadTokenDataset(DataFormat::kText, {path}, {0, 1}, 4, 256);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(data->is_token_windows());
  EXPECT_EQ(data->size(), 2);
  EXPECT_EQ(data->context(), 4);
  EXPECT_THAT(data->window(0), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(data->window(1), ElementsAre(4, 5, 6, 7, 8));
  // (n - 1) / T: 9 tokens make 2 windows, 8 make 1.
  EXPECT_EQ(Dataset::TokenWindows(std::vector<int32_t>(9), 4).size(), 2);
  EXPECT_EQ(Dataset::TokenWindows(std::vector<int32_t>(8), 4).size(), 1);
  EXPECT_EQ(Dataset::TokenWindows(std::vector<int32_t>(1), 1).size(), 0);
  EXPECT_EQ(Dataset::TokenWindows({}, 1).size(), 0);
}

TEST(TokenDatasetTest, TrainAndEvalTakeTheirSplits) {
  std::string bytes;
  for (int i = 0; i < 100; ++i) bytes.push_back(static_cast<char>(i));
  const std::string path = WriteBytes("hundred.txt", bytes);
  DataConfig config;
  config.format = DataFormat::kText;
  config.train_paths = {path};
  config.eval_paths = {path};
  config.train_split = {0, 0.9};
  config.eval_split = {0.9, 1};
  auto train = LoadTrainDataset(config, 8);
  auto eval = LoadEvalDataset(config, 8);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(train->token_count(), 90);
  EXPECT_EQ(train->size(), 89 / 8);
  EXPECT_EQ(eval->token_count(), 10);
  EXPECT_EQ(eval->size(), 1);
  EXPECT_EQ(eval->window(0)[0], 90);
  // A set shorter than one window, and a missing window length.
  absl::Status s = LoadEvalDataset(config, 10).status();
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("the evaluation set (text, ",
                                                  config.eval_paths[0], ", split 0.9:1) "
                                                  "holds 10 tokens, fewer than one window of 11")));
  EXPECT_THAT(LoadTrainDataset(config).status().message(),
              HasSubstr("needs the window length"));
}

TEST(TokenDatasetTest, ThePlanGivesTheWindowLength) {
  std::string bytes(50, 'x');
  const std::string path = WriteBytes("fifty.txt", bytes);
  Plan plan;
  plan.data.format = DataFormat::kText;
  plan.data.train_paths = {path};
  Buffer tokens;
  tokens.id = 0;
  tokens.name = "tokens";
  tokens.kind = BufferKind::kInput;
  tokens.dtype = DType::kI32;
  tokens.shape = {4, 7};
  Buffer next = tokens;
  next.id = 1;
  next.name = "next";
  next.kind = BufferKind::kLabel;
  plan.buffers = {tokens, next};
  plan.input_buffers = {0, 1};
  auto context = TokenContext(plan);
  ASSERT_TRUE(context.ok()) << context.status();
  EXPECT_EQ(*context, 7);
  auto train = LoadTrainDataset(plan);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 49 / 7);

  plan.buffers[0].dtype = DType::kF32;
  EXPECT_THAT(TokenContext(plan).status().message(),
              AllOf(HasSubstr("needs a model with a token input"),
                    HasSubstr("tokens (input f32), next (label i32)")));
  // An idx plan needs no token input.
  plan.data.format = DataFormat::kIdx;
  EXPECT_THAT(LoadTrainDataset(plan).status().message(),
              HasSubstr("needs 2 idx files"));
}

TEST(TokenDatasetTest, DebianFortunesSplitIntoTrainAndEval) {
  const std::vector<std::string> paths = {"/usr/share/games/fortunes/art",
                                          "/usr/share/games/fortunes/fortunes"};
  auto info = InspectTokenFile(DataFormat::kText, paths[1]);
  if (!info.ok()) GTEST_SKIP() << "Debian's fortunes is not installed";
  auto train = LoadTokenDataset(DataFormat::kText, paths, {0, 0.95}, 128, 256);
  auto eval = LoadTokenDataset(DataFormat::kText, paths, {0.95, 1}, 128, 256);
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(eval.ok()) << eval.status();
  const int64_t total = train->token_count() + eval->token_count();
  EXPECT_EQ(train->token_count(), SplitPosition(0.95, total));
  EXPECT_EQ(train->size(), (train->token_count() - 1) / 128);
  EXPECT_EQ(eval->size(), (eval->token_count() - 1) / 128);
  // The last window of the training set ends inside it.
  EXPECT_EQ(train->window(train->size() - 1).size(), 129u);
}

}  // namespace
}  // namespace trainc
