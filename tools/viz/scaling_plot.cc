#include "tools/viz/scaling_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/viz/curves.h"
#include "tools/viz/palette.h"
#include "tools/viz/xml_escape.h"

namespace trainc::viz {
namespace {

constexpr double kWidth = 1120;
constexpr double kPanelW = 540, kPanelH = 300, kGap = 20, kMarginX = 10;
constexpr double kPlotLeft = 64, kPlotRight = 16, kPlotTop = 30, kPlotBottom = 40;

// One line of a panel.
struct Line {
  int curve = 0;
  std::string kind;   // "step", "backward", "exposed", "efficiency"
  std::string dash;   // stroke-dasharray, "" for solid
  bool dots = false;  // a dot per world size, with its value
  std::vector<double> gpus, values;
};

struct Panel {
  std::string id, title, unit;  // unit: "ms" or "percent", for data-*
  std::vector<Line> lines;
  double floor_hi = 0;          // the y axis reaches at least this
};

// A panel's plot area in pixels: GPUs on a log2 axis, values from 0 to hi.
struct PlotArea {
  double x0, y0, w, h;
  double gpus_lo, gpus_hi;
  double lo2, hi2;  // log2 of the GPUs at the axis' ends
  double hi;
  static constexpr double kPad = 12;  // room for the dots at either end

  double X(double gpus) const {
    return x0 + kPad + (std::log2(gpus) - lo2) / (hi2 - lo2) * (w - 2 * kPad);
  }
  double Y(double v) const { return y0 + h - v / hi * h; }
};

PlotArea PanelArea(const Panel& panel, double px, double py, double gpus_lo,
                   double gpus_hi) {
  double hi = panel.floor_hi;
  for (const Line& line : panel.lines) {
    for (double v : line.values) {
      if (std::isfinite(v)) hi = std::max(hi, v);
    }
  }
  hi = hi > 0 ? hi * 1.08 : 1;
  // log2 GPUs, with room for the dots at either end.
  double lo2 = std::log2(gpus_lo), hi2 = std::log2(gpus_hi);
  if (hi2 <= lo2) {
    lo2 -= 1;
    hi2 += 1;
  }
  return {px + kPlotLeft, py + kPlotTop, kPanelW - kPlotLeft - kPlotRight,
          kPanelH - kPlotTop - kPlotBottom, gpus_lo, gpus_hi, lo2, hi2, hi};
}

// The grid lines, their tick labels and the GPU axis' title.
std::string RenderGrid(const PlotArea& a) {
  std::string svg;
  const std::vector<double> yt = NiceTicks(0, a.hi, 5);
  const double ys = yt.size() > 1 ? yt[1] - yt[0] : a.hi;
  for (double t : yt) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
        a.x0, a.Y(t), a.x0 + a.w, a.Y(t), a.x0 - 5, a.Y(t) + 4, FormatTick(t, ys)));
  }
  // A tick at every power of two in range (every other one past 16 of them).
  const int first = static_cast<int>(std::ceil(std::log2(a.gpus_lo) - 1e-9));
  const int last = static_cast<int>(std::floor(std::log2(a.gpus_hi) + 1e-9));
  const int every = last - first >= 16 ? 2 : 1;
  for (int e = first; e <= last; e += every) {
    const double g = std::ldexp(1.0, e);
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
        "<text class=\"gpus-tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
        "fill=\"#555\">%d</text>\n",
        a.X(g), a.y0, a.X(g), a.y0 + a.h, a.X(g), a.y0 + a.h + 15,
        static_cast<int64_t>(g)));
  }
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">GPUs (log "
      "scale)</text>\n",
      a.x0 + a.w / 2, a.y0 + a.h + 32));
  return svg;
}

// One line of a panel as a path, with its dots when it has them; empty
// when the line has no finite value.
std::string RenderLine(const Line& line, const Panel& panel,
                       const std::vector<simulate::ScalingCurve>& curves,
                       const PlotArea& a) {
  const std::string color = RunColor(line.curve);
  // Earlier curves are drawn wider, so that one lying exactly on another
  // shows as a rim around it.
  const double wide = 1.5 * (static_cast<int>(curves.size()) - 1 - line.curve);
  const std::string& label = curves[line.curve].label;
  std::string d;
  for (size_t i = 0; i < line.values.size(); ++i) {
    if (!std::isfinite(line.values[i])) continue;
    absl::StrAppend(&d, d.empty() ? "M" : " L",
                    absl::StrFormat("%.1f,%.1f", a.X(line.gpus[i]), a.Y(line.values[i])));
  }
  if (d.empty()) return "";
  std::string svg = absl::StrFormat(
      "<path class=\"series %s\" data-curve=\"%s\" d=\"%s\" fill=\"none\" "
      "stroke=\"%s\" stroke-width=\"%.1f\"%s stroke-linejoin=\"round\"/>\n",
      line.kind, XmlEscape(label), d, color, (line.dots ? 2.2 : 1.6) + wide,
      line.dash.empty() ? "" : absl::StrCat(" stroke-dasharray=\"", line.dash, "\""));
  if (!line.dots) return svg;
  for (size_t i = 0; i < line.values.size(); ++i) {
    if (!std::isfinite(line.values[i])) continue;
    const std::string value = absl::StrFormat("%.4g", line.values[i]);
    absl::StrAppend(&svg, absl::StrFormat(
        "<circle class=\"point %s\" data-curve=\"%s\" data-gpus=\"%d\" data-%s=\"%s\" "
        "cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\"><title>%s, %d GPUs: %s %s%s"
        "</title></circle>\n",
        line.kind, XmlEscape(label), static_cast<int64_t>(line.gpus[i]), panel.unit, value,
        a.X(line.gpus[i]), a.Y(line.values[i]), 3.2 + wide, color, XmlEscape(label),
        static_cast<int64_t>(line.gpus[i]), line.kind, value,
        panel.unit == "ms" ? " ms" : "%"));
  }
  return svg;
}

std::string RenderPanel(const Panel& panel, const std::vector<simulate::ScalingCurve>& curves,
                        double px, double py, double gpus_lo, double gpus_hi) {
  const PlotArea a = PanelArea(panel, px, py, gpus_lo, gpus_hi);
  std::string svg = absl::StrFormat(
      "<g class=\"panel\" id=\"scaling-%s\">\n"
      "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" font-size=\"13\">%s</text>\n"
      "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
      "fill=\"#fcfcfc\" stroke=\"#bbb\"/>\n",
      panel.id, a.x0, py + 18, XmlEscape(panel.title), a.x0, a.y0, a.w, a.h);
  absl::StrAppend(&svg, RenderGrid(a));
  for (const Line& line : panel.lines) {
    absl::StrAppend(&svg, RenderLine(line, panel, curves, a));
  }
  absl::StrAppend(&svg, "</g>\n");
  return svg;
}

}  // namespace

std::string RenderScalingSvg(const std::vector<simulate::ScalingCurve>& curves,
                             const std::string& title) {
  Panel time{"time", "predicted step time (ms)", "ms"};
  Panel efficiency{"efficiency", "scaling efficiency (%, samples/s per GPU vs 1 GPU)",
                   "percent"};
  efficiency.floor_hi = 100;
  double gpus_lo = 0, gpus_hi = 0;
  for (int c = 0; c < static_cast<int>(curves.size()); ++c) {
    Line step{c, "step", "", true}, backward{c, "backward", "6,3"},
        exposed{c, "exposed", "2,3"}, eff{c, "efficiency", "", true};
    for (const simulate::ScalingPoint& p : curves[c].points) {
      const double g = static_cast<double>(p.gpus);
      gpus_lo = gpus_lo == 0 ? g : std::min(gpus_lo, g);
      gpus_hi = std::max(gpus_hi, g);
      for (Line* line : {&step, &backward, &exposed, &eff}) line->gpus.push_back(g);
      step.values.push_back(p.prediction.step_us / 1e3);
      backward.values.push_back(p.prediction.backward_us / 1e3);
      exposed.values.push_back(p.prediction.exposed_us / 1e3);
      eff.values.push_back(100 * p.efficiency);
    }
    // The thin lines first, so that the step line and its dots stay on top.
    time.lines.push_back(std::move(backward));
    time.lines.push_back(std::move(exposed));
    time.lines.push_back(std::move(step));
    efficiency.lines.push_back(std::move(eff));
  }
  if (gpus_lo == 0) gpus_lo = gpus_hi = 1;

  const double legend_h = 52 + 18.0 * curves.size();
  const double height = legend_h + kPanelH + kGap;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"scaling\" width=\"%.0f\" "
      "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"20\" font-weight=\"bold\" font-size=\"15\">Predicted "
      "scaling: %s</text>\n",
      kWidth, height, kWidth, height, kMarginX, XmlEscape(title));
  // Line styles, then one colour per curve.
  double x = kMarginX;
  for (const auto& [dash, what] : {std::pair<const char*, const char*>{"", "step"},
                                   {"6,3", "backward (compute)"},
                                   {"2,3", "exposed communication"}}) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.0f\" y1=\"36\" x2=\"%.0f\" y2=\"36\" stroke=\"#444\" "
        "stroke-width=\"2\"%s/><text x=\"%.0f\" y=\"40\" fill=\"#444\">%s</text>\n",
        x, x + 26, *dash ? absl::StrCat(" stroke-dasharray=\"", dash, "\"") : "", x + 32,
        what));
    x += 200;
  }
  for (size_t c = 0; c < curves.size(); ++c) {
    const double y = 58 + 18.0 * c;
    absl::StrAppend(&svg, absl::StrFormat(
        "<g class=\"legend-entry\"><line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
        "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%.0f\" y=\"%.1f\" "
        "font-weight=\"bold\">%s</text><text x=\"%.0f\" y=\"%.1f\" fill=\"#444\">%s</text>"
        "</g>\n",
        kMarginX, y - 4, kMarginX + 26, y - 4, RunColor(static_cast<int>(c)), kMarginX + 34,
        y, XmlEscape(curves[c].label), kMarginX + 34 + 7.0 * curves[c].label.size() + 12, y,
        XmlEscape(curves[c].description)));
  }
  absl::StrAppend(&svg, RenderPanel(time, curves, kMarginX, legend_h, gpus_lo, gpus_hi),
                  RenderPanel(efficiency, curves, kMarginX + kPanelW + kGap, legend_h,
                              gpus_lo, gpus_hi),
                  "</svg>\n");
  return svg;
}

}  // namespace trainc::viz
