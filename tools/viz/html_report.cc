#include "tools/viz/html_report.h"

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ops/op_table.h"
#include "tools/viz/metrics_reader.h"
#include "tools/viz/palette.h"
#include "tools/viz/xml_escape.h"

namespace trainc::viz {
namespace {

constexpr char kStyle[] = R"css(
body { font-family: Helvetica, Arial, sans-serif; margin: 16px 24px; color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px 0; }
h2 { font-size: 16px; margin: 20px 0 6px 0; border-bottom: 1px solid #ddd; }
.sub { color: #666; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; }
td.l, th.l { text-align: left; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #888; vertical-align: middle; }
#graph { border: 1px solid #ddd; max-height: 900px; overflow: auto; }
#graph svg { display: block; }
#graph.fit svg { max-width: 100%; height: auto; }
#timeline { border: 1px solid #ddd; overflow-x: auto; }
#timeline svg { max-width: 100%; height: auto; display: block; }
#training { border: 1px solid #ddd; }
#training svg { max-width: 100%; height: auto; display: block; }
#scaling { border: 1px solid #ddd; }
#scaling svg { max-width: 100%; height: auto; display: block; }
.warn { background: #fff4e5; border: 1px solid #f0b37e; padding: 8px; }
button { font-size: 12px; }
)css";

// Records the layout for tests and offers fit/actual size for big graphs.
constexpr char kScript[] = R"js(
function rectOf(id) {
  var e = document.getElementById(id);
  if (!e) return '';
  var r = e.getBoundingClientRect();
  return [r.left, r.top + window.scrollY, r.width, r.height].map(Math.round).join(',');
}
function recordLayout() {
  document.body.setAttribute('data-graph-rect', rectOf('graph'));
  document.body.setAttribute('data-timeline-rect', rectOf('timeline'));
  document.body.setAttribute('data-training-rect', rectOf('training'));
  document.body.setAttribute('data-scaling-rect', rectOf('scaling'));
}
function toggleFit() {
  document.getElementById('graph').classList.toggle('fit');
  recordLayout();
}
window.addEventListener('load', recordLayout);
recordLayout();
)js";

std::string Row(const std::vector<std::string>& cells, bool first_left = true) {
  std::string out = "<tr>";
  for (size_t i = 0; i < cells.size(); ++i) {
    absl::StrAppend(&out, i == 0 && first_left ? "<td class=\"l\">" : "<td>",
                    cells[i], "</td>");
  }
  return out + "</tr>\n";
}

std::string Ms(double us) { return absl::StrFormat("%.3f", us / 1e3); }

// A stopped job's trace: why, and the table of where each rank was.
std::string PositionsSection(const Trace& trace) {
  std::string html = absl::StrCat(
      "<h2>Where each rank was</h2>\n<p class=\"warn\" id=\"stop-reason\">The job stopped: ",
      XmlEscape(trace.stop_reason.empty() ? "(no reason recorded)" : trace.stop_reason),
      "</p>\n<table id=\"positions\">\n<tr><th class=\"l\">rank</th><th>step</th>"
      "<th>instruction</th><th class=\"l\">state</th><th>seconds there</th>"
      "<th class=\"l\"></th></tr>\n");
  for (const StopPosition& p : trace.positions) {
    const std::string instr =
        p.instr < 0 ? "-"
        : p.instructions > 0 ? absl::StrCat(p.instr, " of ", p.instructions)
                             : absl::StrCat(p.instr);
    absl::StrAppend(&html, Row({absl::StrCat(p.rank), absl::StrCat(p.step), instr,
                                absl::StrCat("<span style=\"float:left\">", XmlEscape(p.state),
                                             "</span>"),
                                absl::StrFormat("%.1f", p.seconds),
                                p.behind ? "<b style=\"color:#d62728\">behind</b>" : ""}));
  }
  absl::StrAppend(&html, "</table>\n<p class=\"sub\">The rank behind is the one the "
                         "others waited for; the timeline marks where each one stopped.</p>\n");
  return html;
}

const Series* FindSeries(const std::map<std::string, Series>& m,
                         const std::string& key) {
  auto it = m.find(key);
  return it == m.end() || it->second.empty() ? nullptr : &it->second;
}

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

// The curves and one row of figures per run.
std::string TrainingSection(const std::vector<RunMetrics>& runs,
                            const std::string& curves_svg) {
  std::string html = absl::StrCat(
      "<h2>Training</h2>\n<div id=\"training\">", InlineSvg(curves_svg),
      "</div>\n<table id=\"runs\">\n<tr><th class=\"l\">run</th>"
      "<th class=\"l\">model</th><th class=\"l\">split</th><th>steps</th>"
      "<th>last train loss</th><th>last eval loss</th><th>eval accuracy</th>"
      "<th>bits/byte</th><th>samples/s</th><th>exposed comm (ms/step)</th>"
      "<th class=\"l\">file</th></tr>\n");
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    const Series* loss = FindSeries(r.train, "loss");
    const Series* eval_loss = FindSeries(r.eval, "loss");
    const Series* acc = FindSeries(r.eval, "accuracy");
    const Series* bpb = FindSeries(r.eval, "bits_per_byte");
    const Series* rate = FindSeries(r.train, "samples_per_s");
    const Series* exposed = FindSeries(r.train, "exposed_comm_ms");
    // Over the whole run as the trainer timed it, else the mean of steps.
    const double samples_per_s = r.has_summary && r.summary_samples_per_s > 0
                                     ? r.summary_samples_per_s
                                     : rate ? Mean(rate->values) : 0;
    auto or_dash = [](bool have, const std::string& text) {
      return have ? text : std::string("-");
    };
    absl::StrAppend(
        &html,
        Row({absl::StrCat("<span class=\"swatch\" style=\"background:",
                          RunColor(static_cast<int>(i)), "\"></span> ",
                          XmlEscape(r.label)),
             absl::StrCat("<span style=\"float:left\">", XmlEscape(r.model), "</span>"),
             absl::StrCat("<span style=\"float:left\">", XmlEscape(r.config), "</span>"),
             or_dash(loss, loss ? absl::StrCat(loss->steps.back()) : ""),
             or_dash(loss, loss ? absl::StrFormat("%.4f", loss->values.back()) : ""),
             or_dash(eval_loss, eval_loss ? absl::StrFormat("%.4f", eval_loss->values.back()) : ""),
             or_dash(acc, acc ? absl::StrFormat("%.2f%%", 100 * acc->values.back()) : ""),
             or_dash(bpb, bpb ? absl::StrFormat("%.3f", bpb->values.back()) : ""),
             or_dash(samples_per_s > 0, absl::StrFormat("%.0f", samples_per_s)),
             or_dash(exposed, exposed ? absl::StrFormat("%.3f", Mean(exposed->values)) : ""),
             absl::StrCat("<span style=\"float:left\">", XmlEscape(r.path), "</span>")}));
  }
  absl::StrAppend(&html, "</table>\n<p class=\"sub\">From the metrics logs "
                         "(train --metrics, or beside --save); exposed comm: "
                         "the all-reduce time no compute hid, on the steps the "
                         "trainer traced.</p>\n");
  return html;
}

// The plot and one row per curve and world size.
std::string ScalingSection(const std::vector<simulate::ScalingCurve>& curves,
                           const std::string& title, const std::string& svg) {
  std::string html = absl::StrCat(
      "<h2>Predicted scaling</h2>\n<p class=\"sub\">", XmlEscape(title),
      ": the file compiled for each world size as train --gpus N compiles it, "
      "one step replayed on the machine profile (tools/simulate).</p>\n"
      "<div id=\"scaling\">", InlineSvg(svg),
      "</div>\n<table id=\"scaling-table\">\n<tr><th class=\"l\">buckets</th>"
      "<th>GPUs</th><th>global batch</th><th>step (ms)</th><th>backward (ms)</th>"
      "<th>all-reduce (ms)</th><th>hidden (ms)</th><th>exposed (ms)</th>"
      "<th>efficiency</th></tr>\n");
  std::string choices;
  for (size_t c = 0; c < curves.size(); ++c) {
    for (const simulate::ScalingPoint& p : curves[c].points) {
      const cost::StepPrediction& s = p.prediction;
      absl::StrAppend(
          &html, Row({absl::StrCat("<span class=\"swatch\" style=\"background:",
                                   RunColor(static_cast<int>(c)), "\"></span> ",
                                   XmlEscape(curves[c].label)),
                      absl::StrCat(p.gpus), absl::StrCat(p.global_batch), Ms(s.step_us),
                      Ms(s.backward_us), Ms(s.all_reduce_us), Ms(s.hidden_us),
                      Ms(s.exposed_us), absl::StrFormat("%.1f%%", 100 * p.efficiency)}));
      if (!p.bucket_choice.empty()) {
        absl::StrAppend(&choices, "<li>", XmlEscape(p.bucket_choice), "</li>\n");
      }
    }
  }
  absl::StrAppend(&html, "</table>\n<p class=\"sub\">step: a step's period; backward: "
                         "busy time of backward instructions; hidden: all-reduce time "
                         "while compute was busy; exposed: the rest; efficiency: "
                         "samples/s per GPU against one GPU.</p>\n");
  if (!choices.empty()) {
    absl::StrAppend(&html, "<details><summary>bucket_mb auto's choices</summary>"
                           "<ul class=\"sub\">\n", choices, "</ul></details>\n");
  }
  return html;
}

// A report of metrics logs alone (no plan): the training section.
std::string CurvesOnlyReport(const HtmlReportInput& in) {
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>training curves \xE2\x80\x94 trainc</title>\n<style>",
      kStyle, "</style>\n</head>\n<body>\n<h1>Training curves</h1>\n");
  if (in.runs != nullptr) {
    absl::StrAppend(&html, "<div class=\"sub\">", in.runs->size(),
                    " run(s)</div>\n", TrainingSection(*in.runs, in.curves_svg));
  }
  absl::StrAppend(&html, "<script>", kScript, "</script>\n</body>\n</html>\n");
  return html;
}

// The page's head and title: the model, where the plan came from and how
// much of it the graph draws.
std::string PlanHeader(const HtmlReportInput& in) {
  const Plan& p = *in.plan;
  const VizGraph& g = *in.graph;
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>", XmlEscape(p.model), " \xE2\x80\x94 trainc plan</title>\n<style>",
      kStyle, "</style>\n</head>\n<body>\n");
  absl::StrAppend(&html, "<h1>", XmlEscape(p.model), "</h1>\n<div class=\"sub\">",
                  XmlEscape(in.input_path),
                  p.source.empty() ? "" : absl::StrCat(" \xC2\xB7 compiled from ",
                                                       XmlEscape(p.source)),
                  " \xC2\xB7 plan format ", p.version, " \xC2\xB7 ",
                  g.instructions, " instructions, ", g.nodes.size(),
                  " nodes drawn", g.collapsed_blocks > 0
                      ? absl::StrCat(", ", g.collapsed_blocks, " repeated blocks collapsed")
                      : std::string(),
                  "</div>\n");
  return html;
}

// How the global batch multiplies out, and the step's settings.
std::string BatchSection(const Plan& p) {
  return absl::StrCat("<h2>Batch arithmetic</h2>\n<p id=\"batch\">global batch "
                      "<b>", p.global_batch, "</b> = ", p.world_size,
                      " rank(s) \xC3\x97 micro-batch ", p.micro_batch, " \xC3\x97 ",
                      p.accumulate, " accumulation step(s)",
                      p.global_batch == p.world_size * p.micro_batch * p.accumulate
                          ? ""
                          : " <span class=\"warn\">(does not multiply out)</span>",
                      "; gradients are all-reduced once per step, after the last "
                      "micro-step; loss scaled by 1/", p.global_batch, ". ",
                      p.epochs, " epoch(s), ", p.steps, " step(s); optimizer ",
                      XmlEscape(EnumName(p.optimizer.kind)),
                      absl::StrFormat(" (lr %g)", p.optimizer.lr), ", bucket_mb ",
                      absl::StrFormat("%g", p.bucket_mb),
                      p.deterministic ? ", deterministic" : "", ".</p>\n");
}

// The rendered graph, or why it is missing.
std::string GraphSection(const HtmlReportInput& in) {
  std::string html = absl::StrCat(
      "<h2>Graph</h2>\n<p class=\"sub\">One micro-step is drawn "
      "once (\xC3\x97", in.plan->accumulate, "); solid edges: data, "
      "dashed: stream events; hexagons run on the comm stream. "
      "<button onclick=\"toggleFit()\">fit / actual size</button></p>\n"
      "<div id=\"graph\" class=\"fit\">");
  if (!in.graph_svg.empty()) {
    absl::StrAppend(&html, InlineSvg(in.graph_svg));
  } else {
    absl::StrAppend(&html, "<p class=\"warn\" id=\"graph-missing\">Graph not "
                           "rendered: ", XmlEscape(in.graph_error),
                    "</p>");
  }
  absl::StrAppend(&html, "</div>\n");
  return html;
}

// A trace's timeline and the overlap table, one row per rank.
std::string TimelineSection(const HtmlReportInput& in) {
  std::string html = absl::StrCat("<h2>Timeline</h2>\n<div id=\"timeline\">",
                                  in.timeline_svg, "</div>\n");
  absl::StrAppend(&html, "<h2>Overlap (per rank, mean over traced steps)</h2>\n"
                         "<table id=\"overlap\">\n<tr><th class=\"l\">rank</th>"
                         "<th>steps</th><th>step (ms)</th><th>backward (ms)</th>"
                         "<th>all-reduce (ms)</th><th>hidden (ms)</th>"
                         "<th>exposed (ms)</th><th>hidden %</th>"
                         "<th>last bucket</th></tr>\n");
  for (const RankOverlap& r : in.overlap) {
    absl::StrAppend(&html, Row({absl::StrCat(r.rank), absl::StrCat(r.steps),
                                Ms(r.step_us), Ms(r.backward_us),
                                Ms(r.all_reduce_us), Ms(r.hidden_us),
                                Ms(r.exposed_us),
                                absl::StrFormat("%.1f", 100 * r.hidden_fraction()),
                                r.last_bucket >= 0 ? absl::StrCat(r.last_bucket)
                                                   : std::string("-")}));
  }
  absl::StrAppend(&html, "</table>\n<p class=\"sub\">hidden: all-reduce time "
                         "during which the compute stream was busy; exposed: "
                         "the rest. A late last bucket or large exposed time "
                         "suggests smaller buckets (bucket_mb).</p>\n");
  return html;
}

// One row per gradient bucket, in its colour.
std::string BucketsSection(const VizGraph& g) {
  std::string html = "<h2>Gradient buckets</h2>\n<table id=\"buckets\">\n"
                     "<tr><th class=\"l\">bucket</th><th>bytes</th><th>size</th>"
                     "<th class=\"l\">parameters (ready order)</th></tr>\n";
  for (const BucketSummary& b : g.buckets) {
    absl::StrAppend(
        &html,
        Row({absl::StrCat("<span class=\"swatch\" style=\"background:",
                          BucketColor(b.id), "\"></span> ", b.id),
             absl::StrCat(b.bytes), HumanBytes(b.bytes),
             absl::StrCat("<span style=\"float:left\">",
                          XmlEscape(absl::StrJoin(b.parameters, ", ")),
                          "</span>")}));
  }
  absl::StrAppend(&html, "</table>\n");
  return html;
}

// What each kind of op costs, from the op table's cost rules.
std::string ComputeSection(const Plan& p) {
  struct CategoryCost {
    int count = 0;
    double flops = 0, bytes = 0;
  };
  std::map<std::string, CategoryCost> by_category;
  for (const Instruction& in : p.instructions) {
    const ops::OpDef* def = ops::FindOp(in.op);
    if (def == nullptr) continue;
    std::vector<ops::Shape> ins, outs;
    for (int id : in.inputs) ins.push_back(p.buffers[id].shape);
    for (int id : in.outputs) outs.push_back(p.buffers[id].shape);
    const ops::Cost cost = ops::EstimateCost(*def, ins, outs);
    CategoryCost& c = by_category[ops::OpCategoryName(def->category)];
    ++c.count;
    c.flops += cost.flops;
    c.bytes += cost.bytes;
  }
  std::string html = "<h2>Compute (per rank and step)</h2>\n<table id=\"compute\">\n"
                     "<tr><th class=\"l\">ops</th><th>instructions</th>"
                     "<th>GFLOP</th><th>MB moved</th></tr>\n";
  for (const auto& [category, c] : by_category) {
    absl::StrAppend(&html, Row({category, absl::StrCat(c.count),
                                absl::StrFormat("%.3f", c.flops / 1e9),
                                absl::StrFormat("%.1f", c.bytes / 1e6)}));
  }
  absl::StrAppend(&html, "</table>\n<p class=\"sub\">Estimates from each op's "
                         "cost rule (compiler/ops/op_table.cc).</p>\n");
  return html;
}

// The memory plan per rank (and, under bf16, what it saves and costs).
std::string MemorySection(const Plan& p) {
  const MemoryReport& m = p.memory;
  auto mem_row = [](const char* what, int64_t bytes) {
    return Row({what, absl::StrCat(bytes), HumanBytes(bytes)});
  };
  std::string html = absl::StrCat(
      "<h2>Memory (per rank)</h2>\n<table id=\"memory\">\n"
      "<tr><th class=\"l\">what</th><th>bytes</th><th>size</th></tr>\n",
      mem_row("parameters", m.parameter_bytes), mem_row("gradients", m.gradient_bytes),
      mem_row("optimizer state", m.optimizer_state_bytes),
      mem_row("peak activations", m.peak_activation_bytes),
      mem_row("planned arena", m.arena_bytes),
      mem_row("without buffer reuse", m.unshared_bytes));
  if (p.precision == Precision::kBf16) {  // precision = bf16: what it saves and costs
    absl::StrAppend(&html, mem_row("parameters' bf16 copies", m.parameter_copy_bytes),
                    mem_row("bf16 staging (beside the arena)", m.bf16_staging_bytes),
                    mem_row("peak activations in fp32", m.fp32_peak_activation_bytes),
                    mem_row("planned arena in fp32", m.fp32_arena_bytes));
  }
  absl::StrAppend(&html, "</table>\n");
  if (m.unshared_bytes > 0) {
    absl::StrAppend(&html, absl::StrFormat(
        "<p class=\"sub\">Buffer reuse saves %.1f%% of the arena.</p>\n",
        100.0 * (1.0 - static_cast<double>(m.arena_bytes) / m.unshared_bytes)));
  }
  return html;
}

}  // namespace

std::string InlineSvg(const std::string& svg) {
  std::string out;
  size_t i = 0;
  while (i < svg.size()) {
    if (svg.compare(i, 5, "<?xml") == 0 || svg.compare(i, 9, "<!DOCTYPE") == 0) {
      size_t end = svg.find('>', i);
      i = end == std::string::npos ? svg.size() : end + 1;
    } else if (svg.compare(i, 4, "<!--") == 0) {
      size_t end = svg.find("-->", i);
      i = end == std::string::npos ? svg.size() : end + 3;
    } else {
      out += svg[i++];
    }
  }
  size_t start = out.find("<svg");
  return start == std::string::npos ? out : out.substr(start);
}

std::string RenderHtmlReport(const HtmlReportInput& in) {
  if (in.plan == nullptr || in.graph == nullptr) return CurvesOnlyReport(in);
  // Batch arithmetic first: it is the question most people open this for.
  std::string html = absl::StrCat(PlanHeader(in), BatchSection(*in.plan), GraphSection(in));
  if (in.trace != nullptr && !in.trace->positions.empty()) {
    absl::StrAppend(&html, PositionsSection(*in.trace));
  }
  if (in.trace != nullptr) absl::StrAppend(&html, TimelineSection(in));
  if (in.scaling != nullptr) {
    absl::StrAppend(&html, ScalingSection(*in.scaling, in.scaling_title, in.scaling_svg));
  }
  if (in.runs != nullptr) absl::StrAppend(&html, TrainingSection(*in.runs, in.curves_svg));
  absl::StrAppend(&html, BucketsSection(*in.graph), ComputeSection(*in.plan),
                  MemorySection(*in.plan));
  absl::StrAppend(&html, "<script>", kScript, "</script>\n</body>\n</html>\n");
  return html;
}

}  // namespace trainc::viz
