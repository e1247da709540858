// Fitting a machine profile to a measured run (`train --trace`).
//
//   ASSIGN_OR_RETURN(viz::Trace trace, viz::ReadTraceFile("trace.json"));
//   ASSIGN_OR_RETURN(Calibration c, Calibrate(plan, trace, base_profile));
//   SimulateStep(plan, c.profile, ...);
//
// What is fitted, from every traced step:
//   - scale.<op>: per op, the measured time of its events over what the
//     base profile models for them (without any scale the base has), on
//     every rank but the slowest (the one with the most compute time);
//   - compute.rank_imbalance: the slowest rank's compute time over the
//     mean of the others', minus 1 (0 for one rank);
//   - compute.comm_contention: the scales come from the events that ran
//     while no collective of their rank moved data (from the last rank's
//     arrival to its end); how much longer the other events took than the
//     scaled model gives the slowdown;
//   - α and β of the link class the trace's world size runs on, by least
//     squares of the buckets' all-reduce time against the bytes each moves
//     (half the bucket under grad_comm = bf16). A rank that reaches
//     a collective early waits inside it for the others, so each
//     all-reduce's sample is its shortest duration over the ranks: the
//     last rank to arrive waits for nobody. Needs two or more ranks and two
//     or more distinct bucket sizes, and bucket all-reduces (not zero = 1's
//     reduce-scatters and all-gathers, nor deterministic mode's gathers);
//     otherwise the base's α and β stay and the report says why;
//   - compute.step_overhead_us: what the replay of the fitted instructions
//     does not explain: the measured period of the traced steps (rank 0,
//     start to start) minus the replayed step. It holds the host's gap
//     between steps and, on a busy machine, the time ranks lose to the
//     operating system's scheduling (on this 2-core machine, 2 ranks run 4
//     busy threads); both are reported.
//
// Whether the run had overlap on is read from the trace: on, if some
// all-reduce started before its rank's last backward instruction ended.
#ifndef TRAINC_TOOLS_SIMULATE_CALIBRATION_H_
#define TRAINC_TOOLS_SIMULATE_CALIBRATION_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "compiler/cost/machine_profile.h"
#include "tools/viz/trace_reader.h"

namespace trainc::simulate {

// One all-reduce as measured: its bytes per rank and its time.
struct CollectiveSample {
  double bytes = 0;
  double us = 0;
};

// Least-squares α (µs per step) and bus bandwidth for `algorithm` on
// `world_size` ranks: the model is linear in α and β (cost_model.h), so
// this fits time = a + b·bytes and divides by the algorithm's step and
// byte factors (auto is fitted as ring). A negative intercept is clamped
// to α = 0 and the slope refitted through the origin. Errors: fewer than
// two distinct sizes, world_size < 2, or no positive slope.
absl::StatusOr<cost::LinkProfile> FitAllReduce(
    cost::AllReduceAlgorithm algorithm, int64_t world_size,
    const std::vector<CollectiveSample>& samples);

struct OpCalibration {
  std::string op;
  int events = 0;
  double measured_us = 0;  // sum over events
  double modelled_us = 0;  // sum of the base model (scale 1)
};

struct Calibration {
  cost::MachineProfile profile;     // the base with the fitted values
  std::vector<OpCalibration> ops;   // by op name
  int collective_samples = 0;
  bool network_fitted = false;
  std::string network_note;         // why not, when not fitted
  bool step_overhead_fitted = false;
  bool overlap = true;              // as detected in the trace
  double measured_step_us = 0;      // rank 0's period of the traced steps
  double host_gap_us = 0;           // median gap between traced steps
  bool contention_fitted = false;
  int slowest_rank = -1;            // -1: one rank
};

// `trace` must be a trace of `plan` (viz::CheckTraceMatchesPlan).
absl::StatusOr<Calibration> Calibrate(const Plan& plan, const viz::Trace& trace,
                                      const cost::MachineProfile& base);

// A table of the fit, for the terminal.
std::string FormatCalibration(const Calibration& calibration,
                              const std::string& trace_name, int64_t world_size);

}  // namespace trainc::simulate

#endif  // TRAINC_TOOLS_SIMULATE_CALIBRATION_H_
