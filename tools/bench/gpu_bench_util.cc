#include "tools/bench/gpu_bench_util.h"

#include "tools/bench/bench_data.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace trainc::bench {

absl::StatusOr<Timing> TimeSteps(const Plan& plan, Device& device, BatchSource& batches,
                                 const ExecutorOptions& options, int warmup, int iters,
                                 bool feed_ahead) {
  Executor executor(plan, &device, /*comm=*/nullptr, /*tracer=*/nullptr, options);
  absl::Status s = executor.Prepare();
  if (!s.ok()) return s;
  if (!(s = InitParameters(plan, device, /*rank=*/0)).ok()) return s;
  absl::Time start;
  for (int step = 1; step <= warmup + iters; ++step) {
    if (step == warmup + 1) start = absl::Now();
    BatchSource* next = feed_ahead && step < warmup + iters ? &batches : nullptr;
    absl::StatusOr<double> loss = executor.RunStep({step, 1e-3}, batches, next);
    if (!loss.ok()) return loss.status();
    if (!std::isfinite(*loss)) {
      return absl::InternalError(absl::StrCat("step ", step, ": loss ", *loss));
    }
  }
  Timing t;
  t.ms = absl::ToDoubleMilliseconds(absl::Now() - start) / iters;
  const CaptureInfo& capture = executor.capture();
  if (options.capture && capture.replayed_steps < iters) {
    t.graph_note = !capture.failure.empty()       ? capture.failure
                   : !capture.unavailable.empty() ? capture.unavailable
                                                  : "not every step replayed";
  }
  return t;
}

std::vector<ScriptResult> RunScript(const std::string& script, const std::string& args,
                                    std::string* why) {
  std::vector<ScriptResult> out;
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string cmd = absl::StrCat(python, " ", script, " ", args, " 2>&1");
    FILE* pipe = popen(cmd.c_str(), "r");
    if (pipe == nullptr) continue;
    char line[1024];
    while (fgets(line, sizeof(line), pipe) != nullptr) {
      std::vector<std::string> f =
          absl::StrSplit(absl::string_view(line), ' ', absl::SkipWhitespace());
      if (f.size() >= 2 && f[0] == "RESULT") {
        ScriptResult r;
        r.name = f[1];
        for (size_t i = 2; i < f.size(); ++i) r.values.push_back(std::atof(f[i].c_str()));
        out.push_back(std::move(r));
      } else if (!f.empty() && f[0] == "SKIP") {
        *why = absl::StrCat(python, ": ", absl::StripTrailingAsciiWhitespace(line));
      }
    }
    pclose(pipe);
    if (!out.empty()) return out;
  }
  if (why->empty()) *why = absl::StrCat(script, " printed no results");
  return out;
}

}  // namespace trainc::bench
