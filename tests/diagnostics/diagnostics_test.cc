// Golden tests of the front end's diagnostics, plus inputs too big or too
// odd to check in (10 MB files, deep nesting), generated here.
//
// Each tests/diagnostics/cases/NAME.train is compiled with CompileFile (the
// relative path keeps the goldens machine-independent) and the output of
// FormatDiagnostics, followed by "result: spec" or "result: errors", must
// equal cases/NAME.expected byte for byte.
//
// To regenerate every golden after an intended change of wording:
//   UPDATE_GOLDENS=1 bazel run //tests/diagnostics:diagnostics_test
// (bazel run sets BUILD_WORKSPACE_DIRECTORY, where the goldens are written).
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

constexpr char kCases[] = "tests/diagnostics/cases";

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  DIR* dir = opendir(kCases);
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (absl::EndsWith(name, ".train")) {
      names.push_back(name.substr(0, name.size() - 6));
    }
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

int ErrorCount(const FrontendResult& result) {
  int errors = 0;
  for (const Diagnostic& d : result.diagnostics) {
    errors += d.severity == Diagnostic::Severity::kError;
  }
  return errors;
}

std::string Render(const FrontendResult& result) {
  return absl::StrCat(FormatDiagnostics(result.diagnostics, result.source),
                      "result: ", result.spec ? "spec" : "errors", "\n");
}

TEST(DiagnosticsTest, Corpus) {
  const std::vector<std::string> names = CaseNames();
  ASSERT_GE(names.size(), 35u) << "cases not found under " << kCases;
  const char* update = std::getenv("UPDATE_GOLDENS");
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const bool updating = update != nullptr && std::string(update) == "1";
  if (updating) {
    ASSERT_NE(workspace, nullptr)
        << "UPDATE_GOLDENS=1 needs `bazel run`, which sets "
           "BUILD_WORKSPACE_DIRECTORY";
  }
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::string path = absl::StrCat(kCases, "/", name, ".train");
    const FrontendResult result = CompileFile(path);
    // Every input either compiles or says why not.
    EXPECT_TRUE(result.spec.has_value() != (ErrorCount(result) > 0));
    // The corpus is of malformed files; warning-only cases say so.
    if (!absl::EndsWith(name, "_warning")) {
      EXPECT_FALSE(result.spec.has_value());
    }
    const std::string actual = Render(result);
    const std::string expected_path =
        absl::StrCat(kCases, "/", name, ".expected");
    if (updating) {
      std::ofstream(absl::StrCat(workspace, "/", expected_path),
                    std::ios::binary)
          << actual;
      continue;
    }
    EXPECT_EQ(actual, ReadFile(expected_path));
  }
}

TEST(DiagnosticsTest, TenMegabytesOfCommentsCompile) {
  std::string source = ReadFile("dsl_examples/fashion_mlp.train");
  ASSERT_FALSE(source.empty());
  const std::string line = "# " + std::string(98, 'c') + "\n";
  while (source.size() < (10u << 20)) source += line;
  const FrontendResult result = CompileSource(source, "big.train");
  EXPECT_TRUE(result.spec.has_value())
      << FormatDiagnostics(result.diagnostics, result.source);
}

TEST(DiagnosticsTest, TenMegabytesOfGarbageStopAtTheErrorCap) {
  std::string source;
  source.reserve(10u << 20);
  uint32_t state = 12345;
  while (source.size() < (10u << 20)) {
    state = state * 1103515245 + 12345;
    source.push_back(static_cast<char>(state >> 24));
  }
  const FrontendResult result = CompileSource(source, "garbage.train");
  EXPECT_FALSE(result.spec.has_value());
  EXPECT_EQ(ErrorCount(result), 20);  // stopped at the cap, not at the end
  // The rendering stays small whatever the input.
  EXPECT_LT(FormatDiagnostics(result.diagnostics, result.source).size(),
            20000u);
}

TEST(DiagnosticsTest, TenMegabytesOfStatementsAreChecked) {
  // One long model: many errors, capped, and no quadratic blow-up.
  std::string source = "model big {\n  input x: f32[4]\n";
  int i = 0;
  while (source.size() < (10u << 20)) {
    absl::StrAppend(&source, "  v", i, " = relu(v", i + 7, ")\n");
    ++i;
  }
  source += "}\n";
  const FrontendResult result = CompileSource(source, "statements.train");
  EXPECT_FALSE(result.spec.has_value());
  EXPECT_EQ(ErrorCount(result), 20);
}

TEST(DiagnosticsTest, DeepNestingIsAnErrorNotACrash) {
  for (const std::string& open : {std::string("("), std::string("-"),
                                  std::string("relu("), std::string("-(")}) {
    std::string source = "train { epochs = ";
    for (int i = 0; i < 100000; ++i) source += open;
    source += "1";
    const FrontendResult result = CompileSource(source, "deep.train");
    EXPECT_FALSE(result.spec.has_value());
    ASSERT_GE(ErrorCount(result), 1) << open;
    EXPECT_TRUE(absl::StrContains(result.diagnostics[0].message,
                                  "nested too deeply"))
        << open << ": " << result.diagnostics[0].message;
  }
}

TEST(DiagnosticsTest, LongOperatorChainIsBounded) {
  std::string source = "train { epochs = 1";
  for (int i = 0; i < 200000; ++i) source += " + 1";
  source += " }\n";
  const FrontendResult result = CompileSource(source, "chain.train");
  EXPECT_FALSE(result.spec.has_value());
  ASSERT_GE(ErrorCount(result), 1);
  EXPECT_TRUE(absl::StrContains(
      FormatDiagnostics(result.diagnostics, result.source), "nested too deeply"));
}

TEST(DiagnosticsTest, UnreadableSourceFile) {
  const FrontendResult result = CompileFile("tests/diagnostics/no-such.train");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_EQ(FormatDiagnostics(result.diagnostics, result.source),
            "tests/diagnostics/no-such.train: error: cannot read "
            "'tests/diagnostics/no-such.train': No such file or directory\n");
}

}  // namespace
}  // namespace trainc
