// The self-contained HTML report: one file, no network, that shows the plan
// graph (inline SVG from dot), the gradient buckets, the memory report, the
// batch arithmetic, given a trace the timeline and overlap numbers (and,
// for a stopped job's trace, why and where each rank was), and
// given metrics logs a "Training" section: the curves of every run and a
// table of their figures, and given a simulation (viz --scaling) a
// "Predicted scaling" section: its plot and table. Without a plan the report
// is the Training section alone.
//
// A small script records where the graph, the timeline and the curves were
// laid out (data-graph-rect / data-timeline-rect / data-training-rect /
// data-scaling-rect on <body>) so that a headless browser test can check that those regions are
// actually drawn.
#ifndef TRAINC_TOOLS_VIZ_HTML_REPORT_H_
#define TRAINC_TOOLS_VIZ_HTML_REPORT_H_

#include <string>
#include <vector>

#include "compiler/plan/plan.h"
#include "tools/simulate/scaling.h"
#include "tools/viz/metrics_reader.h"
#include "tools/viz/timeline.h"
#include "tools/viz/trace_reader.h"
#include "tools/viz/viz_graph.h"

namespace trainc::viz {

struct HtmlReportInput {
  const Plan* plan = nullptr;        // both, or neither (training only)
  const VizGraph* graph = nullptr;
  std::string input_path;            // shown in the header
  std::string graph_svg;             // dot's SVG; empty when not rendered
  std::string graph_error;           // why not (e.g. dot missing)
  const Trace* trace = nullptr;      // optional
  std::vector<RankOverlap> overlap;  // with the trace
  std::string timeline_svg;          // with the trace
  const std::vector<RunMetrics>* runs = nullptr;  // optional, labelled
  std::string curves_svg;            // RenderCurvesSvg(*runs)
  const std::vector<simulate::ScalingCurve>* scaling = nullptr;  // optional
  std::string scaling_title;         // plain text: model, machine, overlap
  std::string scaling_svg;           // RenderScalingSvg(*scaling, ...)
};

std::string RenderHtmlReport(const HtmlReportInput& input);

// dot's SVG without the XML declaration, DOCTYPE and comments, ready to be
// placed inside HTML.
std::string InlineSvg(const std::string& svg);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_HTML_REPORT_H_
