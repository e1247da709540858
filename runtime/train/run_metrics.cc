#include "runtime/train/run_metrics.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "runtime/train/overlap.h"

namespace trainc {

void WriteMetrics(MetricsLog& metrics, std::ostream& log, const MetricsRecord& record) {
  const absl::Status written = metrics.Write(record);
  if (!written.ok()) log << "warning: " << written.message() << "; training goes on\n";
}

MetricsRecord RunRecord(const Plan& plan, DeviceKind device, int64_t total_steps,
                        int64_t steps_per_epoch, int64_t first_step,
                        const PlanIdentity& identity) {
  MetricsRecord r{"run", first_step - 1, UnixSeconds()};
  r.info = {{"model", plan.model},
            {"source", plan.source},
            {"device", std::string(EnumName(device))},
            {"gpus", int64_t{plan.world_size}},
            {"micro_batch", int64_t{plan.micro_batch}},
            {"accumulate", int64_t{plan.accumulate}},
            {"global_batch", int64_t{plan.global_batch}},
            {"loss_terms", int64_t{plan.loss_terms}},
            {"steps", total_steps},
            {"steps_per_epoch", steps_per_epoch},
            {"optimizer", std::string(EnumName(plan.optimizer.kind))},
            {"lr", double{plan.optimizer.lr}},
            {"seed", int64_t{plan.seed}},
            {"plan", JsonText{PlanIdentityJson(identity)}}};
  return r;
}

MetricsRecord TrainRecord(const Plan& plan, int64_t step, int64_t epoch, double lr, double ms,
                          std::optional<double> grad_norm,
                          const std::vector<TraceSpan>& traced_spans) {
  MetricsRecord r{"train", step, UnixSeconds()};
  r.info = {{"epoch", epoch + 1}};
  r.scalars = {{"loss", NAN},  // known at the next sum over ranks
               {"lr", lr},
               {"step_ms", ms},
               {"samples_per_s", plan.global_batch / (ms / 1e3)}};
  if (plan.loss_terms > 1) {
    r.scalars.emplace_back("tokens_per_s", plan.global_batch * plan.loss_terms / (ms / 1e3));
  }
  if (grad_norm) r.scalars.emplace_back("grad_norm", *grad_norm);
  if (!traced_spans.empty()) {
    // This rank's all-reduce time in the step and how much of it no
    // compute hid.
    const OverlapStats o = ComputeOverlap(traced_spans);
    if (o.comm_ns > 0) {
      r.scalars.emplace_back("allreduce_ms", o.comm_ns / 1e6);
      r.scalars.emplace_back("exposed_comm_ms", (o.comm_ns - o.hidden_ns) / 1e6);
    }
  }
  return r;
}

MetricsRecord EvalRecord(int64_t step, int64_t epoch, const EvalHead& head,
                         const EvalResult& eval, double bits_per_byte) {
  const bool language_model = head.rows_per_example > 1;
  MetricsRecord r{"eval", step, UnixSeconds()};
  r.info = {{"epoch", epoch + 1}, {language_model ? "tokens" : "examples", eval.examples}};
  r.scalars = {{"loss", eval.loss}};
  if (head.classification) r.scalars.emplace_back("accuracy", eval.accuracy);
  if (language_model && bits_per_byte > 0) {
    r.scalars.emplace_back("bits_per_byte", bits_per_byte);
  }
  return r;
}

MetricsRecord StragglerRecord(int64_t step, const Straggler& s) {
  MetricsRecord r{"straggler", step, UnixSeconds()};
  r.info = {{"rank", int64_t{s.rank}},        {"ratio", s.ratio},
            {"first_step", s.first_step},     {"busy_ms", s.busy_ms},
            {"data_ms", s.data_ms},           {"compute_ms", s.compute_ms},
            {"waiting_ms", s.waiting_ms},     {"others_busy_ms", s.others_busy_ms},
            {"others_waiting_ms", s.others_waiting_ms}};
  return r;
}

MetricsRecord SummaryRecord(const Plan& plan, const TrainSummary& summary, bool eval_ran) {
  MetricsRecord r{"summary", summary.final_step, UnixSeconds()};
  r.info = {{"steps", summary.steps},
            {"seconds", summary.seconds},
            {"samples_per_s", summary.samples_per_second},
            {"final_loss", summary.final_loss}};
  if (summary.resident_bytes > 0) {
    r.info.emplace_back("resident_bytes", static_cast<double>(summary.resident_bytes));
    r.info.emplace_back("device_host_bytes", static_cast<double>(summary.device_host_bytes));
    r.info.emplace_back("comm_host_bytes", static_cast<double>(summary.comm_host_bytes));
  }
  if (eval_ran) r.info.emplace_back("eval_loss", summary.eval_loss);
  if (summary.eval_accuracy >= 0) {
    r.info.emplace_back("eval_accuracy", summary.eval_accuracy);
  }
  if (summary.hidden_fraction >= 0 && plan.world_size > 1) {
    r.info.emplace_back("allreduce_ms", summary.allreduce_ms);
    r.info.emplace_back("hidden_fraction", summary.hidden_fraction);
  }
  return r;
}

}  // namespace trainc
