#include "tools/simulate/simulate_cli.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/frontend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/simulate/scaling.h"

namespace trainc::simulate {
namespace {

using ::testing::HasSubstr;

// Runs the command line; the printed tables, or the error.
std::string RunCli(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "simulate");
  absl::StatusOr<SimulateArgs> args = ParseSimulateArgs(static_cast<int>(argv.size()), argv.data());
  if (!args.ok()) return std::string(args.status().message());
  std::ostringstream out, err;
  absl::Status status = RunSimulate(*args, out, err);
  return status.ok() ? out.str() : std::string(status.message());
}

TEST(SimulateCliTest, ZeroPassesThroughAndSays) {
  const std::string out = RunCli({"dsl_examples/fashion_mlp.train", "--zero", "1", "--gpus", "2",
                               "--machine", "cpu_loopback"});
  EXPECT_THAT(out, HasSubstr("ZeRO-1"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("comm stream")));
}

// The tools' one parser: --x=v as --x v, and a typo last on the line is an
// unknown option with a did-you-mean, not a field waiting for its value.
TEST(SimulateCliTest, OptionsTakeBothSpellingsAndTyposAreNamed) {
  EXPECT_THAT(RunCli({"dsl_examples/fashion_mlp.train", "--zero=1", "--gpus=2",
                      "--machine=cpu_loopback"}),
              HasSubstr("ZeRO-1"));
  EXPECT_THAT(RunCli({"dsl_examples/fashion_mlp.train", "--no-overlp"}),
              HasSubstr("unknown option --no-overlp: did you mean --no-overlap?"));
}

// --help is written from the parser's table: every option with its help.
TEST(SimulateCliTest, HelpListsTheOptions) {
  const std::string help = SimulateUsage();
  EXPECT_THAT(help, HasSubstr("usage: simulate [options] FILE.train|PLAN"));
  for (const char* row : {"--gpus N[,N...]", "--machine NAME|FILE", "--calibrate TRACE.json",
                          "--write-profile FILE", "--no-overlap", "--bucket-mb X[,Y...]",
                          "--FIELD VALUE", "-h, --help", "cpu_loopback", "Columns: step time"}) {
    EXPECT_THAT(help, HasSubstr(row));
  }
  EXPECT_THAT(help, ::testing::Not(HasSubstr("--bucket_mb")));
  // The defaults it states are the ones a run takes.
  EXPECT_THAT(help, HasSubstr(absl::StrCat("(default ", SimulateArgs().machine, ")")));
  EXPECT_THAT(help, HasSubstr(absl::StrCat("(default 1,2,4,...,", DefaultWorldSizes().back())));
}

TEST(SimulateCliTest, Bf16GradientsAreNamed) {
  EXPECT_THAT(RunCli({"dsl_examples/fashion_mlp.train", "--grad_comm", "bf16", "--gpus", "2"}),
              HasSubstr("bf16 gradients"));
}

TEST(SimulateCliTest, AutoBucketsAreChosenPerWorldSizeAndExplained) {
  const std::string out = RunCli({"dsl_examples/fashion_mlp.train", "--bucket-mb", "auto,25",
                               "--gpus", "2,8", "--machine", "h100_nvlink_ib"});
  EXPECT_THAT(out, HasSubstr("bucket_mb auto on h100_nvlink_ib x 2 ranks"));
  EXPECT_THAT(out, HasSubstr("bucket_mb auto on h100_nvlink_ib x 8 ranks"));
  EXPECT_THAT(out, HasSubstr("bucket_mb auto"));
}

TEST(SimulateCliTest, BadBucketMbIsTheFrontEndsError) {
  EXPECT_THAT(RunCli({"dsl_examples/fashion_mlp.train", "--bucket-mb", "aut", "--gpus", "2"}),
              HasSubstr("did you mean 'auto'?"));
}

// A folder given as --machine is refused as train refuses it (one check,
// cost::CheckProfileFile), not read as a profile with every key missing.
TEST(SimulateCliTest, MachineFolderIsRefusedAsTrainRefusesIt) {
  const std::string dir = ::testing::TempDir();
  const std::string refusal =
      absl::StrCat("cannot read the machine profile '", dir, "': it is a directory");
  const std::string out = RunCli({"dsl_examples/fashion_mlp.train", "--machine", dir.c_str()});
  EXPECT_THAT(out, HasSubstr(refusal));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("missing")));
  const FrontendResult train =
      CompileFile("dsl_examples/fashion_mlp.train", {{"machine", dir}});
  EXPECT_FALSE(train.spec);
  EXPECT_THAT(FormatDiagnostics(train.diagnostics, train.source), HasSubstr(refusal));
}

}  // namespace
}  // namespace trainc::simulate
