#include "tools/simulate/simulate_cli.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/util/status_macros.h"
#include "compiler/cost/bundled_profiles.h"
#include "tools/cli/option_parser.h"
#include "tools/simulate/calibration.h"
#include "tools/simulate/scaling.h"
#include "compiler/cost/machine_profile.h"
#include "compiler/cost/simulator.h"
#include "tools/viz/timeline.h"
#include "tools/viz/trace_reader.h"

namespace trainc::simulate {
namespace {

absl::StatusOr<std::vector<std::string>> SplitList(const std::string& flag,
                                                   const std::string& value) {
  std::vector<std::string> items = absl::StrSplit(value, ',', absl::SkipEmpty());
  if (items.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": needs a value"));
  return items;
}

std::string FormatTable(const std::vector<ScalingPoint>& points) {
  std::string out = absl::StrFormat("%6s %12s %10s %13s %15s %11s %12s %11s\n", "gpus",
                                    "global_batch", "step(ms)", "backward(ms)",
                                    "all-reduce(ms)", "hidden(ms)", "exposed(ms)",
                                    "efficiency");
  for (const ScalingPoint& r : points) {
    const cost::StepPrediction& p = r.prediction;
    absl::StrAppend(&out, absl::StrFormat(
        "%6d %12d %10.3f %13.3f %15.3f %11.3f %12.3f %10.1f%%\n", r.gpus, r.global_batch,
        p.step_us / 1e3, p.backward_us / 1e3, p.all_reduce_us / 1e3, p.hidden_us / 1e3,
        p.exposed_us / 1e3, 100.0 * r.efficiency));
  }
  return out;
}

// The period of traced steps on rank 0: start of one to start of the next.
double MeasuredStepUs(const viz::Trace& trace) {
  std::map<int64_t, double> start;
  for (const viz::TraceEvent& e : trace.events) {
    if (e.rank != 0) continue;
    auto [it, fresh] = start.try_emplace(e.step, e.ts_us);
    if (!fresh) it->second = std::min(it->second, e.ts_us);
  }
  double sum = 0;
  int n = 0;
  for (auto it = start.begin(); it != start.end(); ++it) {
    auto next = std::next(it);
    if (next == start.end() || next->first != it->first + 1) continue;
    sum += next->second - it->second;
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

absl::StatusOr<cost::MachineProfile> CalibrateProfile(const SimulateArgs& args,
                                                const cost::MachineProfile& base,
                                                std::ostream& out) {
  ASSIGN_OR_RETURN(viz::Trace trace, viz::ReadTraceFile(args.calibrate));
  int64_t world = trace.world_size;
  if (world <= 0) {
    for (const viz::TraceEvent& e : trace.events) world = std::max<int64_t>(world, e.rank + 1);
  }
  Overrides overrides = args.overrides;
  if (absl::EndsWith(args.input, ".train")) overrides.emplace_back("gpus", absl::StrCat(world));
  ASSIGN_OR_RETURN(Plan plan, LoadPlanForProfile(args.input, overrides, base, args.overlap));
  absl::StatusOr<Calibration> fit = Calibrate(plan, trace, base);
  if (!fit.ok()) {
    return absl::Status(fit.status().code(),
                        absl::StrCat("--calibrate ", args.calibrate, ": ", fit.status().message()));
  }
  out << FormatCalibration(*fit, args.calibrate, world);

  // The fit against its own run: measured (the trace, rank 0) vs predicted.
  cost::SimulationOptions options;
  options.world_size = world;
  options.overlap = args.overlap;
  ASSIGN_OR_RETURN(cost::StepPrediction p, cost::SimulateStep(plan, fit->profile, options));
  const std::vector<viz::RankOverlap> measured = viz::ComputeOverlap(trace);
  if (!measured.empty()) {
    const viz::RankOverlap& m = measured[0];
    out << absl::StrFormat(
        "  this run, rank 0 (measured -> predicted%s): step %.3f -> %.3f ms, backward "
        "%.3f -> %.3f ms, all-reduce %.3f -> %.3f ms, exposed %.3f -> %.3f ms\n",
        args.overlap ? "" : ", overlap off as asked", MeasuredStepUs(trace) / 1e3,
        p.step_us / 1e3, m.backward_us / 1e3, p.backward_us / 1e3, m.all_reduce_us / 1e3,
        p.all_reduce_us / 1e3, m.exposed_us / 1e3, p.exposed_us / 1e3);
  }
  if (!args.write_profile.empty()) {
    std::ofstream file(args.write_profile);
    file << cost::FormatMachineProfile(
        fit->profile,
        absl::StrCat("Calibrated by tools/simulate from ", args.calibrate, " (", args.input,
                     ", ", world, world == 1 ? " rank" : " ranks", "), starting from the ",
                     base.name, " profile; see that profile for its sources.\n"));
    if (!file.good()) {
      return absl::PermissionDeniedError(
          absl::StrCat("--write-profile ", args.write_profile, ": cannot write"));
    }
    out << "  calibrated profile written to " << args.write_profile << "\n";
  }
  out << "\n";
  return fit->profile;
}

// The command line's table, setting `*args`; its Help() is --help.
OptionParser MakeParser(SimulateArgs* args) {
  auto into = [](std::string* out) {
    return [out](const std::string& v) {
      *out = v;
      return absl::OkStatus();
    };
  };
  OptionParser parser;
  parser.Usage({"simulate [options] FILE.train|PLAN"})
      .Description(
          "Predicts the step time of a compiled plan on a machine profile, for several\n"
          "world sizes: it replays one optimizer step (compute and comm streams, with\n"
          "the plan's events, as the runtime executes them) with a roofline per\n"
          "instruction and an alpha-beta model of each all-reduce. The file is\n"
          "compiled once per world size with --gpus N, so the per-rank batch stays and\n"
          "the global batch grows (unless the file pins global_batch).\n")
      .Group("Options:")
      .Value({"--gpus"}, "N[,N...]",
             absl::StrCat("world sizes (default 1,2,4,...,", DefaultWorldSizes().back(), ")"),
             [args](const std::string& v) -> absl::Status {
               ASSIGN_OR_RETURN(args->gpus, ParseWorldSizes(v));
               return absl::OkStatus();
             })
      .Value({"--machine"}, "NAME|FILE",
             absl::StrCat("machine profile (default ", args->machine, "); bundled: ",
                          absl::StrJoin(cost::BundledProfileNames(), ", "),
                          "\nor a `key = value` file (tools/simulate/README.md)"),
             into(&args->machine))
      .Value({"--calibrate"}, "TRACE.json",
             "fit the profile to a `train --trace` run first: per-op time scales, alpha "
             "and beta of the all-reduce, the host's time between steps (give the same "
             "--FIELD overrides as that train run)",
             into(&args->calibrate))
      .Value({"--write-profile"}, "FILE", "write the calibrated profile (with --calibrate)",
             into(&args->write_profile))
      .Switch({"--no-overlap"}, "all-reduces after the whole backward, as train --no-overlap",
              [args] { args->overlap = false; })
      .Value({"--bucket-mb", "--bucket_mb"}, "X[,Y...]",
             "override the file's bucket_mb (a size in MB, or auto: the planner's search, "
             "on this --machine, per world size); several values print one table each and "
             "a comparison",
             [args](const std::string& v) -> absl::Status {
               ASSIGN_OR_RETURN(args->bucket_mb, SplitList("--bucket-mb", v));
               return absl::OkStatus();
             })
      .HelpRow("--FIELD VALUE",
               "any train { } field or model constant, as train takes it (--micro_batch 16, "
               "--accumulate 4, --tf32 true, --zero 1, --grad_comm bf16)")
      .TrainOverrides(&args->overrides)
      .Epilogue(
          "Columns: step time (a step's period: both streams drained, plus the host's\n"
          "time between steps), backward (busy time of backward instructions),\n"
          "all-reduce (busy time of the comm stream), hidden (all-reduce time while the\n"
          "compute stream is busy), exposed (the rest), and scaling efficiency (samples\n"
          "per second per rank against one rank). They mean what `viz --trace` reports\n"
          "for a measured run. The same as a plot in an HTML report:\n"
          "  bazel run //tools:viz -- FILE.train --scaling [--machine PROFILE] -o OUT.html\n");
  return parser;
}

}  // namespace

std::string SimulateUsage() {
  SimulateArgs unused;
  return MakeParser(&unused).Help();
}

absl::StatusOr<SimulateArgs> ParseSimulateArgs(int argc, const char* const* argv) {
  SimulateArgs args;
  const OptionParser parser = MakeParser(&args);
  std::vector<std::string> positional;
  ASSIGN_OR_RETURN(args.help, parser.Parse(argc, argv, &positional));
  if (args.help) return args;
  if (positional.size() != 1) {
    return absl::InvalidArgumentError(
        positional.empty() ? "no input file (see --help)"
                           : absl::StrCat("one input file expected, got ", positional.size()));
  }
  args.input = positional[0];
  if (!args.write_profile.empty() && args.calibrate.empty()) {
    return absl::InvalidArgumentError("--write-profile: needs --calibrate TRACE.json");
  }
  if (!args.bucket_mb.empty() && !absl::EndsWith(args.input, ".train")) {
    return absl::InvalidArgumentError(
        "--bucket-mb: a plan file is already bucketed; give the .train file");
  }
  return args;
}

absl::Status RunSimulate(const SimulateArgs& args, std::ostream& out, std::ostream& err) {
  ASSIGN_OR_RETURN(cost::MachineProfile profile, LoadProfileFlag(args.machine));
  if (!args.calibrate.empty()) {
    ASSIGN_OR_RETURN(profile, CalibrateProfile(args, profile, out));
  }
  ScalingOptions options;
  options.gpus = args.gpus;
  options.bucket_mb = args.bucket_mb;
  options.overlap = args.overlap;
  options.overrides = args.overrides;
  ASSIGN_OR_RETURN(std::vector<ScalingCurve> curves,
                   SimulateScaling(args.input, profile, options));
  for (const ScalingCurve& curve : curves) {
    out << absl::StrFormat("%s on %s (%s all-reduce, overlap %s), %s\n", curve.model,
                           profile.name, cost::AllReduceAlgorithmName(profile.all_reduce),
                           args.overlap ? "on" : "off", curve.description);
    out << FormatTable(curve.points);
    for (const ScalingPoint& r : curve.points) {
      if (!r.bucket_choice.empty()) out << "  " << r.bucket_choice << "\n";
    }
    out << "\n";
  }
  if (curves.size() > 1) {
    out << "step time in ms (exposed communication) by bucket_mb\n";
    out << absl::StrFormat("%6s", "gpus");
    for (const ScalingCurve& curve : curves) {
      out << absl::StrFormat(" %20s", absl::StrCat("bucket_mb ", curve.bucket_mb));
    }
    out << "\n";
    for (size_t i = 0; i < curves[0].points.size(); ++i) {
      out << absl::StrFormat("%6d", curves[0].points[i].gpus);
      for (const ScalingCurve& curve : curves) {
        const cost::StepPrediction& p = curve.points[i].prediction;
        out << absl::StrFormat(" %20s", absl::StrFormat("%.2f (%.2f)", p.step_us / 1e3,
                                                        p.exposed_us / 1e3));
      }
      out << "\n";
    }
  }
  (void)err;
  return absl::OkStatus();
}

}  // namespace trainc::simulate
