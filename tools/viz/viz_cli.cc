#include "tools/viz/viz_cli.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/cost/bundled_profiles.h"
#include "compiler/cost/machine_profile.h"
#include "compiler/util/status_macros.h"
#include "runtime/trace/plan_identity.h"
#include "tools/cli/option_parser.h"
#include "tools/viz/curves.h"
#include "tools/viz/dot_writer.h"
#include "tools/viz/file_util.h"
#include "tools/viz/graphviz.h"
#include "tools/viz/html_report.h"
#include "tools/viz/metrics_reader.h"
#include "tools/simulate/scaling.h"
#include "tools/viz/plan_loader.h"
#include "tools/viz/scaling_plot.h"
#include "tools/viz/timeline.h"
#include "tools/viz/trace_reader.h"
#include "tools/viz/viz_graph.h"

namespace trainc::viz {
namespace {

constexpr char kDefaultMachine[] = "h100_nvlink_ib";

// An option's setter that stores its value in `*out`.
auto Into(std::string* out) {
  return [out](const std::string& v) {
    *out = v;
    return absl::OkStatus();
  };
}

// "Inputs and output:": INPUT, --trace, -o and --metrics.
void AddInputOptions(OptionParser* parser, VizArgs* args) {
  parser
      ->Group("Inputs and output:")
      .HelpRow("INPUT",
               "a plan file (compiler/plan/plan_io.h text), or a .train file (compiled "
               "in-process when the front end and planner are linked)")
      .Value({"--trace"}, "F",
             "a Chrome trace written by `train --trace` for the same plan: draws per-rank "
             "compute/comm timelines and prints backward time, all-reduce time, hidden "
             "(overlapped) and exposed communication, and the last bucket to finish, per "
             "rank, mean over steps. The trace (and a metrics log) records the plan that ran: "
             "INPUT is compiled with the run's --FIELD VALUE overrides, and refused when "
             "edited since (or when the trace and the metrics log are of two runs)",
             Into(&args->trace))
      .Value({"-o", "--output"}, "OUT",
             "output, format by extension:\n"
             "  .dot   Graphviz source\n"
             "  .svg   rendered by Graphviz `dot` (must be on PATH)\n"
             "  .png   rendered by Graphviz `dot`\n"
             "  .html  self-contained report: graph, buckets, memory, batch arithmetic, "
             "and timeline + overlap with --trace\n"
             "with --trace, the timeline is also written as OUT_timeline.svg\n"
             "default: <model>.html in the current directory",
             Into(&args->output))
      .Value({"--metrics"}, "[LABEL=]F",
             "a metrics log written by `train` (--metrics PATH, or beside --save: "
             "model.metrics.jsonl); repeat it to overlay runs. Draws loss (train and "
             "eval), eval accuracy or bits per byte, learning rate and throughput against "
             "step, one colour per run with a legend (LABEL, else the file's name). "
             "Without INPUT, -o picks: .svg or .png (through rsvg-convert) the curves, "
             ".html a report of them (default training.html); with INPUT the HTML report "
             "gains a Training section, and other outputs are joined by OUT_curves.svg",
             [args](const std::string& v) {
               args->metrics.push_back(v);
               return absl::OkStatus();
             });
}

// "Predicted scaling:": --scaling and the options that go with it.
void AddScalingOptions(OptionParser* parser, VizArgs* args) {
  parser
      ->Group("Predicted scaling:")
      .Switch({"--scaling"},
              "predicted scaling (tools/simulate): INPUT compiled for each world size as "
              "`train --gpus N` compiles it and one step of each plan replayed on a machine "
              "profile. The HTML report gains a \"Predicted scaling\" section: a plot "
              "against GPUs (log axis) of step time, backward and exposed communication, "
              "and of scaling efficiency, one colour per bucket size, and their table; with "
              "-o the plot is also written as OUT_scaling.svg. The options below go with it",
              [args] { args->scaling = true; })
      .Value({"--machine"}, "NAME|FILE",
             absl::StrCat("machine profile (default ", kDefaultMachine, "); bundled: ",
                          absl::StrJoin(cost::BundledProfileNames(), ", "),
                          "\nor a `key = value` file (tools/simulate/README.md)"),
             Into(&args->machine))
      .Value({"--gpus"}, "N[,N...]", "world sizes (default 1,2,4,...,1024)",
             [args](const std::string& v) -> absl::Status {
               ASSIGN_OR_RETURN(args->gpus, simulate::ParseWorldSizes(v));
               return absl::OkStatus();
             })
      .Value({"--bucket-mb", "--bucket_mb"}, "X[,Y...]",
             "bucket_mb per line (MB, or auto); default the file's",
             [args](const std::string& v) -> absl::Status {
               args->bucket_mb = absl::StrSplit(v, ',', absl::SkipEmpty());
               if (args->bucket_mb.empty()) return absl::InvalidArgumentError("needs a value");
               return absl::OkStatus();
             });
}

// "Other options:": how repeated layers collapse.
void AddOtherOptions(OptionParser* parser, VizArgs* args) {
  parser
      ->Group("Other options:")
      .Switch({"--no-collapse"}, "draw every layer, even long runs of identical ones",
              [args] { args->collapse = false; })
      .Value({"--min-repeats"}, "N",
             "collapse runs of at least N identical layers (default 3)",
             [args](const std::string& v) -> absl::Status {
               if (!absl::SimpleAtoi(v, &args->min_repeats) || args->min_repeats < 2) {
                 return absl::InvalidArgumentError("needs an integer >= 2");
               }
               return absl::OkStatus();
             });
}

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(VizArgs* args) {
  OptionParser parser;
  parser
      .Usage({"bazel run //tools/viz -- INPUT [--trace TRACE.json] [-o OUT]",
              "bazel run //tools/viz -- INPUT --scaling [--machine PROFILE] [-o OUT]",
              "bazel run //tools/viz -- [INPUT] --metrics [LABEL=]RUN.jsonl ... [-o OUT]"})
      .Description(
          "Draws a trainc execution plan: forward and backward ops, parameters,\n"
          "gradient buckets (one colour each), all-reduces on the comm stream, the\n"
          "optimizer, data edges (solid) and stream-event edges (dashed). One\n"
          "micro-step is drawn once with its repeat count; runs of identical layers\n"
          "collapse into one node (\"h2..h99 (x98)\").\n");
  AddInputOptions(&parser, args);
  AddScalingOptions(&parser, args);
  AddOtherOptions(&parser, args);
  parser
      .Epilogue(
          "Relative paths are taken from the directory `bazel run` was started in.\n"
          "Exit status: 0 ok, 1 error (message on stderr), 2 bad usage.\n");;
  return parser;
}

}  // namespace

std::string VizUsage() {
  VizArgs unused;
  return MakeParser(&unused).Help();
}

absl::StatusOr<VizArgs> ParseVizArgs(int argc, const char* const* argv) {
  VizArgs args;
  auto usage_error = [](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " (see --help)"));
  };
  const OptionParser parser = MakeParser(&args);
  std::vector<std::string> inputs;
  absl::StatusOr<bool> help = parser.Parse(argc, argv, &inputs);
  if (!help.ok()) {
    if (absl::StrContains(help.status().message(), "(see --help)")) return help.status();
    return usage_error(std::string(help.status().message()));
  }
  args.help = *help;
  if (inputs.size() > 1) {
    return usage_error(absl::StrCat("more than one input: ", inputs[0], " and ", inputs[1]));
  }
  if (!inputs.empty()) args.input = inputs[0];
  if (!args.help && args.input.empty() && args.metrics.empty()) {
    return usage_error(
        "no input: pass a plan file or a .train file, or --metrics FILE");
  }
  if (!args.scaling &&
      (!args.machine.empty() || !args.gpus.empty() || !args.bucket_mb.empty())) {
    return usage_error("--machine, --gpus and --bucket-mb go with --scaling");
  }
  if (args.scaling && args.input.empty()) {
    return usage_error("--scaling needs INPUT, a .train or plan file");
  }
  for (const std::string& m : args.metrics) {
    if (m.empty() || m.back() == '=') {
      return usage_error("--metrics needs a file: --metrics [LABEL=]FILE");
    }
  }
  if (!args.output.empty() && args.input.empty()) {
    std::string ext = FileExtension(args.output);
    if (ext != "svg" && ext != "png" && ext != "html") {
      return usage_error(absl::StrCat("-o ", args.output,
                                      ": with --metrics alone the extension "
                                      "must be .svg, .png or .html"));
    }
  } else if (!args.output.empty()) {
    std::string ext = FileExtension(args.output);
    if (ext != "dot" && ext != "svg" && ext != "png" && ext != "html") {
      return usage_error(absl::StrCat("-o ", args.output,
                                      ": the extension must be .dot, .svg, "
                                      ".png or .html"));
    }
  }
  return args;
}

namespace {

std::string Summary(const Plan& p, const VizGraph& g) {
  int ops[5] = {0, 0, 0, 0, 0};
  for (const Instruction& in : p.instructions) ++ops[static_cast<int>(in.phase)];
  std::string s = absl::StrFormat(
      "model %s: global batch %d = %d rank(s) x micro-batch %d x %d "
      "micro-step(s)\n"
      "plan: %d instructions (data %d, forward %d, backward %d, comm %d, "
      "optimizer %d), %d buffers, %d events\n"
      "drawn: %d nodes, %d edges, %d repeated block(s) collapsed\n",
      p.model, p.global_batch, p.world_size, p.micro_batch, p.accumulate,
      p.instructions.size(), ops[0], ops[1], ops[2], ops[3], ops[4],
      p.buffers.size(), p.num_events, g.nodes.size(), g.edges.size(),
      g.collapsed_blocks);
  for (const BucketSummary& b : g.buckets) {
    absl::StrAppend(&s, absl::StrFormat("bucket %d: %s (%d B), %d params\n", b.id,
                                        HumanBytes(b.bytes), b.bytes,
                                        b.parameters.size()));
  }
  absl::StrAppend(&s, absl::StrFormat(
      "memory per rank: parameters %s, gradients %s, optimizer state %s, "
      "peak activations %s, arena %s\n",
      HumanBytes(p.memory.parameter_bytes), HumanBytes(p.memory.gradient_bytes),
      HumanBytes(p.memory.optimizer_state_bytes),
      HumanBytes(p.memory.peak_activation_bytes),
      HumanBytes(p.memory.arena_bytes)));
  return s;
}

// "LABEL=FILE" -> (LABEL, FILE) when LABEL has no '/' (a path with '=' in
// its name can be given as ./name=x); else ("", FILE).
std::pair<std::string, std::string> SplitLabel(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 ||
      arg.substr(0, eq).find('/') != std::string::npos) {
    return {"", arg};
  }
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

absl::StatusOr<std::vector<RunMetrics>> LoadRuns(const VizArgs& args,
                                                 std::ostream& err) {
  std::vector<RunMetrics> runs;
  for (const std::string& arg : args.metrics) {
    auto [label, path] = SplitLabel(arg);
    ASSIGN_OR_RETURN(RunMetrics run, ReadMetricsFile(ResolveUserPath(path)));
    run.path = path;
    run.label = label;
    if (run.truncated_lines > 0) {
      err << "viz: warning: " << path << ": its last line is incomplete (the "
          << "run stopped while writing it); skipped\n";
    }
    if (run.train.empty() && run.eval.empty()) {
      err << "viz: warning: " << path << ": no train or eval records\n";
    }
    runs.push_back(std::move(run));
  }
  LabelRuns(&runs);
  return runs;
}

std::string RunsSummary(const std::vector<RunMetrics>& runs) {
  std::string s;
  for (const RunMetrics& r : runs) {
    absl::StrAppend(&s, "run ", r.label, ": ", r.model.empty() ? "" : r.model + " ",
                    r.config);
    auto it = r.train.find("loss");
    if (it != r.train.end() && !it->second.empty()) {
      absl::StrAppend(&s, absl::StrFormat(", %d steps, last train loss %.4f",
                                          it->second.steps.back(),
                                          it->second.values.back()));
    }
    it = r.eval.find("loss");
    if (it != r.eval.end() && !it->second.empty()) {
      absl::StrAppend(&s, absl::StrFormat(", last eval loss %.4f",
                                          it->second.values.back()));
    }
    it = r.eval.find("accuracy");
    if (it != r.eval.end() && !it->second.empty()) {
      absl::StrAppend(&s, absl::StrFormat(" (accuracy %.2f%%)",
                                          100 * it->second.values.back()));
    }
    absl::StrAppend(&s, "\n");
  }
  return s;
}

// The predicted scaling of `input` (resolved) as --scaling asks.
struct Scaling {
  std::vector<simulate::ScalingCurve> curves;
  std::string title;
  std::string svg;
};

absl::StatusOr<Scaling> SimulateForViz(const VizArgs& args, const std::string& input) {
  std::string machine = args.machine.empty() ? kDefaultMachine : args.machine;
  // A profile file is the user's path; a bundled name is not a path.
  if (machine.find('/') != std::string::npos || FileExtension(machine) == "profile") {
    machine = ResolveUserPath(machine);
  }
  ASSIGN_OR_RETURN(cost::MachineProfile profile, simulate::LoadProfileFlag(machine));
  simulate::ScalingOptions options;
  options.gpus = args.gpus;
  options.bucket_mb = args.bucket_mb;
  Scaling s;
  ASSIGN_OR_RETURN(s.curves, simulate::SimulateScaling(input, profile, options));
  s.title = absl::StrFormat("%s on %s (%s all-reduce, overlap on)",
                            s.curves.empty() ? "" : s.curves[0].model, profile.name,
                            cost::AllReduceAlgorithmName(profile.all_reduce));
  s.svg = RenderScalingSvg(s.curves, s.title);
  return s;
}

std::string ScalingSummary(const Scaling& s) {
  std::string out = absl::StrCat("predicted scaling, ", s.title, ":\n");
  for (const simulate::ScalingCurve& c : s.curves) {
    if (c.points.empty()) continue;
    const simulate::ScalingPoint& a = c.points.front();
    const simulate::ScalingPoint& b = c.points.back();
    absl::StrAppend(&out, absl::StrFormat(
        "  %s: step %.3f ms on %d GPU(s), %.3f ms on %d (exposed %.3f ms, "
        "efficiency %.1f%%)\n",
        c.label, a.prediction.step_us / 1e3, a.gpus, b.prediction.step_us / 1e3, b.gpus,
        b.prediction.exposed_us / 1e3, 100 * b.efficiency));
  }
  return out;
}

// What a run recorded of the plan it trained, and where.
struct RanPlan {
  PlanIdentity id;
  std::string where;  // the trace or metrics log, as typed
};

std::string DescribeRun(const PlanIdentity& id) {
  return absl::StrCat(id.source.empty() ? "?" : id.source,
                      id.overrides.empty() ? "" : " ", OverridesText(id.overrides));
}

// A trace and a metrics log of two different plans: two runs' numbers.
absl::Status TwoRuns(const std::string& trace_path, const PlanIdentity& traced,
                     const RunMetrics& run) {
  const PlanIdentity& logged = run.plans.back();
  std::string message = absl::StrCat(
      trace_path, " and ", run.path, " are of two different runs: the trace's plan hash ",
      traced.hash, " (", DescribeRun(traced), "), the metrics log's ", logged.hash, " (",
      DescribeRun(logged), ")");
  for (const std::string& d :
       SettingDifferences(traced.settings, "the trace's run", logged.settings, run.path)) {
    absl::StrAppend(&message, "\n  ", d);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(message, "\n  (give the trace and the metrics log of one run)"));
}

// The plan the run recorded: the trace's, else the metrics logs' when they
// name one plan. A metrics log of another plan than the trace's is refused
// (with several logs, overlaid runs, one of them must be the traced run);
// what cannot be checked is a warning on `err`.
absl::StatusOr<std::optional<RanPlan>> FindRanPlan(const VizArgs& args, const Trace* trace,
                                                   const std::vector<RunMetrics>& runs,
                                                   std::ostream& err) {
  auto unchecked = [&](const std::string& path) {
    err << "viz: warning: " << path << " records no plan (written by an older train): "
        << "the plan drawn could not be checked against the run\n";
  };
  if (trace != nullptr && trace->plan) {
    const PlanIdentity& traced = *trace->plan;
    const RunMetrics* other = nullptr;
    bool matched = false;
    for (const RunMetrics& run : runs) {
      if (run.plans.empty()) {
        unchecked(run.path);
        continue;
      }
      bool same = false;
      for (const PlanIdentity& id : run.plans) same = same || id.hash == traced.hash;
      matched = matched || same;
      if (!same && other == nullptr) other = &run;
    }
    if (other != nullptr && (runs.size() == 1 || !matched)) {
      return TwoRuns(args.trace, traced, *other);
    }
    return std::optional<RanPlan>(RanPlan{traced, args.trace});
  }
  if (trace != nullptr) unchecked(args.trace);
  std::optional<RanPlan> found;
  for (const RunMetrics& run : runs) {
    if (run.plans.empty()) {
      unchecked(run.path);
    } else if (!found) {
      found = RanPlan{run.plans.back(), run.path};
    } else if (found->id.hash != run.plans.back().hash) {
      err << "viz: warning: " << found->where << " and " << run.path
          << " are runs of different plans: drawing " << args.input << " as written\n";
      return std::optional<RanPlan>();
    }
  }
  return found;
}

// Curves alone: no plan.
absl::Status RunCurvesOnly(const VizArgs& args, const std::vector<RunMetrics>& runs,
                           const std::string& curves_svg, std::ostream& out) {
  const std::string output = ResolveUserPath(
      args.output.empty() ? std::string("training.html") : args.output);
  const std::string ext = FileExtension(output);
  if (ext == "svg") {
    RETURN_IF_ERROR(WriteStringToFile(output, curves_svg));
  } else if (ext == "png") {
    ASSIGN_OR_RETURN(std::string png, RenderSvgToPng(curves_svg));
    RETURN_IF_ERROR(WriteStringToFile(output, png));
  } else {
    HtmlReportInput report;
    report.runs = &runs;
    report.curves_svg = curves_svg;
    RETURN_IF_ERROR(WriteStringToFile(output, RenderHtmlReport(report)));
  }
  out << RunsSummary(runs) << "wrote " << output << "\n";
  return absl::OkStatus();
}

// The plan to draw: INPUT, compiled as the run recorded when it did, and
// checked against the run's plan (saying so on `out`, differences on `err`).
absl::StatusOr<Plan> LoadPlanThatRan(const VizArgs& args, const std::string& input,
                                     const std::optional<RanPlan>& ran,
                                     std::ostream& out, std::ostream& err) {
  ASSIGN_OR_RETURN(Plan plan, LoadPlanForViz(input, ran ? &ran->id : nullptr));
  if (ran) {
    ASSIGN_OR_RETURN(const std::vector<std::string> differences,
                     CheckPlanRan(input, args.input, plan, ran->id, ran->where));
    out << "drawing the plan that ran: " << args.input
        << (ran->id.overrides.empty() ? "" : " ") << OverridesText(ran->id.overrides)
        << " (as recorded in " << ran->where << ")\n";
    for (const std::string& d : differences) {
      err << "viz: warning: " << args.input << " compiles here to another plan than the run's ("
          << ran->id.device << ") one: " << d << "\n";
    }
  }
  return plan;
}

// What `viz INPUT` draws: the plan's graph and what goes with it.
struct Drawing {
  std::optional<RanPlan> ran;
  Plan plan;
  VizGraph graph;
  const Trace* trace = nullptr;  // with --trace
  std::vector<RankOverlap> overlap;
  std::string timeline_svg;
  const std::vector<RunMetrics>* runs = nullptr;
  std::string curves_svg;
  Scaling scaling;  // with --scaling
};

// The self-contained HTML report of `d` at `output`; without Graphviz it
// lacks the graph's picture, saying why on `err`.
absl::Status WriteHtmlReport(const VizArgs& args, const Drawing& d, const std::string& dot,
                             const std::string& output, std::ostream& err) {
  HtmlReportInput report;
  report.plan = &d.plan;
  report.graph = &d.graph;
  report.input_path = args.input;
  if (d.ran) {
    absl::StrAppend(&report.input_path, d.ran->id.overrides.empty() ? "" : " ",
                    OverridesText(d.ran->id.overrides), " (the plan that ran, as recorded in ",
                    d.ran->where, ")");
  }
  absl::StatusOr<std::string> svg = RenderDot(dot, "svg");
  if (svg.ok()) {
    report.graph_svg = *std::move(svg);
  } else {
    // The report is still worth having without the picture.
    report.graph_error = std::string(svg.status().message());
    err << "viz: warning: " << report.graph_error << "\n";
  }
  if (d.trace != nullptr) {
    report.trace = d.trace;
    report.overlap = d.overlap;
    report.timeline_svg = d.timeline_svg;
  }
  if (!d.runs->empty()) {
    report.runs = d.runs;
    report.curves_svg = d.curves_svg;
  }
  if (args.scaling) {
    report.scaling = &d.scaling.curves;
    report.scaling_title = d.scaling.title;
    report.scaling_svg = d.scaling.svg;
  }
  return WriteStringToFile(output, RenderHtmlReport(report));
}

// -o's file, in the format its extension names.
absl::Status WriteDrawing(const VizArgs& args, const Drawing& d, const std::string& output,
                          std::ostream& err) {
  const std::string dot = WriteDot(d.graph, d.plan);
  const std::string ext = FileExtension(output);
  if (ext == "dot") return WriteStringToFile(output, dot);
  if (ext == "svg" || ext == "png") {
    ASSIGN_OR_RETURN(std::string rendered, RenderDot(dot, ext));
    return WriteStringToFile(output, rendered);
  }
  return WriteHtmlReport(args, d, dot, output, err);
}

// The summaries on `out`, and with -o the timeline, curves and scaling
// plots beside `output` (the curves only when it is not a report).
absl::Status ReportDrawing(const VizArgs& args, const Drawing& d, const std::string& output,
                           std::ostream& out) {
  const std::vector<RunMetrics>& runs = *d.runs;
  out << Summary(d.plan, d.graph);
  if (d.trace != nullptr) {
    out << "\noverlap (per rank, mean over traced steps):\n"
        << FormatOverlapTable(d.overlap);
    if (!d.trace->positions.empty()) {
      out << "\nthe job stopped: " << d.trace->stop_reason << "\nwhere each rank was:\n";
      for (const StopPosition& p : d.trace->positions) {
        out << "  rank " << p.rank << ": " << p.where << (p.behind ? "  <- behind" : "") << "\n";
      }
    }
    if (!args.output.empty()) {
      std::string timeline_path =
          absl::StrCat(StripExtension(output), "_timeline.svg");
      RETURN_IF_ERROR(WriteStringToFile(timeline_path, d.timeline_svg));
      out << "wrote " << timeline_path << "\n";
    }
  }
  if (!runs.empty()) {
    out << "\n" << RunsSummary(runs);
    if (!args.output.empty() && FileExtension(output) != "html") {
      const std::string curves_path =
          absl::StrCat(StripExtension(output), "_curves.svg");
      RETURN_IF_ERROR(WriteStringToFile(curves_path, d.curves_svg));
      out << "wrote " << curves_path << "\n";
    }
  }
  if (args.scaling) {
    out << "\n" << ScalingSummary(d.scaling);
    if (!args.output.empty()) {
      const std::string scaling_path =
          absl::StrCat(StripExtension(output), "_scaling.svg");
      RETURN_IF_ERROR(WriteStringToFile(scaling_path, d.scaling.svg));
      out << "wrote " << scaling_path << "\n";
    }
  }
  out << "wrote " << output << "\n";
  return absl::OkStatus();
}

}  // namespace

absl::Status RunViz(const VizArgs& args, std::ostream& out, std::ostream& err) {
  ASSIGN_OR_RETURN(std::vector<RunMetrics> runs, LoadRuns(args, err));
  Drawing d;
  d.runs = &runs;
  d.curves_svg = runs.empty() ? "" : RenderCurvesSvg(runs);
  if (args.input.empty()) return RunCurvesOnly(args, runs, d.curves_svg, out);

  const std::string input = ResolveUserPath(args.input);
  Trace trace;
  if (!args.trace.empty()) {
    ASSIGN_OR_RETURN(trace, ReadTraceFile(ResolveUserPath(args.trace)));
    d.trace = &trace;
  }
  ASSIGN_OR_RETURN(d.ran, FindRanPlan(args, d.trace, runs, err));
  ASSIGN_OR_RETURN(d.plan, LoadPlanThatRan(args, input, d.ran, out, err));
  VizOptions options;
  options.collapse_repeats = args.collapse;
  options.min_repeats = args.min_repeats;
  ASSIGN_OR_RETURN(d.graph, BuildVizGraph(d.plan, options));
  for (const RunMetrics& run : runs) {
    if (!run.model.empty() && run.model != d.plan.model) {
      err << "viz: warning: " << run.path << " is a run of model " << run.model
          << ", not of " << d.plan.model << "\n";
    }
  }
  if (d.trace != nullptr) {
    RETURN_IF_ERROR(CheckTraceMatchesPlan(trace, d.plan));
    d.overlap = ComputeOverlap(trace);
    d.timeline_svg = RenderTimelineSvg(trace);
  }
  if (args.scaling) {
    ASSIGN_OR_RETURN(d.scaling, SimulateForViz(args, input));
  }
  const std::string output = args.output.empty()
                                  ? ResolveUserPath(absl::StrCat(d.plan.model, ".html"))
                                  : ResolveUserPath(args.output);
  RETURN_IF_ERROR(WriteDrawing(args, d, output, err));
  return ReportDrawing(args, d, output, out);
}

}  // namespace trainc::viz
