#include "compiler/frontend/data_checker.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/frontend/parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc::frontend {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

void Write(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

// A fresh directory `name` under the test's temporary directory.
std::string MakeDir(const std::string& name) {
  const std::string dir = absl::StrCat(TempDir(), "/", name);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

struct Checked {
  std::optional<DataSpec> data;
  std::string errors;  // "line:col: message | hint" per error, joined by \n
};

// Checks `data { <body> }` with relative paths against `base_dir`.
Checked Check(const std::string& body, const std::string& base_dir = "") {
  const std::string source = absl::StrCat("data {\n", body, "\n}\n");
  DiagnosticSink sink("t.train");
  Checked out;
  std::optional<ast::File> file = ParseTrain(source, sink);
  if (file && file->blocks.size() == 1) {
    out.data = CheckData(file->blocks[0], base_dir, sink);
  }
  std::vector<std::string> lines;
  for (const Diagnostic& d : sink.Take()) {
    lines.push_back(absl::StrCat(d.location.line, ":", d.location.column, ": ",
                                 d.message, " | ", d.hint));
  }
  out.errors = absl::StrJoin(lines, "\n");
  return out;
}

// dir/{a, b, a.u8 -> a, a.dat (NULs), sub/}: what Debian's fortunes looks like.
std::string FortunesLike(const std::string& name) {
  const std::string dir = MakeDir(name);
  Write(dir + "/a", "A fortune.\n%\nAnother.\n");
  Write(dir + "/b", "Be fortunate.\n");
  Write(dir + "/a.dat", std::string("\x00\x00\x00\x02 strfile", 12));
  ::symlink("a", (dir + "/a.u8").c_str());
  ::mkdir((dir + "/sub").c_str(), 0755);
  return dir;
}

TEST(DataCheckerTest, TextGlobKeepsRegularTextFilesSorted) {
  const std::string dir = FortunesLike("fortunes1");
  Checked c = Check(absl::StrCat("train = text(\"", dir, "/*\")"));
  ASSERT_TRUE(c.data) << c.errors;
  EXPECT_EQ(c.data->train.format, DataFormat::kText);
  EXPECT_THAT(c.data->train.paths, ElementsAre(dir + "/a", dir + "/b"));
  EXPECT_EQ(c.data->train.split_begin, 0.0);
  EXPECT_EQ(c.data->train.split_end, 1.0);
}

TEST(DataCheckerTest, ArgumentsConcatenateInOrderAndResolveRelativePaths) {
  const std::string dir = FortunesLike("fortunes2");
  Checked c = Check("train = text(\"b\", \"[a-b]\", \"a.u8\")", dir);
  ASSERT_TRUE(c.data) << c.errors;
  // A symlink named explicitly is read; a glob skips it.
  EXPECT_THAT(c.data->train.paths,
              ElementsAre(dir + "/b", dir + "/a", dir + "/b", dir + "/a.u8"));
}

TEST(DataCheckerTest, TokensGlobKeepsBinaryFilesButNotSymlinks) {
  const std::string dir = MakeDir("shards");
  Write(dir + "/train_000.bin", std::string(1030, '\0'));
  Write(dir + "/train_001.bin", std::string(1030, '\0'));
  ::symlink("train_000.bin", (dir + "/train_002.bin").c_str());
  Checked c = Check(absl::StrCat("train = tokens(\"", dir, "/train_*.bin\")\n",
                                 "eval = tokens(\"", dir, "/train_001.bin\")"));
  ASSERT_TRUE(c.data) << c.errors;
  EXPECT_EQ(c.data->train.format, DataFormat::kTokens);
  EXPECT_THAT(c.data->train.paths,
              ElementsAre(dir + "/train_000.bin", dir + "/train_001.bin"));
  EXPECT_THAT(c.data->eval.paths, ElementsAre(dir + "/train_001.bin"));
}

TEST(DataCheckerTest, GlobWithNothingLeftIsAnError) {
  const std::string dir = FortunesLike("fortunes3");
  Checked c = Check("train = text(\"a.*\")", dir);
  EXPECT_FALSE(c.data);
  EXPECT_EQ(c.errors,
            "2:14: 'a.*' matches 2 paths but no text file (skipped: 1 symlink, "
            "1 file with a NUL byte in the first 4 KiB) | relative paths are "
            "resolved against the .train file's directory: " +
                dir + "/a.*");
  c = Check(absl::StrCat("train = text(\"", dir, "/*.txt\")"));
  EXPECT_FALSE(c.data);
  EXPECT_THAT(c.errors, HasSubstr("2:14: '" + dir + "/*.txt' matches no file"));
  c = Check(absl::StrCat("train = text(\"", dir, "/s*\")"));
  EXPECT_THAT(c.errors, HasSubstr("(skipped: 1 directory or special file)"));
}

TEST(DataCheckerTest, ExplicitPathMustBeAReadableRegularFile) {
  const std::string dir = FortunesLike("fortunes4");
  Checked c = Check(absl::StrCat("train = text(\"", dir, "/sub\")\n",
                                 "eval = text(\"", dir, "/missing\")"));
  EXPECT_FALSE(c.data);
  EXPECT_THAT(c.errors, HasSubstr("2:14: cannot read '" + dir + "/sub': it is a directory"));
  EXPECT_THAT(c.errors, HasSubstr("3:13: cannot read '" + dir +
                                  "/missing': No such file or directory"));
  // A binary file named explicitly is taken as it is.
  c = Check(absl::StrCat("train = text(\"", dir, "/a.dat\")"));
  EXPECT_TRUE(c.data) << c.errors;
}

TEST(DataCheckerTest, SplitsAsPercentagesOrFractions) {
  const std::string dir = FortunesLike("fortunes5");
  struct Case {
    std::string text;
    double begin, end;
  };
  for (const Case& k : {Case{"0:95%", 0, 0.95}, Case{"95%:100%", 0.95, 1},
                        Case{"0.5:1", 0.5, 1}, Case{"12.5%:0.25", 0.125, 0.25},
                        Case{"0:100%", 0, 1}, Case{".1:1.0", 0.1, 1}}) {
    Checked c = Check(absl::StrCat("train = text(\"a\", split = \"", k.text, "\")"), dir);
    ASSERT_TRUE(c.data) << k.text << ": " << c.errors;
    EXPECT_EQ(c.data->train.split_begin, k.begin) << k.text;
    EXPECT_EQ(c.data->train.split_end, k.end) << k.text;
  }
}

TEST(DataCheckerTest, BadSplitsPointAtTheValue) {
  const std::string dir = FortunesLike("fortunes6");
  const std::string hint =
      " | e.g. split = \"0:95%\" (the first 95%) or split = \"95%:100%\" (the rest)";
  struct Case {
    std::string split, error;
  };
  for (const Case& k : {
           Case{"\"95:100%\"",
                "bad split \"95:100%\": '95' is neither a percentage like \"95%\" "
                "nor a fraction in [0, 1] like \"0.95\""},
           Case{"\"50%:10%\"",
                "bad split \"50%:10%\": its beginning (50%) must come before its end (10%)"},
           Case{"\"0.5:0.5\"", "its beginning (0.5) must come before its end (0.5)"},
           Case{"\"95%\"", "bad split \"95%\": expected \"begin:end\", two fractions of the data"},
           Case{"\"0:1:2\"", "expected \"begin:end\""},
           Case{"\"-0.1:1\"", "'-0.1' is neither"},
           Case{"\"0:101%\"", "'101%' is neither"},
           Case{"\" 0:1\"", "' 0' is neither"},
           Case{"\"0:1e-1\"", "'1e-1' is neither"},
           Case{"\":95%\"", "'' is neither"},
           Case{"\"0:.\"", "'.' is neither"},
           Case{"0.95", "split must be a string like \"0:95%\", got"},
       }) {
    Checked c = Check(absl::StrCat("train = text(\"a\", split = ", k.split, ")"), dir);
    EXPECT_FALSE(c.data) << k.split;
    EXPECT_THAT(c.errors, HasSubstr("2:27: ")) << k.split;
    EXPECT_THAT(c.errors, HasSubstr(k.error)) << k.split;
    EXPECT_THAT(c.errors, HasSubstr(hint)) << k.split;
  }
}

TEST(DataCheckerTest, ArgumentErrors) {
  const std::string dir = FortunesLike("fortunes7");
  Checked c = Check("train = tokens(\"a\", splt = \"0:1\")", dir);
  EXPECT_EQ(c.errors, "2:21: unknown argument 'splt' to tokens | did you mean 'split'?");
  c = Check("train = text(\"a\", split = \"0:1\", split = \"0:1\")", dir);
  EXPECT_EQ(c.errors, "2:34: split is given twice | ");
  c = Check("train = text(split = \"0:1\")", dir);
  EXPECT_EQ(c.errors,
            "2:9: text needs at least one file path or glob | e.g. "
            "text(\"/usr/share/games/fortunes/*\", split = \"0:95%\")");
  c = Check("train = tokens(3)", dir);
  EXPECT_EQ(c.errors,
            "2:16: expected a file path or glob (a string), got 3 | "
            "e.g. tokens(\"shards/train_*.bin\")");
  c = Check("train = idx(\"a\", \"b\", split = \"0:1\")", dir);
  EXPECT_FALSE(c.data);
  EXPECT_THAT(c.errors, HasSubstr("idx takes 2 arguments"));
  c = Check("train = csv(\"a\")", dir);
  EXPECT_EQ(c.errors, "2:9: unknown data format 'csv' | formats: idx, text, tokens");
}

TEST(DataCheckerTest, TrainAndEvalShareTheFormat) {
  const std::string dir = FortunesLike("fortunes8");
  Checked c = Check("train = text(\"a\")\neval = tokens(\"b\")", dir);
  EXPECT_FALSE(c.data);
  EXPECT_EQ(c.errors,
            "3:8: eval is tokens(...) but train is text(...) | both sets must have "
            "the same format");
  c = Check("train = text(\"a\", split = \"0:90%\")\n"
            "eval = text(\"a\", split = \"90%:100%\")",
            dir);
  ASSERT_TRUE(c.data) << c.errors;
  EXPECT_EQ(c.data->train.split_end, 0.9);
  EXPECT_EQ(c.data->eval.split_begin, 0.9);
  EXPECT_EQ(c.data->eval.split_end, 1.0);
}

TEST(DataCheckerTest, DebianFortunesWithoutIndexesOrLinks) {
  const std::string dir = "/usr/share/games/fortunes";
  if (::access((dir + "/fortunes").c_str(), R_OK) != 0) {
    GTEST_SKIP() << "Debian's fortunes is not installed";
  }
  Checked c = Check(absl::StrCat("train = text(\"", dir, "/*\", split = \"0:95%\")"));
  ASSERT_TRUE(c.data) << c.errors;
  EXPECT_GT(c.data->train.paths.size(), 10u);
  for (const std::string& path : c.data->train.paths) {
    EXPECT_FALSE(absl::EndsWith(path, ".dat")) << path;
    EXPECT_FALSE(absl::EndsWith(path, ".u8")) << path;
  }
  EXPECT_TRUE(std::is_sorted(c.data->train.paths.begin(), c.data->train.paths.end()));
}

}  // namespace
}  // namespace trainc::frontend
