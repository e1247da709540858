#include "tools/viz/curves.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/viz/palette.h"
#include "tools/viz/xml_escape.h"

namespace trainc::viz {
namespace {

constexpr double kWidth = 1120;
constexpr double kPanelW = 540, kPanelH = 270, kGap = 20, kMarginX = 10;
constexpr double kPlotLeft = 64, kPlotRight = 16, kPlotTop = 30, kPlotBottom = 36;

enum class Style {
  kRaw,     // every step, faint
  kSmooth,  // the moving average over it, bold
  kPlain,   // every step, one line (short runs, or a smooth quantity)
  kEval,    // a dot per evaluation, dashed between
};

struct Line {
  int run = 0;
  Style style = Style::kPlain;
  const Series* series = nullptr;
  std::vector<double> values;  // series->values, or their moving average
};

struct Panel {
  std::string id;     // for tests and styling: "loss", "lr", ...
  std::string title;
  std::vector<Line> lines;
  bool from_zero = false;     // the y axis starts at 0
  bool raw_in_range = false;  // faint per-step values count for the y range
  bool log_if_wide = false;   // a log y axis when the values span > 4x
};

// Half-width of the moving average for a series of n points: about one
// fortieth of the run on each side, none for short runs.
int SmoothingHalf(size_t n) { return static_cast<int>(n / 80); }

// Adds `series` of run `run` as one plain line, or faint + smoothed.
void AddTrainLines(Panel* panel, int run, const Series& series) {
  const int half = SmoothingHalf(series.values.size());
  if (half == 0) {
    panel->lines.push_back({run, Style::kPlain, &series, series.values});
    return;
  }
  panel->lines.push_back({run, Style::kRaw, &series, series.values});
  panel->lines.push_back(
      {run, Style::kSmooth, &series, MovingAverage(series.values, half)});
}

const Series* Find(const std::map<std::string, Series>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() || it->second.empty() ? nullptr : &it->second;
}

std::vector<Panel> BuildPanels(const std::vector<RunMetrics>& runs) {
  std::vector<Panel> panels;
  Panel loss{"loss", "loss"};
  loss.raw_in_range = true;
  // A loss falls fast and then slowly: on a log axis both parts show.
  loss.log_if_wide = true;
  for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
    if (const Series* s = Find(runs[r].train, "loss")) AddTrainLines(&loss, r, *s);
    if (const Series* s = Find(runs[r].eval, "loss")) {
      loss.lines.push_back({r, Style::kEval, s, s->values});
    }
  }
  panels.push_back(std::move(loss));

  auto eval_panel = [&](const std::string& key, const std::string& title) {
    Panel p{"eval-" + key, title};
    for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
      if (const Series* s = Find(runs[r].eval, key)) {
        p.lines.push_back({r, Style::kEval, s, s->values});
      }
    }
    if (!p.lines.empty()) panels.push_back(std::move(p));
  };
  eval_panel("accuracy", "eval accuracy");
  eval_panel("bits_per_byte", "eval bits per byte");

  Panel lr{"lr", "learning rate"};
  lr.from_zero = true;
  for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
    if (const Series* s = Find(runs[r].train, "lr")) {
      lr.lines.push_back({r, Style::kPlain, s, s->values});
    }
  }
  if (!lr.lines.empty()) panels.push_back(std::move(lr));

  // Tokens/s only when it applies to every run that has a throughput.
  bool all_tokens = false;
  for (const RunMetrics& run : runs) {
    if (Find(run.train, "samples_per_s") == nullptr) continue;
    all_tokens = Find(run.train, "tokens_per_s") != nullptr;
    if (!all_tokens) break;
  }
  const std::string rate = all_tokens ? "tokens_per_s" : "samples_per_s";
  Panel throughput{"throughput", all_tokens ? "throughput (tokens/s)"
                                            : "throughput (samples/s)"};
  throughput.from_zero = true;
  for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
    if (const Series* s = Find(runs[r].train, rate)) AddTrainLines(&throughput, r, *s);
  }
  if (!throughput.lines.empty()) panels.push_back(std::move(throughput));

  Panel norm{"grad-norm", "gradient norm (before clipping)"};
  norm.from_zero = true;
  for (int r = 0; r < static_cast<int>(runs.size()); ++r) {
    if (const Series* s = Find(runs[r].train, "grad_norm")) AddTrainLines(&norm, r, *s);
  }
  if (!norm.lines.empty()) panels.push_back(std::move(norm));
  return panels;
}

// Pixel polyline of (xs, ys); where many points share a pixel column only
// their lowest and highest remain, so a long run stays a small file and
// still shows its spread.
std::string PathData(const std::vector<double>& xs, const std::vector<double>& ys) {
  std::string d;
  auto put = [&](double x, double y) {
    absl::StrAppend(&d, d.empty() ? "M" : " L", absl::StrFormat("%.1f,%.1f", x, y));
  };
  size_t i = 0;
  while (i < xs.size()) {
    size_t j = i;
    size_t lo = i, hi = i;
    while (j < xs.size() && std::floor(xs[j]) == std::floor(xs[i])) {
      if (ys[j] < ys[lo]) lo = j;
      if (ys[j] > ys[hi]) hi = j;
      ++j;
    }
    if (j - i <= 2) {
      for (size_t k = i; k < j; ++k) put(xs[k], ys[k]);
    } else {
      put(xs[std::min(lo, hi)], ys[std::min(lo, hi)]);
      put(xs[std::max(lo, hi)], ys[std::max(lo, hi)]);
    }
    i = j;
  }
  return d;
}

std::string FormatValue(double v) { return absl::StrFormat("%.4g", v); }

// The y range of a panel: the values' extent with some room, from zero
// where the panel asks for it, in decades on a log axis.
struct YRange {
  double lo = 0, hi = 1;
  bool log_y = false;
};

YRange PanelYRange(const Panel& panel) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Line& line : panel.lines) {
    if (line.style == Style::kRaw && !panel.raw_in_range) continue;
    for (double v : line.values) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  const bool log_y = panel.log_if_wide && lo > 0 && hi / lo > 4;
  if (log_y) {
    // 4% of the decade span of room on either side.
    const double pad = std::log10(hi / lo) * 0.04;
    lo = std::log10(lo) - pad;
    hi = std::log10(hi) + pad;
  } else if (panel.from_zero && lo >= 0) {
    lo = 0;
  }
  if (log_y) {
    // lo and hi are already decades.
  } else if (hi - lo <= 0) {
    const double pad = std::fabs(hi) > 0 ? std::fabs(hi) * 0.1 : 1;
    lo -= panel.from_zero && lo == 0 ? 0 : pad;
    hi += pad;
  } else {
    const double pad = (hi - lo) * 0.06;
    if (!(panel.from_zero && lo == 0)) lo -= pad;
    hi += pad;
  }
  return {lo, hi, log_y};
}

// A panel's plot area in pixels and the maps from (step, value) into it.
struct PlotArea {
  double x0, y0, w, h;
  double step_lo, step_hi;
  YRange y;

  double X(double step) const {
    return x0 + (step - step_lo) / (step_hi - step_lo) * w;
  }
  double Y(double v) const {
    const double u = y.log_y ? std::log10(v) : v;
    return y0 + h - (u - y.lo) / (y.hi - y.lo) * h;
  }
};

// The grid lines, their tick labels and the x axis' title.
std::string RenderGrid(const PlotArea& a) {
  std::string svg;
  std::vector<double> yt;
  double ys = 0;
  if (a.y.log_y) {
    yt = LogTicks(std::pow(10.0, a.y.lo), std::pow(10.0, a.y.hi));
  } else {
    yt = NiceTicks(a.y.lo, a.y.hi, 5);
    ys = yt.size() > 1 ? yt[1] - yt[0] : a.y.hi - a.y.lo;
  }
  for (double t : yt) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>\n",
        a.x0, a.Y(t), a.x0 + a.w, a.Y(t), a.x0 - 5, a.Y(t) + 4,
        a.y.log_y ? absl::StrFormat("%g", t) : FormatTick(t, ys)));
  }
  const std::vector<double> xt = NiceTicks(a.step_lo, a.step_hi, 6);
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : a.step_hi - a.step_lo;
  for (double t : xt) {
    absl::StrAppend(&svg, absl::StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
        a.X(t), a.y0, a.X(t), a.y0 + a.h, a.X(t), a.y0 + a.h + 15,
        FormatTick(t, xs)));
  }
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">step</text>\n",
      a.x0 + a.w / 2, a.y0 + a.h + 30));
  return svg;
}

// One line of a panel as a path, and an evaluation line's dots; empty when
// the line has no finite value.
std::string RenderLine(const Line& line, const Panel& panel,
                       const std::vector<RunMetrics>& runs, const PlotArea& a) {
  const std::string color = RunColor(line.run);
  std::vector<double> px_x, px_y;
  for (size_t i = 0; i < line.values.size(); ++i) {
    if (!std::isfinite(line.values[i])) continue;
    px_x.push_back(a.X(static_cast<double>(line.series->steps[i])));
    px_y.push_back(a.Y(line.values[i]));
  }
  if (px_x.empty()) return "";
  const char* cls = line.style == Style::kRaw      ? "raw"
                    : line.style == Style::kSmooth ? "smooth"
                    : line.style == Style::kEval   ? "eval"
                                                   : "plain";
  // Earlier runs are drawn wider, so that a run lying exactly on
  // another (as gpus=1 accumulate=4 and gpus=4 accumulate=1 should)
  // shows as a rim around it rather than vanishing.
  const int later = static_cast<int>(runs.size()) - 1 - line.run;
  const double wide = 1.7 * later;
  const std::string extra =
      line.style == Style::kRaw
          ? " stroke-width=\"1\" stroke-opacity=\"0.28\""
      : line.style == Style::kEval
          ? absl::StrFormat(" stroke-width=\"%.1f\" stroke-dasharray=\"5,3\"",
                            1.5 + wide)
          : absl::StrFormat(" stroke-width=\"%.1f\"",
                            (line.style == Style::kSmooth ? 2.0 : 1.6) + wide);
  std::string svg = absl::StrFormat(
      "<path class=\"series %s\" data-run=\"%s\" d=\"%s\" fill=\"none\" "
      "stroke=\"%s\"%s stroke-linejoin=\"round\"/>\n",
      cls, XmlEscape(runs[line.run].label), PathData(px_x, px_y), color, extra);
  if (line.style == Style::kEval) {
    for (size_t i = 0; i < px_x.size(); ++i) {
      absl::StrAppend(&svg, absl::StrFormat(
          "<circle class=\"eval-point\" cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" "
          "fill=\"%s\"><title>%s: %s %s at step %d</title></circle>\n",
          px_x[i], px_y[i], 3.2 + wide, color, XmlEscape(runs[line.run].label),
          XmlEscape(panel.title.substr(0, panel.title.find(" ("))),
          FormatValue(line.values[i]), line.series->steps[i]));
    }
  }
  return svg;
}

std::string RenderPanel(const Panel& panel, const std::vector<RunMetrics>& runs,
                        int index, double px, double py, double step_lo,
                        double step_hi) {
  const PlotArea a{px + kPlotLeft,
                   py + kPlotTop,
                   kPanelW - kPlotLeft - kPlotRight,
                   kPanelH - kPlotTop - kPlotBottom,
                   step_lo,
                   step_hi,
                   PanelYRange(panel)};
  const std::string title =
      a.y.log_y ? absl::StrCat(panel.title, " (log scale)") : panel.title;

  std::string svg = absl::StrFormat(
      "<g class=\"panel\" id=\"curves-%s\">\n"
      "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\" font-size=\"13\">%s</text>\n"
      "<clipPath id=\"curves-clip-%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
      "height=\"%.1f\"/></clipPath>\n"
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fcfcfc\" "
      "stroke=\"#bbb\"/>\n",
      panel.id, a.x0, py + 18, XmlEscape(title), index, a.x0, a.y0, a.w, a.h,
      a.x0, a.y0, a.w, a.h);
  absl::StrAppend(&svg, RenderGrid(a));

  // Faint lines first, so that bold ones and dots stay on top.
  absl::StrAppend(&svg, absl::StrFormat("<g clip-path=\"url(#curves-clip-%d)\">\n", index));
  for (int pass = 0; pass < 2; ++pass) {
    for (const Line& line : panel.lines) {
      if ((pass == 0) != (line.style == Style::kRaw)) continue;
      absl::StrAppend(&svg, RenderLine(line, panel, runs, a));
    }
  }
  absl::StrAppend(&svg, "</g>\n</g>\n");
  return svg;
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || target < 1) return {lo};
  const double raw = (hi - lo) / target;
  const int exponent = static_cast<int>(std::floor(std::log10(raw)));
  const double mag = std::pow(10.0, exponent);
  double m = 1;
  for (double candidate : {1.0, 2.0, 5.0, 10.0}) {
    m = candidate;
    if (m * mag >= raw) break;
  }
  const double spacing = m * mag;
  // Tick k is k * m * 10^exponent; dividing by 10^-exponent rather than
  // multiplying by 10^exponent makes 0.6 print as 0.6, not 0.6000000000000001.
  auto tick = [&](int64_t k) {
    const double t = exponent < 0 ? k * m / std::pow(10.0, -exponent)
                                  : k * m * mag;
    return t == 0 ? 0.0 : t;  // no -0
  };
  for (int64_t k = static_cast<int64_t>(std::ceil(lo / spacing - 1e-9));
       tick(k) <= hi + spacing * 1e-9; ++k) {
    ticks.push_back(tick(k));
  }
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  if (!(lo > 0) || !(hi > lo)) return ticks;
  const int decades = static_cast<int>(std::ceil(std::log10(hi / lo)));
  // Fewer marks per decade as the decades add up.
  const std::vector<double> marks =
      decades <= 1 ? std::vector<double>{1, 1.5, 2, 3, 5, 7}
      : decades <= 3 ? std::vector<double>{1, 2, 5}
                     : std::vector<double>{1};
  for (int e = static_cast<int>(std::floor(std::log10(lo)));
       e <= static_cast<int>(std::ceil(std::log10(hi))); ++e) {
    for (double m : marks) {
      // m / 10^-e, not m * 10^e: 0.3 rather than 0.30000000000000004.
      const double t = e < 0 ? m / std::pow(10.0, -e) : m * std::pow(10.0, e);
      if (t >= lo && t <= hi) ticks.push_back(t);
    }
  }
  return ticks;
}

std::string FormatTick(double v, double spacing) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  auto trimmed = [](double x, double step) {
    // Enough decimals to tell ticks `step` apart.
    int decimals = 0;
    while (decimals < 9 && std::fabs(step * std::pow(10.0, decimals) -
                                     std::round(step * std::pow(10.0, decimals))) > 1e-6) {
      ++decimals;
    }
    return absl::StrFormat("%.*f", decimals, x);
  };
  if (a >= 1e6) return trimmed(v / 1e6, spacing / 1e6) + "M";
  if (a >= 1e4) return trimmed(v / 1e3, spacing / 1e3) + "k";
  if (a < 1e-3) return absl::StrFormat("%.2g", v);
  return trimmed(v, spacing);
}

std::vector<double> MovingAverage(const std::vector<double>& values, int half) {
  // Prefix sums over the finite points of x (the index), x^2, y and x*y.
  const size_t n = values.size();
  std::vector<double> c(n + 1, 0), sx(n + 1, 0), sxx(n + 1, 0), sy(n + 1, 0),
      sxy(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const bool ok = std::isfinite(values[i]);
    const double x = static_cast<double>(i), y = ok ? values[i] : 0.0;
    c[i + 1] = c[i] + (ok ? 1 : 0);
    sx[i + 1] = sx[i] + (ok ? x : 0);
    sxx[i + 1] = sxx[i] + (ok ? x * x : 0);
    sy[i + 1] = sy[i] + y;
    sxy[i + 1] = sxy[i] + (ok ? x * y : 0);
  }
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t a = i >= static_cast<size_t>(half) ? i - half : 0;
    const size_t b = std::min(n, i + half + 1);
    const double k = c[b] - c[a];
    if (k == 0) {
      out[i] = values[i];
      continue;
    }
    const double mx = (sx[b] - sx[a]) / k, my = (sy[b] - sy[a]) / k;
    const double var = (sxx[b] - sxx[a]) / k - mx * mx;
    const double cov = (sxy[b] - sxy[a]) / k - mx * my;
    // The line fitted to the window, at i: the window's mean where the
    // window is centred on i, and no flattening of a steep start where it
    // is cut short.
    out[i] = var > 1e-12 && k >= 3 ? my + cov / var * (static_cast<double>(i) - mx)
                                   : my;
  }
  return out;
}

std::string RenderCurvesSvg(const std::vector<RunMetrics>& runs) {
  const std::vector<Panel> panels = BuildPanels(runs);
  double step_lo = std::numeric_limits<double>::infinity(), step_hi = -step_lo;
  for (const Panel& p : panels) {
    for (const Line& line : p.lines) {
      step_lo = std::min<double>(step_lo, line.series->steps.front());
      step_hi = std::max<double>(step_hi, line.series->steps.back());
    }
  }
  if (!std::isfinite(step_lo)) {
    step_lo = 0;
    step_hi = 1;
  }
  if (step_hi <= step_lo) step_hi = step_lo + 1;

  const double legend_h = 44 + 18.0 * runs.size();
  const int rows = static_cast<int>((panels.size() + 1) / 2);
  const double height = legend_h + rows * (kPanelH + kGap);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"curves\" width=\"%.0f\" "
      "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, height, kWidth, height);
  std::string models;
  for (const RunMetrics& r : runs) {
    if (!r.model.empty() && models.find(r.model) == std::string::npos) {
      absl::StrAppend(&models, models.empty() ? "" : ", ", r.model);
    }
  }
  absl::StrAppend(&svg, absl::StrFormat(
      "<text x=\"%.0f\" y=\"20\" font-weight=\"bold\" font-size=\"15\">Training "
      "curves%s</text>\n"
      "<text x=\"%.0f\" y=\"20\" text-anchor=\"end\" fill=\"#555\">train: every "
      "step faint, moving average bold \xC2\xB7 eval: dashed, a dot per "
      "evaluation</text>\n",
      kMarginX, models.empty() ? "" : absl::StrCat(": ", XmlEscape(models)),
      kWidth - kMarginX));
  for (size_t r = 0; r < runs.size(); ++r) {
    const double y = 40 + 18.0 * r;
    const RunMetrics& run = runs[r];
    std::string detail = run.config;
    if (const Series* s = Find(run.train, "loss")) {
      absl::StrAppend(&detail, absl::StrFormat(" \xC2\xB7 %d steps \xC2\xB7 last train loss %.4f",
                                               s->steps.back(), s->values.back()));
    }
    if (const Series* s = Find(run.eval, "loss")) {
      absl::StrAppend(&detail, absl::StrFormat(" \xC2\xB7 last eval loss %.4f", s->values.back()));
    }
    if (const Series* s = Find(run.eval, "accuracy")) {
      absl::StrAppend(&detail, absl::StrFormat(" (%.2f%%)", 100 * s->values.back()));
    }
    absl::StrAppend(&svg, absl::StrFormat(
        "<g class=\"legend-entry\"><line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" "
        "y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
        "<text x=\"%.0f\" y=\"%.1f\" font-weight=\"bold\">%s</text>"
        "<text x=\"%.0f\" y=\"%.1f\" fill=\"#444\">%s</text></g>\n",
        kMarginX, y - 4, kMarginX + 26, y - 4, RunColor(static_cast<int>(r)),
        kMarginX + 34, y, XmlEscape(run.label),
        kMarginX + 34 + 7.0 * run.label.size() + 12, y, XmlEscape(detail)));
  }
  for (size_t i = 0; i < panels.size(); ++i) {
    const double px = kMarginX + (i % 2) * (kPanelW + kGap);
    const double py = legend_h + (i / 2) * (kPanelH + kGap);
    absl::StrAppend(&svg, RenderPanel(panels[i], runs, static_cast<int>(i), px, py,
                                      step_lo, step_hi));
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

}  // namespace trainc::viz
