#include "tools/viz/scaling_plot.h"

#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "compiler/cost/bundled_profiles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/simulate/scaling.h"

namespace trainc::viz {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A dot of the plot: <circle class="point KIND" ... data-gpus="N"
// data-UNIT="V" cx="X" cy="Y" ...>.
struct Dot {
  int64_t gpus = 0;
  std::string value;  // as printed
  double cx = 0, cy = 0;
};

std::vector<Dot> Dots(const std::string& svg, const std::string& kind) {
  const std::regex re("<circle class=\"point " + kind +
                      "\" data-curve=\"[^\"]*\" data-gpus=\"(\\d+)\" data-[a-z]+=\"([^\"]+)\" "
                      "cx=\"([-0-9.]+)\" cy=\"([-0-9.]+)\"");
  std::vector<Dot> dots;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it) {
    Dot d;
    EXPECT_TRUE(absl::SimpleAtoi((*it)[1].str(), &d.gpus));
    d.value = (*it)[2].str();
    EXPECT_TRUE(absl::SimpleAtod((*it)[3].str(), &d.cx));
    EXPECT_TRUE(absl::SimpleAtod((*it)[4].str(), &d.cy));
    dots.push_back(d);
  }
  return dots;
}

// The plot area of panel `id`: x, y, width, height.
std::vector<double> Frame(const std::string& svg, const std::string& id) {
  const std::regex re("id=\"scaling-" + id +
                      "\">\\n<text[^\\n]*\\n<rect class=\"frame\" x=\"([0-9.]+)\" "
                      "y=\"([0-9.]+)\" width=\"([0-9.]+)\" height=\"([0-9.]+)\"");
  std::smatch m;
  if (!std::regex_search(svg, m, re)) return {};
  std::vector<double> f(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(absl::SimpleAtod(m[i + 1].str(), &f[i]));
  return f;
}

class ScalingPlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<cost::MachineProfile> profile = cost::LoadMachineProfile("h100_nvlink_ib");
    ASSERT_TRUE(profile.ok()) << profile.status();
    absl::StatusOr<std::vector<simulate::ScalingCurve>> curves = simulate::SimulateScaling(
        "dsl_examples/fashion_mlp.train", *profile, simulate::ScalingOptions{});
    ASSERT_TRUE(curves.ok()) << curves.status();
    curves_ = *curves;
    ASSERT_EQ(curves_.size(), 1u);
    ASSERT_EQ(curves_[0].points.size(), 11u);  // 1, 2, ..., 1024
    svg_ = RenderScalingSvg(curves_, "fashion_mlp on h100_nvlink_ib");
  }
  std::vector<simulate::ScalingCurve> curves_;
  std::string svg_;
};

TEST_F(ScalingPlotTest, DotsAreTheSimulatedNumbersOnALinearAxisFromZero) {
  const std::vector<Dot> step = Dots(svg_, "step");
  const std::vector<double> frame = Frame(svg_, "time");
  ASSERT_EQ(step.size(), 11u);
  ASSERT_EQ(frame.size(), 4u);
  const double bottom = frame[1] + frame[3];
  // Pixels per millisecond above the bottom (y = 0), from the highest dot.
  const double px_per_ms =
      (bottom - step[10].cy) / (curves_[0].points[10].prediction.step_us / 1e3);
  for (size_t i = 0; i < step.size(); ++i) {
    const simulate::ScalingPoint& p = curves_[0].points[i];
    EXPECT_EQ(step[i].gpus, p.gpus);
    const double ms = p.prediction.step_us / 1e3;
    EXPECT_EQ(step[i].value, absl::StrFormat("%.4g", ms));
    EXPECT_GT(step[i].cy, frame[1]);
    EXPECT_LT(step[i].cy, bottom);
    // Every dot at that scale, within the 0.05 px coordinates are rounded to.
    EXPECT_NEAR(bottom - step[i].cy, px_per_ms * ms, 0.11) << p.gpus << " GPUs";
  }
  // The step line rises past 8 GPUs (the node boundary) on this profile.
  EXPECT_LT(step[10].cy, step[0].cy - 50);

  const std::vector<Dot> eff = Dots(svg_, "efficiency");
  ASSERT_EQ(eff.size(), 11u);
  EXPECT_EQ(eff[0].value, "100");
  EXPECT_EQ(eff[10].value, absl::StrFormat("%.4g", 100 * curves_[0].points[10].efficiency));
  // The backward and exposed lines are drawn too.
  EXPECT_THAT(svg_, HasSubstr("class=\"series backward\""));
  EXPECT_THAT(svg_, HasSubstr("class=\"series exposed\""));
}

TEST_F(ScalingPlotTest, GpusAreOnALog2Axis) {
  const std::vector<Dot> step = Dots(svg_, "step");
  const std::vector<double> frame = Frame(svg_, "time");
  ASSERT_EQ(step.size(), 11u);
  ASSERT_EQ(frame.size(), 4u);
  // Each doubling the same distance, 1 and 1024 inside the frame.
  const double octave = step[1].cx - step[0].cx;
  EXPECT_GT(octave, 30);
  for (size_t i = 1; i < step.size(); ++i) {
    EXPECT_NEAR(step[i].cx - step[i - 1].cx, octave, 0.11) << step[i].gpus << " GPUs";
  }
  EXPECT_GT(step[0].cx, frame[0]);
  EXPECT_LT(step[10].cx, frame[0] + frame[2]);
  EXPECT_NEAR(step[10].cx - step[0].cx, 10 * octave, 0.2);
  // The tick labelled 1024 sits over the 1024 dot.
  EXPECT_THAT(svg_, HasSubstr(absl::StrFormat(
                        "class=\"gpus-tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                        "fill=\"#555\">1024<",
                        step[10].cx, frame[1] + frame[3] + 15)));
}

TEST_F(ScalingPlotTest, OneColourPerCurveAndTextIsEscaped) {
  std::vector<simulate::ScalingCurve> two = {curves_[0], curves_[0]};
  two[1].label = "bucket_mb <25> & \"x\"";
  two[1].description = "a<b";
  const std::string svg = RenderScalingSvg(two, "m<&>");
  EXPECT_EQ(Dots(svg, "step").size(), 22u);
  EXPECT_THAT(svg, HasSubstr("bucket_mb &lt;25&gt; &amp; &quot;x&quot;"));
  EXPECT_THAT(svg, HasSubstr("Predicted scaling: m&lt;&amp;&gt;"));
  EXPECT_THAT(svg, HasSubstr("a&lt;b"));
  EXPECT_THAT(svg, Not(HasSubstr("<25>")));
  EXPECT_THAT(svg, Not(HasSubstr("m<&>")));
}

}  // namespace
}  // namespace trainc::viz
