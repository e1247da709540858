// The records a training run writes to its metrics log
// (runtime/metrics/METRICS_FORMAT.md): a private part of runtime/train
// (trainer.cc's). Rank 0 writes them; whether there is a log is the same
// on every rank.
#ifndef TRAINC_RUNTIME_TRAIN_RUN_METRICS_H_
#define TRAINC_RUNTIME_TRAIN_RUN_METRICS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

#include "compiler/plan/plan.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/trace/plan_identity.h"
#include "runtime/trace/tracer.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/stragglers.h"
#include "runtime/train/trainer.h"

namespace trainc {

// Metrics are not worth the run: a write that fails (a full disk) is a
// warning, that output stops, and training goes on to its checkpoint.
void WriteMetrics(MetricsLog& metrics, std::ostream& log, const MetricsRecord& record);

// The metrics log's first record: what was run, for a reader to label and
// compare runs by.
MetricsRecord RunRecord(const Plan& plan, DeviceKind device, int64_t total_steps,
                        int64_t steps_per_epoch, int64_t first_step,
                        const PlanIdentity& identity);

// One optimizer step's record: `ms` its time, `grad_norm` with clipping or
// skip_nonfinite (else none), `traced_spans` this rank's spans
// when the step was traced on more than one rank (else empty). Its loss is
// NaN, filled in at the next sum over ranks (scalars[0]).
MetricsRecord TrainRecord(const Plan& plan, int64_t step, int64_t epoch, double lr, double ms,
                          std::optional<double> grad_norm,
                          const std::vector<TraceSpan>& traced_spans);

// An evaluation's record at `step` of `epoch` (from 0); `bits_per_byte` 0
// when unknown.
MetricsRecord EvalRecord(int64_t step, int64_t epoch, const EvalHead& head,
                         const EvalResult& eval, double bits_per_byte);

// A rank named slower than the others (stragglers.h), at `step`.
MetricsRecord StragglerRecord(int64_t step, const Straggler& s);

// The summary's record; `eval_ran` whether there was an eval set.
MetricsRecord SummaryRecord(const Plan& plan, const TrainSummary& summary, bool eval_ran);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RUN_METRICS_H_
