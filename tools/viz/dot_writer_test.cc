#include "tools/viz/dot_writer.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/plan/plan_io.h"
#include "tools/viz/file_util.h"
#include "tools/viz/plan_loader.h"
#include "tools/viz/synthetic.h"
#include "tools/viz/viz_graph.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;

// Golden files. Regenerate them after an intended change with
//   TRAINC_UPDATE_GOLDEN=1 bazel run //tools/viz:dot_writer_test
// The default example, compiled in-process by the front end and planner:
constexpr char kExample[] = "dsl_examples/fashion_mlp.train";
constexpr char kExampleGolden[] = "tools/viz/testdata/fashion_mlp.dot";
// A small plan file (synthetic), to cover reading plans from files:
constexpr char kPlan[] = "tools/viz/testdata/small.plan";
constexpr char kGolden[] = "tools/viz/testdata/small.dot";

bool UpdateGolden() {
  const char* update = std::getenv("TRAINC_UPDATE_GOLDEN");
  return update != nullptr && *update == '1';
}

TEST(DotWriterTest, DefaultExampleMatchesGolden) {
  auto plan = LoadPlanForViz(kExample);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto graph = BuildVizGraph(*plan);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::string dot = WriteDot(*graph, *plan);
  if (UpdateGolden()) {
    const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
    ASSERT_NE(workspace, nullptr) << "regenerate with `bazel run`";
    ASSERT_TRUE(
        WriteStringToFile(absl::StrCat(workspace, "/", kExampleGolden), dot).ok());
    GTEST_SKIP() << "golden file rewritten in " << workspace;
  }
  auto golden = ReadFileToString(kExampleGolden);
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(dot, *golden)
      << "DOT changed; if intended: TRAINC_UPDATE_GOLDEN=1 bazel run "
         "//tools/viz:dot_writer_test";
  EXPECT_THAT(dot, HasSubstr("micro-step \xC3\x97 2"));
  EXPECT_THAT(dot, HasSubstr("h1.weight"));
}

TEST(DotWriterTest, SmallPlanMatchesGolden) {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (UpdateGolden()) {
    ASSERT_NE(workspace, nullptr) << "regenerate with `bazel run`";
    MlpPlanOptions o;
    o.model = "small_mlp";
    Plan plan = MakeSyntheticPlan(o);
    ASSERT_TRUE(WritePlanFile(plan, absl::StrCat(workspace, "/", kPlan)).ok());
    auto graph = BuildVizGraph(plan);
    ASSERT_TRUE(graph.ok());
    ASSERT_TRUE(WriteStringToFile(absl::StrCat(workspace, "/", kGolden),
                                  WriteDot(*graph, plan))
                    .ok());
    GTEST_SKIP() << "golden files rewritten in " << workspace;
  }
  auto plan = LoadPlanForViz(kPlan);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto graph = BuildVizGraph(*plan);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto golden = ReadFileToString(kGolden);
  ASSERT_TRUE(golden.ok()) << golden.status();
  EXPECT_EQ(WriteDot(*graph, *plan), *golden)
      << "DOT changed; if intended: TRAINC_UPDATE_GOLDEN=1 bazel run "
         "//tools/viz:dot_writer_test";
}

TEST(DotWriterTest, StylesAndLegend) {
  Plan plan = MakeSyntheticPlan({});
  auto graph = BuildVizGraph(plan);
  ASSERT_TRUE(graph.ok());
  std::string dot = WriteDot(*graph, plan);
  EXPECT_EQ(dot.rfind("digraph \"synthetic_mlp\" {", 0), 0u);
  EXPECT_THAT(dot, HasSubstr("micro-step \xC3\x97 2"));
  EXPECT_THAT(dot, HasSubstr("subgraph cluster_comm"));
  EXPECT_THAT(dot, HasSubstr("shape=hexagon"));
  EXPECT_THAT(dot, HasSubstr("style=dashed"));
  for (const Bucket& b : plan.buckets) {
    EXPECT_THAT(dot, HasSubstr(absl::StrCat("legend_b", b.id, " [label=\"bucket ",
                                            b.id, ": ")));
    EXPECT_THAT(dot, HasSubstr(absl::StrCat("(", b.bytes, " B)")));
  }
  EXPECT_EQ(dot.back(), '\n');
}

TEST(DotWriterTest, EscapesQuotes) {
  MlpPlanOptions o;
  o.model = "a \"quoted\" model";
  Plan plan = MakeSyntheticPlan(o);
  auto graph = BuildVizGraph(plan);
  ASSERT_TRUE(graph.ok());
  EXPECT_THAT(WriteDot(*graph, plan), HasSubstr("digraph \"a \\\"quoted\\\" model\""));
}

}  // namespace
}  // namespace trainc::viz
