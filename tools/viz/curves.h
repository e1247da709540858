// Training curves: the metrics logs of one or more runs drawn as one
// standalone SVG, the runs overlaid in distinct colours with a legend.
//
// Panels (those with data): loss against step (train: every step faint, a
// moving average bold; eval: dashed with a dot per evaluation; a
// log axis when the loss spans more than 4x),
// eval accuracy, eval bits per byte (text), learning rate, throughput
// (tokens/s when every run is a language model, else samples/s) and the
// gradient norm (with clipping). Every panel shares the step axis.
//
//   std::vector<RunMetrics> runs = ...;   // metrics_reader.h, labelled
//   std::string svg = RenderCurvesSvg(runs);
#ifndef TRAINC_TOOLS_VIZ_CURVES_H_
#define TRAINC_TOOLS_VIZ_CURVES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/viz/metrics_reader.h"

namespace trainc::viz {

std::string RenderCurvesSvg(const std::vector<RunMetrics>& runs);

// Helpers, exposed for tests.
// About `target` round tick values (1, 2 or 5 times a power of ten) in
// [lo, hi].
std::vector<double> NiceTicks(double lo, double hi, int target = 5);
// Ticks of a log axis over [lo, hi]: 1, 2, 5 (more when the span is one
// decade or less, fewer when it is many) times powers of ten.
std::vector<double> LogTicks(double lo, double hi);
// A tick label: "0.001", "250", "17.5k", "1.2M".
std::string FormatTick(double v, double spacing);
// Smoothing: at each point, the line fitted (least squares) to the points
// within `half` of it, evaluated there. Away from the ends that is the
// centred moving average over 2 * half + 1 points; at the ends, where the
// window is cut short, the fitted slope keeps a steep start from being
// flattened. Non-finite values are left out of the fits.
std::vector<double> MovingAverage(const std::vector<double>& values, int half);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_CURVES_H_
