// The text a training run prints on rank 0 (other ranks' goes nowhere):
// the header, the progress lines, evaluations and the summary. A private
// part of runtime/train (trainer.cc's); the wording is what users and the
// end-to-end tests read, so it changes only on purpose.
#ifndef TRAINC_RUNTIME_TRAIN_RUN_LOG_H_
#define TRAINC_RUNTIME_TRAIN_RUN_LOG_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

#include "compiler/plan/plan.h"
#include "runtime/cpu/gemm.h"
#include "runtime/exec/executor.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/run_data.h"
#include "runtime/train/starting_point.h"
#include "runtime/train/stragglers.h"
#include "runtime/train/trainer.h"

namespace trainc {

// "42s", "3m07s", "2h05m".
std::string FormatDuration(double seconds);
// "950", "12.3k", "1.25M".
std::string FormatRate(double per_second);
// "12.0 KiB", "3.50 MiB".
std::string FormatBytes(int64_t bytes);

// The run's first lines: what trains on which ranks, the memory the plan
// kept and where a resumed run starts.
void LogRunHeader(std::ostream& log, const Plan& plan, DeviceKind device,
                  const RunData& data, const StartingPoint& start);

// Rank 0's progress lines: every `every` steps, at an epoch's end and at
// the last step; on a terminal (`tty`) a live line between them.
struct ProgressWindow {
  bool tty = false;     // rank 0 writes to a terminal: a live progress line
  int64_t every = 1;    // steps between progress lines
  // The steps since the last progress line, and when that line was.
  std::chrono::steady_clock::time_point start;
  int64_t steps = 0;

  // What starts a line of the log: on rank 0's terminal, the erasing of
  // the live progress line.
  const char* LineStart() const { return tty ? "\r\033[K" : ""; }
  // After step `number` of `total_steps` in epoch `epoch` (from 0): the
  // progress line when `line`, with the world's mean `loss` and `norm`
  // (" | grad norm ..." or ""), else on a terminal the live line. Either
  // starts a new window.
  void Log(std::ostream& log, const Plan& plan, int64_t number, int64_t epoch, bool line,
           int64_t total_steps, int64_t total_epochs, double loss, const std::string& norm);
};

// An evaluation's line; `when` is "epoch 3" or "step 200 (epoch 1)", and
// `bits_per_byte` 0 when unknown.
void LogEvaluation(std::ostream& log, const char* line_start, const std::string& when,
                   const EvalHead& head, const EvalResult& eval, double bits_per_byte);

// What the summary says beside TrainSummary's numbers.
struct SummaryContext {
  DeviceKind device = DeviceKind::kCpu;
  // CPU: --blas after TRAINC_BLAS, for why the summary's GEMM library ran.
  cpu::BlasChoice blas = cpu::BlasChoice::kAuto;
  int rank = 0;
  bool overlap = true;
  int64_t dropped_per_epoch = 0;
  const CaptureInfo* capture = nullptr;  // null: the device captures no steps
  const std::vector<Straggler>* stragglers = nullptr;  // the ranks named slower
};

// The summary after the last step.
void LogSummary(std::ostream& log, const Plan& plan, const TrainSummary& summary,
                const SummaryContext& context);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RUN_LOG_H_
