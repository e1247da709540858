// What gpu_bench's tables share: a fixed random batch, the initial
// weights, timing a plan's steps on a device, and reading a PyTorch
// reference script's RESULT lines.
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

// The same random batch every step (the benchmarks measure compute, not
// the data pipeline): features in [-1, 1), class ids and tokens in
// [0, classes).
class FixedBatch : public BatchSource {
 public:
  FixedBatch(const Plan& plan, int64_t classes);
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  std::vector<std::vector<char>> data_;
};

// Parameters drawn as their Buffer::init says (uniform, normal, ones,
// zeros), from a fixed seed.
absl::Status InitParameters(const Plan& plan, Device& device);

struct Timing {
  double ms = 0;           // per step, the mean over the timed steps
  std::string graph_note;  // why steps were not replayed as a graph, if not
};

// `warmup` untimed then `iters` timed optimizer steps of `plan` on
// `device` (Prepare, weights and batch included).
absl::StatusOr<Timing> TimeSteps(const Plan& plan, Device& device, BatchSource& batches,
                                 const ExecutorOptions& options, int warmup, int iters);

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
