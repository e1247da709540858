#include "tools/viz/curves.h"

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc::viz {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// A run of `steps` steps whose loss falls from 2.3 towards 0.3, evaluated
// every `eval_every` steps.
RunMetrics MakeRun(const std::string& label, int steps, int eval_every,
                   bool language_model = false) {
  RunMetrics r;
  r.label = label;
  r.path = label + ".metrics.jsonl";
  r.model = language_model ? "tiny_gpt" : "fashion_mlp";
  r.config = "gpus=2 micro_batch=64 accumulate=2";
  for (int s = 1; s <= steps; ++s) {
    const double loss = 0.3 + 2.0 * std::exp(-s / 50.0) + 0.05 * std::sin(s);
    r.train["loss"].steps.push_back(s);
    r.train["loss"].values.push_back(loss);
    r.train["lr"].steps.push_back(s);
    r.train["lr"].values.push_back(1e-3);
    r.train["samples_per_s"].steps.push_back(s);
    r.train["samples_per_s"].values.push_back(20000 + 500 * std::sin(s));
    if (language_model) {
      r.train["tokens_per_s"].steps.push_back(s);
      r.train["tokens_per_s"].values.push_back(64 * (20000 + 500 * std::sin(s)));
    }
    if (s % eval_every == 0) {
      r.eval["loss"].steps.push_back(s);
      r.eval["loss"].values.push_back(loss + 0.05);
      const char* key = language_model ? "bits_per_byte" : "accuracy";
      r.eval[key].steps.push_back(s);
      r.eval[key].values.push_back(language_model ? (loss + 0.05) / std::log(2.0)
                                                  : 1 - loss / 3);
    }
  }
  return r;
}

TEST(CurvesTest, NiceTicks) {
  EXPECT_THAT(NiceTicks(0, 1, 5), ElementsAre(0, 0.2, 0.4, 0.6, 0.8, 1.0));
  EXPECT_THAT(NiceTicks(1, 2340, 6), ElementsAre(500, 1000, 1500, 2000));
  EXPECT_THAT(NiceTicks(0.27, 2.41, 5),
              ElementsAre(DoubleNear(0.5, 1e-12), 1.0, 1.5, 2.0));
  EXPECT_THAT(NiceTicks(3, 3, 5), ElementsAre(3));
}

TEST(CurvesTest, TickLabels) {
  EXPECT_EQ(FormatTick(0, 0.2), "0");
  EXPECT_EQ(FormatTick(0.4, 0.2), "0.4");
  EXPECT_EQ(FormatTick(0.001, 0.0002), "0.0010");
  EXPECT_EQ(FormatTick(1500, 500), "1500");
  EXPECT_EQ(FormatTick(17500, 2500), "17.5k");
  EXPECT_EQ(FormatTick(20000, 5000), "20k");
  EXPECT_EQ(FormatTick(1.2e6, 2e5), "1.2M");
  EXPECT_EQ(FormatTick(2e-5, 1e-5), "2e-05");
}

TEST(CurvesTest, LogTicks) {
  EXPECT_THAT(LogTicks(0.25, 2.4), ElementsAre(0.3, 0.5, 0.7, 1, 1.5, 2));
  EXPECT_THAT(LogTicks(0.05, 3), ElementsAre(0.05, 0.1, 0.2, 0.5, 1, 2));
  EXPECT_THAT(LogTicks(1e-3, 10), ElementsAre(0.001, 0.01, 0.1, 1, 10));
  EXPECT_THAT(LogTicks(0, 1), ElementsAre());
}

TEST(CurvesTest, MovingAverage) {
  // Away from the ends: the centred mean.
  const std::vector<double> v = {9, 1, 5, 3, 7, 5, 0, 4};
  const std::vector<double> m = MovingAverage(v, 2);
  EXPECT_DOUBLE_EQ(m[2], (9 + 1 + 5 + 3 + 7) / 5.0);
  EXPECT_DOUBLE_EQ(m[3], (1 + 5 + 3 + 7 + 5) / 5.0);
  EXPECT_DOUBLE_EQ(m[5], (3 + 7 + 5 + 0 + 4) / 5.0);
  // A straight line stays itself, ends included (a trailing or centred
  // mean would bend the first points towards the later ones).
  std::vector<double> line;
  for (int i = 0; i < 50; ++i) line.push_back(2.3 - 0.04 * i);
  const std::vector<double> fitted = MovingAverage(line, 10);
  for (int i = 0; i < 50; ++i) EXPECT_NEAR(fitted[i], line[i], 1e-9) << i;
  EXPECT_THAT(MovingAverage({1, 2}, 0), ElementsAre(1, 2));
  const std::vector<double> gaps = MovingAverage({1, NAN, 3, 4, 5}, 1);
  EXPECT_DOUBLE_EQ(gaps[1], 2);  // the mean of 1 and 3
  EXPECT_TRUE(std::isfinite(gaps[0]));
}

TEST(CurvesTest, TwoRunsOverlaidWithALegend) {
  const std::string svg =
      RenderCurvesSvg({MakeRun("gpus=2 accumulate=2", 300, 100),
                       MakeRun("gpus=1 accumulate=4", 300, 100)});
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"curves\""));
  EXPECT_EQ(Count(svg, "class=\"legend-entry\""), 2);
  EXPECT_THAT(svg, HasSubstr(">gpus=2 accumulate=2</text>"));
  EXPECT_THAT(svg, HasSubstr(">gpus=1 accumulate=4</text>"));
  for (const char* panel : {"curves-loss", "curves-eval-accuracy", "curves-lr",
                            "curves-throughput"}) {
    EXPECT_THAT(svg, HasSubstr(absl::StrCat("id=\"", panel, "\""))) << panel;
  }
  EXPECT_THAT(svg, Not(HasSubstr("curves-eval-bits_per_byte")));
  EXPECT_THAT(svg, HasSubstr("throughput (samples/s)"));
  // 300 steps are smoothed: faint and bold lines of loss and throughput.
  EXPECT_EQ(Count(svg, "class=\"series raw\""), 4);
  EXPECT_EQ(Count(svg, "class=\"series smooth\""), 4);
  // Eval loss and accuracy, each run: 3 dots apiece.
  EXPECT_EQ(Count(svg, "class=\"series eval\""), 4);
  EXPECT_EQ(Count(svg, "class=\"eval-point\""), 12);
  EXPECT_THAT(svg, HasSubstr("gpus=1 accumulate=4: loss"));
  // One colour per run.
  EXPECT_THAT(svg, HasSubstr("stroke=\"#1f77b4\""));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#d62728\""));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
  EXPECT_THAT(svg, Not(HasSubstr("inf")));
  // 2.3 down to about 0.3: a log axis.
  EXPECT_THAT(svg, HasSubstr(">loss (log scale)</text>"));
}

TEST(CurvesTest, FallingLossIsDrawnFalling) {
  // SVG's y grows downwards: the first point of a falling curve is higher
  // on the page (smaller y) than its last.
  RunMetrics r = MakeRun("a", 40, 1000);  // 40 steps: one plain line
  const std::string svg = RenderCurvesSvg({r});
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      svg, m, std::regex("id=\"curves-loss\"[^]*?class=\"series plain\"[^>]*d=\"M([0-9.]+),([0-9.]+)"
                         "[^\"]* L([0-9.]+),([0-9.]+)\"")));
  const double x_first = std::stod(m[1]), y_first = std::stod(m[2]);
  const double x_last = std::stod(m[3]), y_last = std::stod(m[4]);
  EXPECT_LT(x_first, x_last);
  EXPECT_LT(y_first, y_last);
}

TEST(CurvesTest, LanguageModelsShowTokensAndBitsPerByte) {
  const std::string svg = RenderCurvesSvg({MakeRun("gpt", 200, 50, true)});
  EXPECT_THAT(svg, HasSubstr("throughput (tokens/s)"));
  EXPECT_THAT(svg, HasSubstr("id=\"curves-eval-bits_per_byte\""));
  EXPECT_THAT(svg, Not(HasSubstr("curves-eval-accuracy")));
}

TEST(CurvesTest, LongRunsStaySmall) {
  // 100,000 steps: a few points per pixel column, not 100,000 per line.
  const std::string svg = RenderCurvesSvg({MakeRun("long", 100000, 10000)});
  EXPECT_LT(svg.size(), 200000u);
}

TEST(CurvesTest, NoDataStillDrawsAnEmptyLossPanel) {
  RunMetrics empty;
  empty.label = "empty";
  const std::string svg = RenderCurvesSvg({empty});
  EXPECT_THAT(svg, HasSubstr("id=\"curves-loss\""));
  EXPECT_THAT(svg, Not(HasSubstr("nan")));
}

}  // namespace
}  // namespace trainc::viz
