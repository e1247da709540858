// What gpu_bench's tables share: timing a plan's steps on a device (with
// bench_data.h's weights), and reading a PyTorch reference script's RESULT
// lines.
#ifndef TRAINC_TOOLS_BENCH_GPU_BENCH_UTIL_H_
#define TRAINC_TOOLS_BENCH_GPU_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"
#include "runtime/exec/executor.h"

namespace trainc::bench {

struct Timing {
  double ms = 0;           // per step, the mean over the timed steps
  std::string graph_note;  // why steps were not replayed as a graph, if not
};

// `warmup` untimed then `iters` timed optimizer steps of `plan` on
// `device` (Prepare, weights and batch included). `feed_ahead`: each step
// is given the next one's batches (the same source), which a replay feeds
// while it runs, as the trainer does; false: each replay's batch is
// uploaded before it.
absl::StatusOr<Timing> TimeSteps(const Plan& plan, Device& device, BatchSource& batches,
                                 const ExecutorOptions& options, int warmup, int iters,
                                 bool feed_ahead = true);

// A reference script's output: each "RESULT name v1 v2 ..." line as its
// name and numbers; a "SKIP why" line (or no result) gives *why.
struct ScriptResult {
  std::string name;
  std::vector<double> values;
};
std::vector<ScriptResult> RunScript(const std::string& script, const std::string& args,
                                    std::string* why);

}  // namespace trainc::bench

#endif  // TRAINC_TOOLS_BENCH_GPU_BENCH_UTIL_H_
