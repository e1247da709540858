#include "tools/viz/viz_cli.h"

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/planner.h"
#include "compiler/util/fnv.h"
#include "runtime/trace/plan_identity.h"
#include "runtime/trace/tracer.h"
#include "tools/viz/file_util.h"
#include "tools/viz/synthetic.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<VizArgs> Parse(std::vector<const char*> argv) {
  argv.insert(argv.begin(), "viz");
  return ParseVizArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(ParseVizArgsTest, AcceptsTheDocumentedForms) {
  auto a = Parse({"m.plan", "--trace", "t.json", "-o", "out.svg"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->input, "m.plan");
  EXPECT_EQ(a->trace, "t.json");
  EXPECT_EQ(a->output, "out.svg");
  EXPECT_TRUE(a->collapse);
  a = Parse({"--help"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->help);
  a = Parse({"x.train", "--no-collapse", "--min-repeats", "4", "--output=o.dot"});
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->collapse);
  EXPECT_EQ(a->min_repeats, 4);
  EXPECT_THAT(VizUsage(), HasSubstr("--trace"));
}

TEST(ParseVizArgsTest, MetricsAloneOrWithAPlan) {
  auto a = Parse({"--metrics", "a.jsonl", "--metrics=b=run/b.jsonl", "-o", "c.svg"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->input.empty());
  EXPECT_THAT(a->metrics, ::testing::ElementsAre("a.jsonl", "b=run/b.jsonl"));
  a = Parse({"m.plan", "--metrics", "a.jsonl", "-o", "m.dot"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->input, "m.plan");
  EXPECT_THAT(VizUsage(), HasSubstr("--metrics [LABEL=]F"));
  // Without a plan there is no graph to write as .dot.
  auto dot = Parse({"--metrics", "a.jsonl", "-o", "c.dot"});
  ASSERT_FALSE(dot.ok());
  EXPECT_THAT(std::string(dot.status().message()), HasSubstr(".svg, .png or .html"));
  EXPECT_FALSE(Parse({"--metrics"}).ok());
  EXPECT_FALSE(Parse({"--metrics", "label="}).ok());
}

TEST(ParseVizArgsTest, RejectsUsageMistakes) {
  EXPECT_FALSE(Parse({}).ok());
  EXPECT_FALSE(Parse({"a.plan", "b.plan"}).ok());
  EXPECT_FALSE(Parse({"a.plan", "--bogus"}).ok());
  // The tools' one parser: a typo is named with a did-you-mean.
  EXPECT_THAT(std::string(Parse({"a.plan", "--no-colapse"}).status().message()),
              HasSubstr("unknown option --no-colapse: did you mean --no-collapse?"));
  EXPECT_FALSE(Parse({"a.plan", "-o"}).ok());
  auto bad_ext = Parse({"a.plan", "-o", "x.jpg"});
  ASSERT_FALSE(bad_ext.ok());
  EXPECT_THAT(std::string(bad_ext.status().message()), HasSubstr(".dot, .svg"));
}

TEST(ParseVizArgsTest, ScalingAndItsOptions) {
  auto a = Parse({"x.train", "--scaling", "--machine=a100_nvlink", "--gpus", "1,8",
                  "--bucket-mb=1,auto"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->scaling);
  EXPECT_EQ(a->machine, "a100_nvlink");
  EXPECT_THAT(a->gpus, ::testing::ElementsAre(1, 8));
  EXPECT_THAT(a->bucket_mb, ::testing::ElementsAre("1", "auto"));
  EXPECT_THAT(VizUsage(), HasSubstr("--scaling"));
  EXPECT_THAT(VizUsage(), HasSubstr("cpu_loopback"));
  // The simulation's options alone would silently do nothing.
  auto alone = Parse({"x.train", "--machine", "a100_nvlink"});
  ASSERT_FALSE(alone.ok());
  EXPECT_THAT(std::string(alone.status().message()), HasSubstr("with --scaling"));
  EXPECT_FALSE(Parse({"--scaling", "--metrics", "a.jsonl"}).ok());
  EXPECT_FALSE(Parse({"x.train", "--scaling", "--gpus", "0"}).ok());
}

class RunVizTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::getenv("TEST_TMPDIR");
    plan_ = MakeSyntheticPlan({});
    plan_path_ = dir_ + "/m.plan";
    trace_path_ = dir_ + "/m.trace.json";
    ASSERT_TRUE(WritePlanFile(plan_, plan_path_).ok());
    ASSERT_TRUE(WriteStringToFile(trace_path_, MakeSyntheticTrace(plan_, 2)).ok());
  }
  absl::Status Run(VizArgs args) {
    out_.str("");
    err_.str("");
    return RunViz(args, out_, err_);
  }
  std::string dir_, plan_path_, trace_path_;
  Plan plan_;
  std::ostringstream out_, err_;
};

TEST_F(RunVizTest, WritesDotAndPrintsSummary) {
  VizArgs a;
  a.input = plan_path_;
  a.output = dir_ + "/m.dot";
  ASSERT_TRUE(Run(a).ok());
  EXPECT_THAT(out_.str(), HasSubstr("global batch 256 = 2 rank(s)"));
  EXPECT_THAT(out_.str(), HasSubstr("bucket 0:"));
  auto dot = ReadFileToString(a.output);
  ASSERT_TRUE(dot.ok());
  EXPECT_THAT(*dot, HasSubstr("digraph"));
}

TEST_F(RunVizTest, HtmlWithTraceHasEverySection) {
  VizArgs a;
  a.input = plan_path_;
  a.trace = trace_path_;
  a.output = dir_ + "/report.html";
  ASSERT_TRUE(Run(a).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("exposed(ms)"));
  auto html = ReadFileToString(a.output);
  ASSERT_TRUE(html.ok());
  for (const char* id : {"id=\"graph\"", "id=\"timeline\"", "id=\"overlap\"",
                         "id=\"buckets\"", "id=\"memory\"", "id=\"batch\""}) {
    EXPECT_THAT(*html, HasSubstr(id));
  }
  EXPECT_THAT(*html, ::testing::Not(HasSubstr("http://www.w3.org/Graphics")));
  EXPECT_TRUE(ReadFileToString(dir_ + "/report_timeline.svg").ok());
}

// A stopped job's trace (as train writes it): the report lists where each
// rank was, and the terminal prints the table.
TEST_F(RunVizTest, AStoppedJobsReportSaysWhereEachRankWas) {
  TraceStop stop;
  stop.reason = "rank 1 sent no heartbeat for 15s (hung?)";
  for (int rank : {0, 1}) {
    TracePosition p;
    p.rank = rank;
    p.step = 3;
    p.instr = rank;
    p.instructions = static_cast<int64_t>(plan_.instructions.size());
    p.state = rank == 0 ? "in all-reduce of bucket 0" : "running forward \"h1\"";
    p.seconds = 15;
    p.behind = rank == 1;
    p.where = absl::StrCat("step 3, ", p.state, " for 15.0 s");
    p.since_us = 100;
    stop.positions.push_back(p);
  }
  const std::string stopped = dir_ + "/stopped.trace.json";
  ASSERT_TRUE(MergeTraceParts(plan_, {"[]"}, 0, stopped, &stop).ok());
  VizArgs a;
  a.input = plan_path_;
  a.trace = stopped;
  a.output = dir_ + "/stopped.html";
  ASSERT_TRUE(Run(a).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("the job stopped: rank 1 sent no heartbeat for 15s (hung?)\n"
                                    "where each rank was:\n"
                                    "  rank 0: step 3, in all-reduce of bucket 0 for 15.0 s\n"
                                    "  rank 1: step 3, running forward \"h1\" for 15.0 s  <- behind\n"));
  auto html = ReadFileToString(a.output);
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("id=\"stop-reason\">The job stopped: rank 1 sent no heartbeat"));
  EXPECT_THAT(*html, HasSubstr("<table id=\"positions\">"));
  EXPECT_THAT(*html, HasSubstr("<td class=\"l\">1</td><td>3</td><td>1 of "));
  EXPECT_THAT(*html, HasSubstr("running forward &quot;h1&quot;</span></td><td>15.0</td>"
                               "<td><b style=\"color:#d62728\">behind</b></td>"));
  EXPECT_THAT(*html, HasSubstr("stop-marker behind"));
}

TEST_F(RunVizTest, RelativePathsFollowBuildWorkingDirectory) {
  setenv("BUILD_WORKING_DIRECTORY", dir_.c_str(), 1);
  VizArgs a;
  a.input = "m.plan";
  a.output = "rel.dot";
  absl::Status s = Run(a);
  unsetenv("BUILD_WORKING_DIRECTORY");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(ReadFileToString(dir_ + "/rel.dot").ok());
}

TEST_F(RunVizTest, MissingInputIsAnError) {
  VizArgs a;
  a.input = dir_ + "/nope.plan";
  absl::Status s = Run(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("nope.plan"));
}

TEST_F(RunVizTest, PlanOfAnotherVersionIsAnError) {
  auto text = ReadFileToString(plan_path_);
  ASSERT_TRUE(text.ok());
  std::string v99 = dir_ + "/v99.plan";
  ASSERT_TRUE(WriteStringToFile(
                  v99, absl::StrReplaceAll(*text, {{"trainc-plan 1\n",
                                                    "trainc-plan 99\n"}}))
                  .ok());
  VizArgs a;
  a.input = v99;
  a.output = dir_ + "/v99.dot";
  absl::Status s = Run(a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("version"));
}

TEST_F(RunVizTest, MalformedTraceReportsLineAndColumn) {
  std::string bad = dir_ + "/bad.json";
  ASSERT_TRUE(WriteStringToFile(bad, "{\"traceEvents\": [\n  {\"ph\": \"X\" \"ts\": 1}\n]}").ok());
  VizArgs a;
  a.input = plan_path_;
  a.trace = bad;
  a.output = dir_ + "/bad.dot";
  absl::Status s = Run(a);
  ASSERT_FALSE(s.ok());
  // The end of the offending token ("ts"), as nlohmann places it.
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.json:2:17: syntax error"));
}

TEST_F(RunVizTest, TraceOfAnotherPlanIsRejected) {
  MlpPlanOptions o;
  o.model = "other_model";
  o.hidden_layers = 3;
  std::string other = dir_ + "/other.json";
  ASSERT_TRUE(WriteStringToFile(other, MakeSyntheticTrace(MakeSyntheticPlan(o), 1)).ok());
  VizArgs a;
  a.input = plan_path_;
  a.trace = other;
  a.output = dir_ + "/other.dot";
  absl::Status s = Run(a);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("other_model"));
}

TEST_F(RunVizTest, TrainFileWithErrorsShowsDiagnostics) {
  std::string train = dir_ + "/m.train";
  ASSERT_TRUE(WriteStringToFile(train, "model m {\n  h = frob(x)\n}\n").ok());
  VizArgs a;
  a.input = train;
  a.output = dir_ + "/t.dot";
  absl::Status s = Run(a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not compile"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("m.train:2:"));
}

TEST_F(RunVizTest, TrainFileIsCompiledInProcess) {
  VizArgs a;
  a.input = "dsl_examples/fashion_mlp.train";
  a.output = dir_ + "/fm.dot";
  ASSERT_TRUE(Run(a).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("model fashion_mlp"));
}

// Two small metrics logs, as `train` writes them.
TEST_F(RunVizTest, ScalingSectionPlotAndTable) {
  VizArgs a;
  a.input = "dsl_examples/fashion_mlp.train";
  a.output = dir_ + "/fm.html";
  a.scaling = true;
  a.machine = "a100_nvlink";
  a.gpus = {1, 16};
  a.bucket_mb = {"1", "auto"};
  absl::Status s = Run(a);
  ASSERT_TRUE(s.ok()) << s;
  auto html = ReadFileToString(a.output);
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("<h2>Predicted scaling</h2>"));
  EXPECT_THAT(*html, HasSubstr("fashion_mlp on a100_nvlink"));
  EXPECT_THAT(*html, HasSubstr("<div id=\"scaling\"><svg"));
  EXPECT_THAT(*html, HasSubstr("<table id=\"scaling-table\">"));
  // A row per bucket size and world size, its numbers those of the plot.
  EXPECT_THAT(*html, HasSubstr("bucket_mb auto</td><td>16</td>"));
  auto svg = ReadFileToString(dir_ + "/fm_scaling.svg");
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*html, HasSubstr(svg->substr(0, 200)));
  EXPECT_THAT(*svg, HasSubstr("data-curve=\"bucket_mb 1\" data-gpus=\"16\""));
  EXPECT_THAT(*html, HasSubstr("bucket_mb auto's choices"));
  EXPECT_THAT(out_.str(), HasSubstr("predicted scaling, fashion_mlp on a100_nvlink"));
}

TEST_F(RunVizTest, ScalingWithABadProfileNamesTheFile) {
  const std::string bad = dir_ + "/bad.profile";
  ASSERT_TRUE(WriteStringToFile(bad, "name = bad\ncompute.peak_flop = 1e12\n").ok());
  VizArgs a;
  a.input = "dsl_examples/fashion_mlp.train";
  a.output = dir_ + "/bad.dot";
  a.scaling = true;
  a.machine = bad;
  absl::Status s = Run(a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("--machine " + bad + ": " + bad + ":2:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("compute.peak_flops"));
  a.machine = "h100";
  s = Run(a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("no such bundled machine profile 'h100'"));
}

class CurvesVizTest : public RunVizTest {
 protected:
  void SetUp() override {
    RunVizTest::SetUp();
    a_ = dir_ + "/a.metrics.jsonl";
    b_ = dir_ + "/b.metrics.jsonl";
    for (const std::string& path : {a_, b_}) {
      std::string log =
          "{\"kind\":\"run\",\"step\":0,\"time\":1,\"model\":\"fashion_mlp\","
          "\"gpus\":2,\"micro_batch\":64,\"accumulate\":2,\"loss_terms\":1}\n";
      for (int step = 1; step <= 50; ++step) {
        absl::StrAppend(&log, "{\"kind\":\"train\",\"step\":", step,
                        ",\"time\":2,\"epoch\":1,\"loss\":", 2.0 / step,
                        ",\"lr\":0.001,\"step_ms\":2.5,\"samples_per_s\":102400.0}\n");
        if (step % 25 == 0) {
          absl::StrAppend(&log, "{\"kind\":\"eval\",\"step\":", step,
                          ",\"time\":3,\"epoch\":1,\"examples\":100,\"loss\":",
                          2.5 / step, ",\"accuracy\":0.8}\n");
        }
      }
      ASSERT_TRUE(WriteStringToFile(path, log).ok());
    }
  }
  std::string a_, b_;
};

TEST_F(CurvesVizTest, CurvesAloneAsSvg) {
  VizArgs v;
  v.metrics = {a_, absl::StrCat("four gpus=", b_)};
  v.output = dir_ + "/curves.svg";
  ASSERT_TRUE(Run(v).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("run a: fashion_mlp gpus=2 micro_batch=64 "
                                    "accumulate=2, 50 steps, last train loss 0.0400, "
                                    "last eval loss 0.0500 (accuracy 80.00%)"));
  EXPECT_THAT(out_.str(), HasSubstr("run four gpus: "));
  auto svg = ReadFileToString(v.output);
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*svg, HasSubstr("class=\"curves\""));
  EXPECT_THAT(*svg, HasSubstr("data-run=\"a\""));
}

TEST_F(CurvesVizTest, CurvesAloneAsHtml) {
  VizArgs v;
  v.metrics = {a_, b_};
  setenv("BUILD_WORKING_DIRECTORY", dir_.c_str(), 1);
  absl::Status s = Run(v);  // default output: training.html
  unsetenv("BUILD_WORKING_DIRECTORY");
  ASSERT_TRUE(s.ok()) << s;
  auto html = ReadFileToString(dir_ + "/training.html");
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("<h2>Training</h2>"));
  EXPECT_THAT(*html, HasSubstr("id=\"training\""));
  EXPECT_THAT(*html, HasSubstr("id=\"runs\""));
  EXPECT_THAT(*html, HasSubstr("80.00%"));
  EXPECT_THAT(*html, ::testing::Not(HasSubstr("id=\"graph\"")));
}

TEST_F(CurvesVizTest, ThePlanReportGainsATrainingSection) {
  VizArgs v;
  v.input = plan_path_;
  v.trace = trace_path_;
  v.metrics = {a_, b_};
  v.output = dir_ + "/both.html";
  ASSERT_TRUE(Run(v).ok()) << err_.str();
  auto html = ReadFileToString(v.output);
  ASSERT_TRUE(html.ok());
  for (const char* id : {"id=\"graph\"", "id=\"timeline\"", "id=\"training\"",
                         "id=\"runs\"", "id=\"buckets\""}) {
    EXPECT_THAT(*html, HasSubstr(id));
  }
  // The synthetic plan's model is not fashion_mlp.
  EXPECT_THAT(err_.str(), HasSubstr("is a run of model fashion_mlp, not of"));
  // Other outputs get the curves beside them, as the timeline.
  v.output = dir_ + "/both.dot";
  ASSERT_TRUE(Run(v).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("both_curves.svg"));
  EXPECT_TRUE(ReadFileToString(dir_ + "/both_curves.svg").ok());
}

TEST_F(CurvesVizTest, BadMetricsFilesAreErrorsOrWarnings) {
  VizArgs v;
  v.metrics = {dir_ + "/nope.jsonl"};
  v.output = dir_ + "/x.svg";
  EXPECT_EQ(Run(v).code(), absl::StatusCode::kNotFound);
  v.metrics = {trace_path_};  // a trace is not a metrics log
  absl::Status s = Run(v);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("m.trace.json:1:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a metrics log"));
  // A log cut short mid-line (the run crashed) is drawn, with a warning.
  auto text = ReadFileToString(a_);
  ASSERT_TRUE(WriteStringToFile(dir_ + "/cut.jsonl", *text + "{\"kind\":\"tr").ok());
  v.metrics = {dir_ + "/cut.jsonl"};
  ASSERT_TRUE(Run(v).ok());
  EXPECT_THAT(err_.str(), HasSubstr("last line is incomplete"));
}

TEST_F(CurvesVizTest, PngThroughRsvgConvert) {
  VizArgs v;
  v.metrics = {a_};
  v.output = dir_ + "/curves.png";
  const char* old_path = std::getenv("PATH");
  std::string saved = old_path ? old_path : "";
  setenv("PATH", "/nonexistent", 1);
  absl::Status missing = Run(v);
  setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr("librsvg2-bin"));
  absl::Status s = Run(v);
  if (absl::IsNotFound(s)) GTEST_SKIP() << "rsvg-convert not installed: " << s;
  ASSERT_TRUE(s.ok()) << s;
  auto png = ReadFileToString(v.output);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->substr(0, 8), "\x89PNG\r\n\x1a\n");
}

TEST_F(RunVizTest, SvgWithoutDotIsAClearError) {
  const char* old_path = std::getenv("PATH");
  std::string saved = old_path ? old_path : "";
  setenv("PATH", "/nonexistent", 1);
  VizArgs a;
  a.input = plan_path_;
  a.output = dir_ + "/m.svg";
  absl::Status s = Run(a);
  // The HTML report still comes out, saying why the graph is missing.
  VizArgs h = a;
  h.output = dir_ + "/nodot.html";
  absl::Status hs = Run(h);
  setenv("PATH", saved.c_str(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("Graphviz 'dot' was not found"));
  ASSERT_TRUE(hs.ok()) << hs;
  auto html = ReadFileToString(h.output);
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("Graph not rendered"));
}

// A run recorded its plan (runtime/trace/plan_identity.h) in its trace and
// metrics log: viz draws that plan (the .train with the run's overrides),
// and refuses a file edited since, or a trace and a log of two runs.
class RanPlanVizTest : public RunVizTest {
 protected:
  void SetUp() override {
    RunVizTest::SetUp();
    train_ = dir_ + "/mlp.train";
    auto text = ReadFileToString("dsl_examples/fashion_mlp.train");
    ASSERT_TRUE(text.ok()) << text.status();
    text_ = *text;
    ASSERT_TRUE(WriteStringToFile(train_, text_).ok());
    trace_ = Record({{"micro_batch", "4"}, {"steps", "6"}}, "ran", &ran_);
  }
  // What `train mlp.train OVERRIDES --trace NAME.json --metrics NAME.jsonl`
  // records of its plan (no steps traced); returns the trace's path.
  std::string Record(const NamedValues& overrides, const std::string& name,
                     Plan* plan = nullptr) {
    FrontendResult compiled = CompileFile(train_, overrides);
    EXPECT_TRUE(compiled.spec) << FormatDiagnostics(compiled.diagnostics, compiled.source);
    PlanOptions options;
    options.default_machine = "cpu_loopback";
    absl::StatusOr<Plan> built = BuildPlan(*compiled.spec, options);
    EXPECT_TRUE(built.ok()) << built.status();
    PlanIdentity id = IdentifyPlan(*built, train_, overrides);
    id.device = "cpu";
    const std::string trace = absl::StrCat(dir_, "/", name, ".json");
    EXPECT_TRUE(MergeTraceParts(*built, {"[]"}, 0, trace, nullptr, &id).ok());
    EXPECT_TRUE(WriteStringToFile(absl::StrCat(dir_, "/", name, ".jsonl"),
                                  absl::StrCat("{\"kind\":\"run\",\"step\":0,\"time\":1,"
                                               "\"model\":\"fashion_mlp\",\"plan\":",
                                               PlanIdentityJson(id), "}\n",
                                               "{\"kind\":\"train\",\"step\":1,\"time\":2,"
                                               "\"epoch\":1,\"loss\":2.0}\n"))
                    .ok());
    if (plan != nullptr) *plan = *built;
    return trace;
  }
  VizArgs Args(const std::string& input, const std::string& trace,
               std::vector<std::string> metrics = {}) {
    VizArgs a;
    a.input = input;
    a.trace = trace;
    a.metrics = std::move(metrics);
    a.output = dir_ + "/ran.html";
    return a;
  }
  std::string train_, text_, trace_;
  Plan ran_;
};

TEST_F(RanPlanVizTest, DrawsThePlanThatRanNotTheFilesOwn) {
  ASSERT_TRUE(Run(Args(train_, trace_, {dir_ + "/ran.jsonl"})).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("drawing the plan that ran: " + train_ +
                                    " --micro_batch 4 --steps 6 (as recorded in " + trace_));
  EXPECT_THAT(out_.str(), HasSubstr("global batch 16 = 2 rank(s) x micro-batch 4 x 2"));
  EXPECT_EQ(err_.str(), "");
  auto html = ReadFileToString(dir_ + "/ran.html");
  ASSERT_TRUE(html.ok());
  EXPECT_THAT(*html, HasSubstr("0 epoch(s), 6 step(s)"));
  EXPECT_THAT(*html, HasSubstr("--micro_batch 4 --steps 6 (the plan that ran"));
  // The metrics log alone says as much.
  ASSERT_TRUE(Run(Args(train_, "", {dir_ + "/ran.jsonl"})).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("micro-batch 4 x 2"));
}

TEST_F(RanPlanVizTest, AFileEditedSinceTheRunIsRefused) {
  std::string edited = text_;
  const std::string from = "accumulate  = 2";
  ASSERT_NE(edited.find(from), std::string::npos);
  edited.replace(edited.find(from), from.size(), "accumulate  = 4");
  ASSERT_TRUE(WriteStringToFile(train_, edited).ok());
  absl::Status s = Run(Args(train_, trace_));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const std::string m(s.message());
  EXPECT_THAT(m, HasSubstr(train_ + " is not the plan that ran (recorded in " + trace_));
  EXPECT_THAT(m, HasSubstr("the file changed since the run"));
  EXPECT_THAT(m, HasSubstr(absl::StrCat("plan hash: ", HashHex(PlanHash(ran_)), " in the run")));
  EXPECT_THAT(m, HasSubstr(absl::StrCat("text hash of ", train_, ": ", TextHash(text_))));
  EXPECT_THAT(m, HasSubstr("accumulate: 2 in the run, 4 in " + train_));
  // A comment changes the text, not the plan: drawn.
  ASSERT_TRUE(WriteStringToFile(train_, "# edited\n" + text_).ok());
  EXPECT_TRUE(Run(Args(train_, trace_)).ok());
}

TEST_F(RanPlanVizTest, ATraceAndAMetricsLogOfTwoRunsAreRefused) {
  Record({{"micro_batch", "4"}, {"steps", "5"}}, "other");
  absl::Status s = Run(Args(train_, trace_, {dir_ + "/other.jsonl"}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("are of two different runs"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("steps: 6 in the trace's run, 5 in"));
  // Overlaid with the traced run's own log: drawn.
  EXPECT_TRUE(Run(Args(train_, trace_, {dir_ + "/other.jsonl", dir_ + "/ran.jsonl"})).ok())
      << err_.str();
}

TEST_F(RanPlanVizTest, AnOlderTraceIsDrawnAsWrittenWithAWarning) {
  ASSERT_TRUE(MergeTraceParts(ran_, {"[]"}, 0, dir_ + "/old.json").ok());
  VizArgs a = Args(train_, dir_ + "/old.json");
  // The file's own plan does not match the run's trace (micro-batch 64):
  // drawn as the file says, structurally checked only.
  ASSERT_TRUE(Run(a).ok()) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("old.json records no plan"));
  EXPECT_THAT(err_.str(), HasSubstr("could not be checked"));
  EXPECT_THAT(out_.str(), HasSubstr("micro-batch 64"));
  EXPECT_THAT(out_.str(), ::testing::Not(HasSubstr("drawing the plan that ran")));
}

TEST_F(RanPlanVizTest, APlanFileIsComparedByItsHash) {
  const std::string same = dir_ + "/ran.plan";
  ASSERT_TRUE(WritePlanFile(ran_, same).ok());
  ASSERT_TRUE(Run(Args(same, trace_)).ok()) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("micro-batch 4"));
  // The file's own plan, compiled without the run's overrides.
  FrontendResult compiled = CompileFile(train_);
  ASSERT_TRUE(compiled.spec);
  absl::StatusOr<Plan> own = BuildPlan(*compiled.spec);
  ASSERT_TRUE(own.ok());
  const std::string other = dir_ + "/own.plan";
  ASSERT_TRUE(WritePlanFile(*own, other).ok());
  absl::Status s = Run(Args(other, trace_));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr(other + " is not the plan that ran"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("micro_batch: 4 in the run, 64 in " + other));
}

}  // namespace
}  // namespace trainc::viz
