// Bounded, deterministic fuzzing: mutated examples and random bytes must
// never crash or hang, and every result has a spec or at least one error.
// Time-boxed so that it stays a unit test; the seed is fixed.
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/frontend/frontend.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Mutations that reach deep into the grammar: token-ish snippets, not only
// random bytes.
const char* const kSnippets[] = {
    "(", ")", "{", "}", "[", "]", ",", "=", ":", "-", "*", "/", "+", "\"",
    "#", "\n", " ", "0", "1e999", "99999999999999999999", "-1", "1/0",
    "true", "relu(", "linear(x, ", "loss", "model", "data", "train", "input",
    "label", "f32[", "i32[10]", "idx(\"", "adamw(lr=", "(0.9, 0.999)", "\\",
    "\xff", std::string("\0", 1).c_str(), "\xc3\xa9", "gpus", "global_batch"};

std::string Mutate(std::string text, std::mt19937& rng) {
  const int edits = 1 + rng() % 8;
  for (int e = 0; e < edits; ++e) {
    const size_t at = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (rng() % 5) {
      case 0:  // delete a run
        if (!text.empty() && at < text.size()) {
          text.erase(at, 1 + rng() % 16);
        }
        break;
      case 1:  // insert a snippet
        text.insert(at, kSnippets[rng() % (sizeof(kSnippets) /
                                           sizeof(kSnippets[0]))]);
        break;
      case 2:  // flip a byte
        if (at < text.size()) text[at] = static_cast<char>(rng());
        break;
      case 3: {  // duplicate a run
        if (at < text.size()) {
          const std::string run = text.substr(at, 1 + rng() % 64);
          text.insert(at, run);
        }
        break;
      }
      default:  // insert a NUL or a random byte
        text.insert(at, 1, static_cast<char>(rng() % 2 ? 0 : rng()));
        break;
    }
  }
  return text;
}

void ExpectSane(const FrontendResult& r, const std::string& input) {
  int errors = 0;
  for (const Diagnostic& d : r.diagnostics) {
    errors += d.severity == Diagnostic::Severity::kError;
  }
  ASSERT_TRUE(r.spec.has_value() != (errors > 0))
      << "input: " << input.substr(0, 400);
  ASSERT_LE(errors, 20);
  // Rendering must not crash either.
  (void)FormatDiagnostics(r.diagnostics, r.source);
}

TEST(FuzzTest, MutatedExamplesAndRandomBytes) {
  const std::vector<std::string> seeds = {
      Read("dsl_examples/fashion_mlp.train"),
      Read("dsl_examples/residual_mlp.train"),
      Read("dsl_examples/autoencoder_mse.train")};
  for (const std::string& s : seeds) ASSERT_FALSE(s.empty());
  std::mt19937 rng(20240601);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int runs = 0;
  for (; runs < 3000 && std::chrono::steady_clock::now() < deadline; ++runs) {
    std::string input;
    if (runs % 10 == 9) {
      input.resize(rng() % 2048);
      for (char& c : input) c = static_cast<char>(rng());
    } else {
      input = Mutate(seeds[runs % seeds.size()], rng);
    }
    const FrontendResult r = CompileSource(input, "fuzz.train",
                                           runs % 7 == 0
                                               ? Overrides{{"gpus", "3"}}
                                               : Overrides{});
    ExpectSane(r, input);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(runs, 200) << "too slow: fewer than 200 inputs in 15 s";
}

}  // namespace
}  // namespace trainc
