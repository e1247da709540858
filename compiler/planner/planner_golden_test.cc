// The default example's plan (dsl_examples/fashion_mlp.train, through the
// real front end), compared line by line with a checked-in golden file.
//
// Any change to the planner that changes the plan shows up here as a diff
// to review. To accept it:
//   TRAINC_UPDATE_GOLDEN=1 bazel run //compiler/planner:planner_golden_test
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/frontend/frontend.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

constexpr char kGolden[] = "compiler/planner/testdata/fashion_mlp.plan";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(PlannerGolden, FashionMlp) {
  FrontendResult source = CompileFile("dsl_examples/fashion_mlp.train");
  ASSERT_TRUE(source.spec.has_value())
      << FormatDiagnostics(source.diagnostics, source.source);
  absl::StatusOr<Plan> plan = BuildPlan(*source.spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string actual = PlanToText(*plan);

  const char* update = std::getenv("TRAINC_UPDATE_GOLDEN");
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");  // bazel run
  if (update != nullptr && std::string(update) == "1") {
    ASSERT_NE(workspace, nullptr) << "use `bazel run` to update the golden file";
    std::ofstream(std::string(workspace) + "/" + kGolden) << actual;
    GTEST_SKIP() << "wrote " << kGolden;
  }

  const std::string expected = ReadFile(kGolden);
  ASSERT_FALSE(expected.empty()) << "missing " << kGolden;
  std::vector<std::string> want = absl::StrSplit(expected, '\n');
  std::vector<std::string> got = absl::StrSplit(actual, '\n');
  for (size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    ASSERT_EQ(got[i], want[i]) << kGolden << ":" << i + 1
                               << ": plan differs (TRAINC_UPDATE_GOLDEN=1 bazel run "
                                  "//compiler/planner:planner_golden_test to accept)";
  }
  ASSERT_EQ(got.size(), want.size());

  // The golden file is itself a valid plan.
  absl::StatusOr<Plan> parsed = PlanFromText(expected, kGolden);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
}

}  // namespace
}  // namespace trainc
