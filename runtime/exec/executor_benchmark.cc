// One CPU rank, the default model (784-256-128-10 ReLU MLP, cross-entropy,
// AdamW), global batch 256 split as micro_batch x accumulate. Prints one row
// per split: median and best step time over the timed steps.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_device.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/testing/test_plans.h"
#include "runtime/trace/tracer.h"

namespace trainc {
namespace {

int Run() {
  constexpr int kWarmup = 20, kSteps = 200;
  std::printf("%-12s %-10s %10s %10s\n", "micro x acc", "blas_thr", "median_ms",
              "best_ms");
  for (int blas_threads : {1, 2}) {
    for (int64_t accumulate : {1, 4}) {
      testing::MlpPlanOptions options;
      options.dims = {784, 256, 128, 10};
      options.micro_batch = 256 / accumulate;
      options.accumulate = accumulate;
      options.optimizer.lr = 1e-3;
      const Plan plan = testing::MakeMlpPlan(options);
      CpuDevice device({blas_threads});
      Executor executor(plan, &device, nullptr);
      if (!executor.Prepare().ok()) return 1;
      if (!testing::UploadMlpParams(
               plan, testing::RandomMlpParams(options.dims, 1), device)
               .ok()) {
        return 1;
      }
      testing::VectorBatchSource source(testing::RandomBatches(
          options.dims, options.micro_batch, accumulate, 2));
      std::vector<double> ms;
      for (int step = 1; step <= kWarmup + kSteps; ++step) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!executor.RunStep({step, 1e-3}, source).ok()) return 1;
        const auto t1 = std::chrono::steady_clock::now();
        if (step > kWarmup) {
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      }
      std::sort(ms.begin(), ms.end());
      std::printf("%4lld x %-5lld %-10d %10.3f %10.3f\n",
                  static_cast<long long>(options.micro_batch),
                  static_cast<long long>(accumulate), blas_threads,
                  ms[ms.size() / 2], ms[0]);
    }
  }
  // Where the time goes: mean microseconds per step by op, 256 x 1, from
  // the tracer over 50 steps.
  testing::MlpPlanOptions options;
  options.dims = {784, 256, 128, 10};
  options.micro_batch = 256;
  const Plan plan = testing::MakeMlpPlan(options);
  CpuDevice device;
  Tracer tracer(0);
  Executor executor(plan, &device, nullptr);
  if (!executor.Prepare().ok()) return 1;
  testing::VectorBatchSource source(
      testing::RandomBatches(options.dims, 256, 1, 2));
  constexpr int kTraced = 50;
  for (int step = 1; step <= kWarmup + kTraced; ++step) {
    executor.set_tracer(step > kWarmup ? &tracer : nullptr);
    if (!executor.RunStep({step, 1e-3}, source).ok()) return 1;
  }
  std::map<std::string, double> us_by_op;
  for (const TraceSpan& s : tracer.spans()) {
    us_by_op[plan.instructions[s.instr].op] +=
        (s.end_ns - s.begin_ns) / 1e3 / kTraced;
  }
  std::printf("\n%-22s %10s\n", "op (256 x 1)", "us/step");
  for (const auto& [op, us] : us_by_op) std::printf("%-22s %10.1f\n", op.c_str(), us);
  return 0;
}

}  // namespace
}  // namespace trainc

int main() { return trainc::Run(); }
