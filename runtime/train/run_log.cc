#include "runtime/train/run_log.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/gemm.h"

namespace trainc {

std::string FormatDuration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.0fs", seconds);
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
}

std::string FormatRate(double per_second) {
  if (per_second >= 1e6) return absl::StrFormat("%.2fM", per_second / 1e6);
  if (per_second >= 1e3) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.0f", per_second);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrFormat("%.2f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.1f KiB", bytes / 1024.0);
}

void LogRunHeader(std::ostream& log, const Plan& plan, DeviceKind device,
                  const RunData& data, const StartingPoint& start) {
  log << absl::StrFormat(
      "training %s on %d %s rank(s): global_batch %d = %d x %d micro_batch x "
      "%d accumulate | %d steps (%d/epoch, %d samples dropped per epoch) | "
      "arena %s per rank\n",
      plan.model, plan.world_size, EnumName(device), plan.global_batch,
      plan.world_size, plan.micro_batch, plan.accumulate, data.total_steps,
      data.steps_per_epoch, data.dropped_per_epoch, FormatBytes(plan.arena_bytes));
  // memory = ...: the plan kept (the whole table is in --compile-only).
  for (absl::string_view line : absl::StrSplit(plan.memory_choice, '\n')) {
    if (absl::StartsWith(line, "memory ") || absl::StartsWith(line, "  -> ")) {
      log << line << "\n";
    }
  }
  if (!plan.zero_accumulate_choice.empty()) log << plan.zero_accumulate_choice << "\n";
  if (start.state.step > 0) {
    log << absl::StrFormat("resumed from %s at step %d (epoch %d, step %d)\n",
                           start.resumed_from, start.state.step, start.state.epoch + 1,
                           start.state.step_in_epoch);
  }
}

void ProgressWindow::Log(std::ostream& log, const Plan& plan, int64_t number, int64_t epoch,
                         bool line, int64_t total_steps, int64_t total_epochs, double loss,
                         const std::string& norm) {
  const auto now = std::chrono::steady_clock::now();
  const double step_ms = std::chrono::duration<double>(now - start).count() / steps * 1e3;
  const std::string eta = FormatDuration(step_ms / 1e3 * (total_steps - number));
  if (!line) {  // rank 0's terminal: redraw the live line
    log << absl::StrFormat("\r\033[Kstep %d/%d | eta %s", number, total_steps, eta)
        << std::flush;
    return;
  }
  // Language models also count tokens (loss terms) per second.
  const std::string tokens =
      plan.loss_terms > 1
          ? absl::StrCat(" | ",
                         FormatRate(plan.global_batch * plan.loss_terms / (step_ms / 1e3)),
                         " tokens/s")
          : "";
  // Flushed: under the launcher stdout is a pipe or a file, and a long
  // run's progress must show as it happens.
  log << absl::StrFormat(
             "%sstep %d/%d | epoch %d/%d | loss %.4f%s | %.2f ms/step | %s "
             "samples/s%s | eta %s\n",
             LineStart(), number, total_steps, epoch + 1, total_epochs, loss, norm, step_ms,
             FormatRate(plan.global_batch / (step_ms / 1e3)), tokens, eta)
      << std::flush;
  start = now;
  steps = 0;
}

void LogEvaluation(std::ostream& log, const char* line_start, const std::string& when,
                   const EvalHead& head, const EvalResult& eval, double bits_per_byte) {
  if (head.classification && head.rows_per_example > 1) {
    // A language model: the loss is per token; on text it is also bits
    // per byte, comparable across tokenizers.
    log << absl::StrFormat(
        "%seval %s | loss %.4f%s | next-token accuracy %.2f%% (%d tokens)\n", line_start,
        when, eval.loss,
        bits_per_byte > 0 ? absl::StrFormat(" | %.3f bits/byte", bits_per_byte) : "",
        100 * eval.accuracy, eval.examples);
  } else if (head.classification) {
    log << absl::StrFormat("%seval %s | loss %.4f | accuracy %.2f%% (%d examples)\n",
                           line_start, when, eval.loss, 100 * eval.accuracy, eval.examples);
  } else {
    log << absl::StrFormat("%seval %s | loss %.5f (%d examples)\n", line_start, when,
                           eval.loss, eval.examples);
  }
  log << std::flush;
}

namespace {

// The summary's lines about memory: the arena, and after the first step
// this process's resident set.
void LogSummaryMemory(std::ostream& log, const Plan& plan, const TrainSummary& s, int rank) {
  log << absl::StrFormat("  arena           %s per rank (%s without reuse)\n",
                         FormatBytes(plan.arena_bytes), FormatBytes(plan.memory.unshared_bytes));
  if (s.resident_bytes > 0) {
    log << absl::StrFormat(
        "  resident        %s after the first step (rank %d's process): %s the device's "
        "arena, staging and scratch + %s the communicators' buffers + %s the rest (code, "
        "data, libraries)\n",
        FormatBytes(s.resident_bytes), rank, FormatBytes(s.device_host_bytes),
        FormatBytes(s.comm_host_bytes),
        FormatBytes(s.resident_bytes - s.device_host_bytes - s.comm_host_bytes));
  }
}

// The summary's line about CUDA graphs, on a device that captures steps.
void LogSummaryCapture(std::ostream& log, const CaptureInfo& capture, int64_t steps) {
  if (capture.replayed_steps > 0) {
    log << absl::StrFormat("  cuda graph      %d of %d steps replayed (captured at step %d)\n",
                           capture.replayed_steps, steps, capture.captured_step);
  } else {
    std::string why = capture.failure;
    if (why.empty()) why = capture.unavailable;
    if (why.empty()) why = "no untraced step after the warm-up step";
    log << absl::StrFormat("  cuda graph      not used: %s\n", why);
  }
}

}  // namespace

void LogSummary(std::ostream& log, const Plan& plan, const TrainSummary& summary,
                const SummaryContext& context) {
  log << "\nsummary\n";
  log << absl::StrFormat("  steps           %d (to step %d), %s\n", summary.steps,
                         summary.final_step, FormatDuration(summary.seconds));
  log << absl::StrFormat("  throughput      %s samples/s, %.2f ms/step\n",
                         FormatRate(summary.samples_per_second),
                         summary.steps ? summary.seconds * 1e3 / summary.steps : 0.0);
  log << absl::StrFormat("  final loss      %.4f\n", summary.final_loss);
  if (summary.grad_norm >= 0) {
    log << absl::StrFormat("  grad norm       %.4g (last step, before clipping to %g)\n",
                           summary.grad_norm, plan.clip_grad_norm);
  }
  if (summary.eval_accuracy >= 0) {
    log << absl::StrFormat("  eval accuracy   %.2f%% (eval loss %.4f)\n",
                           100 * summary.eval_accuracy, summary.eval_loss);
  } else if (summary.eval_loss >= 0) {
    log << absl::StrFormat("  eval loss       %.5f\n", summary.eval_loss);
  }
  if (context.device == DeviceKind::kCpu) {
    log << "  matrix products "
        << cpu::GemmSummary(cpu::GemmLibraryInUse(), context.blas, cpu::DescribeBlas()) << "\n";
    if (plan.precision == Precision::kBf16) {
      log << "  bf16 GEMMs      " << cpu::Bf16GemmSummary() << "\n";
    }
  }
  LogSummaryMemory(log, plan, summary, context.rank);
  if (context.capture != nullptr) LogSummaryCapture(log, *context.capture, summary.steps);
  if (summary.hidden_fraction >= 0 && plan.world_size > 1) {
    log << absl::StrFormat(
        "  all-reduce      %.3f ms/step, %.0f%% hidden behind backward (%s)\n",
        summary.allreduce_ms, 100 * summary.hidden_fraction,
        context.overlap ? "overlap on" : "overlap off");
  }
  if (context.dropped_per_epoch > 0) {
    log << absl::StrFormat(
        "  drop_last       %d samples per epoch not in a full global batch\n",
        context.dropped_per_epoch);
  }
  if (plan.skip_nonfinite) {
    log << absl::StrFormat("  skipped         %d step(s) with a non-finite gradient\n",
                           summary.skipped_steps);
  }
  if (context.stragglers == nullptr) return;
  for (const Straggler& s : *context.stragglers) {
    log << absl::StrFormat(
        "  straggler       rank %d: busy %.1fx as long as the others (steps %d-%d; per step "
        "data %.2f ms, compute %.2f ms, waiting %.2f ms)\n",
        s.rank, s.ratio, s.first_step, s.last_step, s.data_ms, s.compute_ms, s.waiting_ms);
  }
}

}  // namespace trainc
