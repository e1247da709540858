// Checker behaviour through the public API: shapes, parameters, naming,
// overrides and the summary.
#include "compiler/frontend/frontend.h"

#include <cmath>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Data files only need to be readable here.
constexpr char kBase[] = R"(
model mlp {
  input  image: f32[784]
  label  class: i32[10]
  h1     = relu(linear(image, 2 * 128))
  logits = linear(h1, 10)
  loss   = cross_entropy(logits, class)
}
data { train = idx("/dev/null", "/dev/null")  scale = 1/255 }
train {
  gpus = 2  micro_batch = 64  global_batch = 256  epochs = 1
  optimizer = adamw(lr = 1e-3, weight_decay = 0.01)
}
)";

std::string Errors(const FrontendResult& r) {
  return FormatDiagnostics(r.diagnostics, r.source);
}

FrontendResult Compile(const std::string& source, const Overrides& o = {}) {
  return CompileSource(source, "t.train", o);
}

// machine = "x.profile" in the file is found next to the .train file, like
// data paths; a folder or a pipe is refused at the setting.
TEST(FrontendTest, AMachineProfileIsFoundNextToTheTrainFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/profile_test");
  std::filesystem::create_directories(dir + "/folder.profile");
  std::ofstream(dir + "/my.profile") << "name test\n";
  const std::string with_machine =
      absl::StrReplaceAll(kBase, {{"epochs = 1", "epochs = 1  machine = \"my.profile\""}});
  std::ofstream(dir + "/a.train") << with_machine;
  const FrontendResult found = CompileFile(dir + "/a.train");
  ASSERT_TRUE(found.spec) << Errors(found);
  EXPECT_EQ(found.spec->train.machine, dir + "/my.profile");

  std::ofstream(dir + "/b.train")
      << absl::StrReplaceAll(with_machine, {{"my.profile", "folder.profile"}});
  const FrontendResult folder = CompileFile(dir + "/b.train");
  EXPECT_FALSE(folder.spec);
  EXPECT_THAT(Errors(folder), HasSubstr("cannot read the machine profile 'folder.profile': "
                                        "it is a directory"));
  ::mkfifo((dir + "/pipe.profile").c_str(), 0600);
  const FrontendResult pipe = CompileFile(dir + "/a.train", {{"machine", dir + "/pipe.profile"}});
  EXPECT_THAT(Errors(pipe), HasSubstr("--machine: cannot read the machine profile"));
  EXPECT_THAT(Errors(pipe), HasSubstr("not a regular file"));
}

TEST(FrontendTest, FlattensNestedCallsAndNamesParameters) {
  const FrontendResult r = Compile(kBase);
  ASSERT_TRUE(r.spec) << Errors(r);
  const ModelSpec& m = r.spec->model;
  ASSERT_EQ(m.ops.size(), 4u);
  EXPECT_EQ(m.ops[0].name, "h1.0");
  EXPECT_EQ(m.ops[0].op, ops::ModelOp::kLinear);
  EXPECT_EQ(m.ops[0].args.at("out_features").i, 256);
  EXPECT_THAT(m.ops[0].parameters, ElementsAre("h1.weight", "h1.bias"));
  EXPECT_EQ(m.ops[1].name, "h1");
  EXPECT_THAT(m.ops[1].inputs, ElementsAre("h1.0"));
  EXPECT_THAT(m.ops[1].output.shape, ElementsAre(256));
  EXPECT_TRUE(m.ops[3].output.shape.empty());  // scalar loss
  ASSERT_EQ(m.parameters.size(), 4u);
  EXPECT_EQ(m.parameters[0].name, "h1.weight");
  EXPECT_THAT(m.parameters[0].shape, ElementsAre(256, 784));
  EXPECT_EQ(m.parameters[0].init_scale, 784);
  EXPECT_EQ(m.parameters[0].init, ops::Init::kUniformFanIn);
  EXPECT_EQ(m.parameter_count, 256 * 784 + 256 + 10 * 256 + 10);
  EXPECT_EQ(m.loss, "loss");
  EXPECT_NEAR(r.spec->data.scale, 1.0 / 255, 1e-12);
  EXPECT_EQ(r.spec->train.accumulate, 2);  // 256 / (2 * 64)
}

TEST(FrontendTest, LayernormAndAdd) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)",
               "  n = layernorm(h1)\n  r = add(h1, n)\n  logits = linear(r, 10)"}});
  const FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  const ModelSpec& m = r.spec->model;
  EXPECT_EQ(m.parameters[2].name, "n.weight");
  EXPECT_EQ(m.parameters[2].init, ops::Init::kOnes);
  EXPECT_EQ(m.parameters[3].name, "n.bias");
  EXPECT_EQ(m.parameters[3].init, ops::Init::kZeros);
  EXPECT_THAT(m.parameters[3].shape, ElementsAre(256));
}

// init = normal(std): N(0, std^2) weights and zero biases, the default
// nn.Linear's uniform; sqrt in constants scales GPT-2's residual layers.
TEST(FrontendTest, LinearInitNormal) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)",
               "  const layers = 4\n  logits = linear(h1, 10, init = normal(0.02 / sqrt(2 * layers)))"}});
  const FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  const ModelSpec& m = r.spec->model;
  EXPECT_EQ(m.parameters[0].init, ops::Init::kUniformFanIn);  // h1: the default
  EXPECT_EQ(m.parameters[0].init_scale, 784);
  EXPECT_EQ(m.parameters[2].name, "logits.weight");
  EXPECT_EQ(m.parameters[2].init, ops::Init::kNormal);
  EXPECT_DOUBLE_EQ(m.parameters[2].init_scale, 0.02 / std::sqrt(8.0));
  EXPECT_EQ(m.parameters[3].name, "logits.bias");
  EXPECT_EQ(m.parameters[3].init, ops::Init::kZeros);

  auto error = [&](const std::string& init) {
    return Errors(Compile(absl::StrReplaceAll(
        kBase, {{"  logits = linear(h1, 10)", "  logits = linear(h1, 10, init = " + init + ")"}})));
  };
  EXPECT_THAT(error("0.02"), HasSubstr("init of linear must be normal(STD), got 0.02"));
  EXPECT_THAT(error("uniform(1)"), HasSubstr("must be normal(STD), got a call to uniform"));
  EXPECT_THAT(error("normal(-1)"), HasSubstr("normal's std must be > 0, got -1"));
  EXPECT_THAT(error("normal(sqrt(-4))"), HasSubstr("sqrt of -4"));
  EXPECT_THAT(error("normal(h1)"), HasSubstr("normal's std must be a number constant"));
}

TEST(FrontendTest, RmsNormHasOnlyAWeight) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)", "  n = rmsnorm(h1)\n  logits = linear(n, 10)"}});
  const FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  const ModelSpec& m = r.spec->model;
  EXPECT_EQ(m.parameters[2].name, "n.weight");
  EXPECT_EQ(m.parameters[2].init, ops::Init::kOnes);
  EXPECT_EQ(m.parameters[3].name, "logits.weight");  // no n.bias
  EXPECT_NEAR(m.ops[2].args.at("eps").f, 1e-6, 1e-18);
  const FrontendResult bad = Compile(absl::StrReplaceAll(
      source, {{"rmsnorm(h1)", "rmsnorm(h1, eps = 0)"}}));
  EXPECT_THAT(Errors(bad), HasSubstr("eps must be > 0"));
}

TEST(FrontendTest, MulIsACallAndAnInfix) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)",
               "  g = h1 * h1\n  m = mul(g, h1)\n  logits = linear(m, 10)"}});
  const FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  const ModelSpec& m = r.spec->model;
  ASSERT_EQ(m.ops.size(), 6u);
  EXPECT_EQ(m.ops[2].op, ops::ModelOp::kMul);
  EXPECT_THAT(m.ops[2].inputs, ElementsAre("h1", "h1"));
  EXPECT_EQ(m.ops[3].op, ops::ModelOp::kMul);
  EXPECT_THAT(m.ops[3].output.shape, ElementsAre(256));

  const FrontendResult bad = Compile(absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)", "  g = h1 * 2\n  logits = linear(g, 10)"}}));
  EXPECT_FALSE(bad.spec);
  EXPECT_THAT(Errors(bad), HasSubstr("cannot mul 2"));
  const FrontendResult shapes = Compile(absl::StrReplaceAll(
      kBase, {{"  logits = linear(h1, 10)", "  logits = linear(h1, 10) * h1"}}));
  EXPECT_THAT(Errors(shapes), HasSubstr("mul: shapes differ"));
}

TEST(FrontendTest, MseAutoencoderNeedsNoLabel) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"  label  class: i32[10]\n", ""},
              {"linear(h1, 10)", "linear(h1, 784)"},
              {"cross_entropy(logits, class)", "mse(logits, image)"}});
  const FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_TRUE(r.spec->model.labels.empty());
}

TEST(FrontendTest, ShapeMismatchShowsBothShapes) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"class: i32[10]", "class: i32[5]"}});
  const FrontendResult r = Compile(source);
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("have 10 classes but label 'class' has 5"));
}

TEST(FrontendTest, SeveralErrorsAreAllReported) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"relu(", "rleu("}, {"gpus = 2", "gpus = 0"}, {"epochs", "epoch"}});
  const FrontendResult r = Compile(source);
  EXPECT_FALSE(r.spec);
  const std::string text = Errors(r);
  EXPECT_THAT(text, HasSubstr("unknown op 'rleu'"));
  EXPECT_THAT(text, HasSubstr("gpus must be a positive integer, got 0"));
  EXPECT_THAT(text, HasSubstr("did you mean 'epochs'?"));
}

TEST(OverridesTest, GpusOverrideReinfersAccumulate) {
  const FrontendResult r = Compile(kBase, {{"gpus", "4"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.gpus, 4);
  EXPECT_EQ(r.spec->train.micro_batch, 64);
  EXPECT_EQ(r.spec->train.accumulate, 1);
  EXPECT_EQ(r.spec->train.global_batch, 256);
}

TEST(OverridesTest, OverrideOfAllFourGivenReinfersAccumulateWithANote) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"global_batch = 256", "global_batch = 256  accumulate = 2"}});
  const FrontendResult r = Compile(source, {{"--gpus", "4"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.accumulate, 1);
  EXPECT_THAT(Errors(r),
              HasSubstr("accumulate = 2 from the file is re-inferred as 1 "
                        "because of --gpus"));
}

// zero = 1 on one rank changes nothing (the planner runs the optimizer
// whole); a note says so, at the setting or the flag, and no other rank
// count draws it.
TEST(OverridesTest, ZeroOnOneRankIsANote) {
  const std::string source = absl::StrReplaceAll(
      kBase, {{"gpus = 2", "gpus = 1  zero = 1"}});
  FrontendResult r = Compile(source);
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.zero, 1);
  EXPECT_THAT(Errors(r), HasSubstr("t.train:"));  // at the setting
  EXPECT_THAT(Errors(r), HasSubstr("note: zero = 1 on one rank: there is "
                                   "nothing to shard"));
  r = Compile(kBase, {{"gpus", "1"}, {"zero", "1"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(Errors(r), HasSubstr("note: --zero: zero = 1 on one rank"));
  r = Compile(kBase, {{"zero", "1"}});  // the file's 2 ranks
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(Errors(r), Not(HasSubstr("nothing to shard")));
}

// Settings of another ZeRO stage than the run's change nothing: a note.
TEST(OverridesTest, ZeroSettingsOfAnotherStageAreNotes) {
  FrontendResult r = Compile(
      absl::StrReplaceAll(kBase, {{"epochs = 1", "epochs = 1  zero = 3  zero_gather = next_forward"}}));
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(Errors(r), HasSubstr("t.train:"));
  EXPECT_THAT(Errors(r), HasSubstr("note: zero_gather places ZeRO-1 and 2's all-gathers"));
  r = Compile(kBase, {{"zero", "1"}, {"zero_prefetch", "2"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(Errors(r), HasSubstr("note: --zero_prefetch: zero_prefetch applies to zero = 3 "
                                   "only (this run has zero = 1)"));
  r = Compile(kBase, {{"zero", "3"}, {"zero_prefetch", "2"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(Errors(r), Not(HasSubstr("note:")));
}

TEST(OverridesTest, BadValuesNameTheFlag) {
  const FrontendResult r = Compile(kBase, {{"gpus", "0"}, {"micro_bach", "3"}});
  EXPECT_FALSE(r.spec);
  EXPECT_EQ(Errors(r),
            "error: --micro_bach: unknown flag\n"
            "  hint: did you mean '--micro_batch'?\n"
            "error: --gpus: gpus must be a positive integer, got 0\n");
}

TEST(OverridesTest, ArithmeticErrorFromAFlag) {
  const FrontendResult r = Compile(kBase, {{"micro_batch", "100"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("global_batch = 256 is not divisible by "
                                   "gpus × micro_batch = 2 × 100 = 200"));
  EXPECT_THAT(Errors(r), HasSubstr("flags given: --micro_batch"));
}

TEST(OverridesTest, StepsReplacesEpochsAndOtherFields) {
  const FrontendResult r = Compile(
      kBase, {{"steps", "20"}, {"deterministic", "true"}, {"seed", "3"},
              {"lr", "3e-4"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.steps, 20);
  EXPECT_EQ(r.spec->train.epochs, 0);
  EXPECT_TRUE(r.spec->train.deterministic);
  EXPECT_EQ(r.spec->train.seed, 3);
  EXPECT_DOUBLE_EQ(r.spec->train.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(r.spec->train.optimizer.weight_decay, 0.01);
}

TEST(OverridesTest, TypeErrors) {
  const FrontendResult r =
      Compile(kBase, {{"deterministic", "yes"}, {"epochs", "1.5"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("--deterministic: deterministic must be "
                                   "true or false, got the string \"yes\""));
  EXPECT_THAT(Errors(r),
              HasSubstr("--epochs: epochs must be a positive integer, got 1.5"));
}

TEST(DescribeTest, SummaryHasTheBatchLine) {
  const FrontendResult r = Compile(kBase);
  ASSERT_TRUE(r.spec);
  const std::string text = DescribeSpec(*r.spec);
  EXPECT_THAT(text, HasSubstr("global_batch 256 = 2 gpus × 64 micro_batch × 2 "
                              "accumulate"));
  EXPECT_THAT(text, HasSubstr("h1.weight"));
  EXPECT_THAT(text, HasSubstr("203,530 values"));
}

TEST(FormatTest, CaretUnderTabsAndTrimmedLongLines) {
  Diagnostic d;
  d.location = {"f.train", 1, 3};
  d.length = 2;
  d.message = "m";
  d.hint = "h";
  EXPECT_EQ(FormatDiagnostics({d}, "\tabcd\n"),
            "f.train:1:3: error: m\n\tabcd\n\t ^~\n  hint: h\n");
  const std::string long_line = std::string(300, 'a') + "X" + std::string(300, 'b');
  d.location.column = 301;
  d.length = 1;
  const std::string text = FormatDiagnostics({d}, long_line);
  EXPECT_THAT(text, HasSubstr("..."));
  // The caret still sits under the X.
  const size_t line_start = text.find('\n') + 1;
  const size_t caret_start = text.find('\n', line_start) + 1;
  const size_t x = text.find('X', line_start) - line_start;
  EXPECT_EQ(text[caret_start + x], '^');
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

constexpr char kBlocks[] = R"(
model tiny {
  const width = 8, layers = 3
  input  x: f32[4]
  label  y: i32[2]
  block mlp(h) {
    fc  = linear(h, width)
    out = relu(fc)
    return out
  }
  stem   = linear(x, width)
  body   = repeat(mlp, layers, stem)
  logits = linear(body, 2, bias = false)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 2  steps = 1  optimizer = sgd(lr = 0.1) }
)";

std::vector<std::string> ParameterNames(const ModelSpec& m) {
  std::vector<std::string> names;
  for (const ParameterSpec& p : m.parameters) names.push_back(p.name);
  return names;
}

TEST(BlocksTest, RepeatNamesInstancesLikeAModuleList) {
  const FrontendResult r = Compile(kBlocks);
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(ParameterNames(r.spec->model),
              ElementsAre("stem.weight", "stem.bias", "body.0.fc.weight",
                          "body.0.fc.bias", "body.1.fc.weight", "body.1.fc.bias",
                          "body.2.fc.weight", "body.2.fc.bias", "logits.weight"));
  // The block's value is what it returns; the statement aliases it.
  EXPECT_EQ(r.spec->model.ops.back().inputs[0], "logits");
}

TEST(BlocksTest, ConstantsAreOverriddenFromTheCommandLine) {
  const FrontendResult r = Compile(kBlocks, {{"width", "16"}, {"layers", "1"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_THAT(ParameterNames(r.spec->model),
              ElementsAre("stem.weight", "stem.bias", "body.0.fc.weight",
                          "body.0.fc.bias", "logits.weight"));
  EXPECT_EQ(r.spec->model.parameters[0].shape, (std::vector<int64_t>{16, 4}));
}

TEST(BlocksTest, ConstantFlagsAreCheckedLikeTheFile) {
  FrontendResult r = Compile(kBlocks, {{"widht", "16"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("--widht: unknown flag"));
  EXPECT_THAT(Errors(r), HasSubstr("did you mean '--width'?"));
  r = Compile(kBlocks, {{"width", "1.5"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("--width: '1.5' is not an integer"));
  // A train field still reaches the train block.
  r = Compile(kBlocks, {{"steps", "7"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.steps, 7);
}

TEST(BlocksTest, ABlockCallingItselfIsAnError) {
  const std::string source = R"(
model loop {
  input  x: f32[4]
  label  y: i32[2]
  block f(h) {
    g = f(h)
    return g
  }
  a      = f(x)
  logits = linear(a, 2)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 2  steps = 1  optimizer = sgd(lr = 0.1) }
)";
  const FrontendResult r = Compile(source);
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("does block f call itself?"));
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

// memory = "80GiB" and micro_batch = auto (compiler/planner/memory_search.h):
// sizes with units, auto only beside a budget and a global batch, and the
// settings ZeRO-2 cannot honour, each refused at its place.
TEST(MemoryBudgetTest, SizesAndAutoMicroBatch) {
  FrontendResult r = Compile(absl::StrReplaceAll(
      kBase, {{"micro_batch = 64", "micro_batch = auto  memory = \"1.5GiB\""}}));
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_TRUE(r.spec->train.micro_batch_auto);
  EXPECT_EQ(r.spec->train.memory_bytes, int64_t{3} << 29);
  EXPECT_EQ(r.spec->train.micro_batch * r.spec->train.gpus, 256);  // one micro-step
  r = Compile(kBase, {{"memory", "512MiB"}, {"micro_batch", "auto"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.memory_bytes, int64_t{512} << 20);
  for (const char* bad : {"80GB", "-1GiB", "0", "lots"}) {
    r = Compile(kBase, {{"memory", bad}});
    EXPECT_FALSE(r.spec) << bad;
    EXPECT_THAT(Errors(r), HasSubstr("memory must be a size such as \"80GiB\"")) << bad;
  }
  r = Compile(kBase, {{"micro_batch", "auto"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("micro_batch = auto needs a memory budget"));
  r = Compile(absl::StrReplaceAll(kBase, {{"global_batch = 256", "accumulate = 2"}}),
              {{"micro_batch", "auto"}, {"memory", "1GiB"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("micro_batch = auto keeps the global batch"));
}

// FieldChoices (what --help offers) is what the checker accepts: each
// choice compiles, as a flag and in the file, and a value next to them is
// refused, naming the field.
TEST(FieldChoicesTest, EveryChoiceIsAcceptedAndNoOther) {
  int closed = 0;
  for (const std::string& field : OverridableFields()) {
    const std::vector<std::string> choices = FieldChoices(field);
    if (choices.empty()) continue;
    ++closed;
    for (const std::string& choice : choices) {
      FrontendResult r = Compile(kBase, {{field, choice}});
      EXPECT_TRUE(r.spec) << "--" << field << " " << choice << ": " << Errors(r);
      r = Compile(absl::StrReplaceAll(
          kBase, {{"epochs = 1", absl::StrCat("epochs = 1  ", field, " = ", choice)}}));
      EXPECT_TRUE(r.spec) << field << " = " << choice << ": " << Errors(r);
    }
    // The stage after the last, or a name no table holds.
    int64_t last = 0;
    const std::string other = absl::SimpleAtoi(choices.back(), &last)
                                  ? absl::StrCat(last + 1)
                                  : std::string("other");
    const FrontendResult r = Compile(kBase, {{field, other}});
    EXPECT_FALSE(r.spec) << "--" << field << " " << other << " was accepted";
    EXPECT_THAT(Errors(r), HasSubstr("--" + field)) << other;
  }
  EXPECT_EQ(closed, 10);  // 5 switches, zero, precision, grad_comm, zero_gather/accumulate
  EXPECT_THAT(FieldChoices("zero"), ElementsAre("0", "1", "2", "3"));
  EXPECT_THAT(FieldChoices("gpus"), ::testing::IsEmpty());
}

TEST(MemoryBudgetTest, ZeroStagesAndAccumulation) {
  FrontendResult r = Compile(kBase, {{"zero", "4"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("zero must be 0, 1, 2 or 3, got 4"));
  r = Compile(kBase, {{"zero", "3"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.zero, 3);
  EXPECT_EQ(r.spec->train.zero_prefetch, -1);  // auto
  r = Compile(absl::StrReplaceAll(kBase, {{"epochs = 1", "epochs = 1  zero = 3  zero_prefetch = 2"}}));
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.zero_prefetch, 2);
  r = Compile(kBase, {{"zero_prefetch", "auto"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.zero_prefetch, -1);
  r = Compile(absl::StrReplaceAll(kBase, {{"epochs = 1", "epochs = 1  zero_prefetch = soon"}}));
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("t.train:"));
  EXPECT_THAT(Errors(r), HasSubstr("zero_prefetch must be a number or auto, got 'soon'"));
  r = Compile(kBase, {{"zero_prefetch", "9"}});
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("zero_prefetch must be at most 8, got 9"));
  r = Compile(absl::StrReplaceAll(kBase, {{"epochs = 1", "epochs = 1  zero = 2  "
                                                         "zero_accumulate = shard  "
                                                         "deterministic = true"},
                                          {"micro_batch = 64", "micro_batch = 32"}}));
  EXPECT_FALSE(r.spec);
  EXPECT_THAT(Errors(r), HasSubstr("t.train:"));
  EXPECT_THAT(Errors(r), HasSubstr("zero_accumulate = shard cannot be deterministic"));
  r = Compile(kBase, {{"zero", "2"}, {"zero_accumulate", "local"}});
  ASSERT_TRUE(r.spec) << Errors(r);
  EXPECT_EQ(r.spec->train.zero_accumulate, ZeroAccumulate::kLocal);
}

}  // namespace
}  // namespace trainc
