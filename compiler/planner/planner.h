// BuildPlan: TrainSpec -> the static execution Plan of one optimizer step.
//
//   absl::StatusOr<Plan> plan = BuildPlan(spec);
//   std::cout << PlanSummary(*plan);
//
// Pipeline: lower the model to a forward graph of one micro-step
// (compiler/graph), drop what the loss does not need, differentiate
// (compiler/autodiff), then:
//   - unroll `accumulate` micro-steps of load_batch -> forward -> backward;
//     parameter gradients are written with accumulate=0 in micro-step 0 and
//     accumulate=1 after (deterministic mode: slot k, always accumulate=0);
//   - bucket the parameter gradients in backward order (bucketing.h; with
//     bucket_mb = auto, the sizes of least predicted step time,
//     bucket_search.h) and,
//     in the last micro-step only, issue each bucket's all_reduce on the
//     comm stream right after the compute instruction that writes the
//     bucket's last gradient (an event orders the two); then one optimizer
//     instruction per bucket, waiting on its all_reduce;
//   - lay out the arena (memory_plan.h): per bucket, parameters, gradients
//     and optimizer state each contiguous and in the same order with the
//     same 64-byte-aligned relative offsets, so the optimizer is one flat
//     loop and a gradient lives inside its bucket (no copy before the
//     all-reduce); then activations, saved tensors and backward temporaries,
//     sharing memory by liveness (one buffer per value per micro-step, so a
//     micro-step's activations are free after its backward).
//
// Decisions the runtime relies on:
//   - all_reduce is emitted even when world_size is 1 (one code path; the
//     runtime may skip the collective, but deterministic mode still needs
//     its ordered sum of the slots).
//   - In deterministic mode a bucket's buffer holds `accumulate` slots of
//     Bucket::bytes; the optimizer reads slot 0.
//   - The loss buffer is persistent (never reused): every micro-step's loss
//     op overwrites it; read it after each micro-step's forward.
//   - Input and label buffers are shared by all micro-steps (Plan::
//     input_buffers); activations are per micro-step ("h1@0", "h1@1" when
//     accumulate > 1).
//   - drop_last: an epoch's last partial global batch is dropped (the
//     runtime does it), so every step has exactly global_batch samples and
//     the loss scale 1/global_batch is always right.
//   - Parameters the loss does not depend on keep a zero gradient (they
//     still get a bucket slot, and the optimizer still applies weight decay).
#ifndef TRAINC_COMPILER_PLANNER_PLANNER_H_
#define TRAINC_COMPILER_PLANNER_PLANNER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/cost/machine_profile.h"
#include "compiler/cost/simulator.h"
#include "compiler/plan/plan.h"
#include "compiler/spec/train_spec.h"

namespace trainc {

// What the backend that will run the plan tells the planner.
struct PlanOptions {
  // Bytes of workspace for `instr`, an op whose last output is a workspace
  // (ops::OpDef::workspace: convolution, pooling), asked once the plan's
  // buffers have their shapes. The planner reserves it in the arena as a
  // BufferKind::kWorkspace buffer live for that instruction only, so
  // kernels never allocate during a step. Unset: 0 bytes, and a backend
  // that needs more refuses the plan at Prepare, saying so.
  std::function<absl::StatusOr<int64_t>(const Plan& plan, const Instruction& instr)>
      workspace;
  // precision = bf16: the bytes of f32 staging the backend keeps beside the
  // arena for the bf16 operands its kernels widen (MemoryReport's
  // bf16_staging_bytes), asked once the plan is complete. Unset: every
  // bf16 operand is staged, as by the CPU's kernels.
  std::function<absl::StatusOr<int64_t>(const Plan& plan)> bf16_staging;

  // bucket_mb = auto (bucket_search.h) costs its candidates on a machine
  // profile (compiler/cost): `machine` when set (a tool's own, as
  // simulate --machine); else the file's train { machine }; else
  // `default_machine` (the device's, DefaultMachineOfDevice); else
  // kDefaultMachine.
  const cost::MachineProfile* machine = nullptr;
  std::string default_machine;
  // Whether the runtime overlaps the collectives with the backward pass
  // (train --no-overlap: false), as the candidates are replayed.
  bool overlap = true;
};

// bucket_mb = auto's profile when nothing names one: the machine the tests
// and CPU runs of this repository use.
inline constexpr char kDefaultMachine[] = "cpu_loopback";

// PlanOptions::default_machine for plans run on `device` (--device's names):
// "h100_nvlink_ib" for "cuda", kDefaultMachine for "cpu" and anything else.
// train sets it from the backend it runs on, viz from the device a trace
// records, so both price bucket_mb = auto and memory = ... alike.
const char* DefaultMachineOfDevice(absl::string_view device);

absl::StatusOr<Plan> BuildPlan(const TrainSpec& spec, const PlanOptions& options = {});

// The machine profile the planner's searches (bucket_mb = auto,
// zero_accumulate = auto, memory = ...) replay their candidates on:
// options.machine, else the file's train { machine }, else
// options.default_machine, else kDefaultMachine.
absl::StatusOr<cost::MachineProfile> PlanningProfile(const TrainSpec& spec,
                                                     const PlanOptions& options);

// How those searches replay a candidate: on the planning profile, with the
// spec's ranks and the runtime's overlap.
struct PlanReplay {
  cost::MachineProfile profile;
  cost::SimulationOptions simulation;

  absl::StatusOr<cost::StepPrediction> Step(const Plan& plan) const {
    return cost::SimulateStep(plan, profile, simulation);
  }
  // The profile's name for the searches' explanations ("?" if unnamed).
  std::string ProfileName() const { return profile.name.empty() ? "?" : profile.name; }
};
absl::StatusOr<PlanReplay> PlanningReplay(const TrainSpec& spec, const PlanOptions& options);

// A human summary: ops per micro-step, buckets, memory, batch arithmetic.
std::string PlanSummary(const Plan& plan);

// Bytes one rank sends per step for its gradient collectives (and ZeRO-1's
// parameter all-gather), as bandwidth-optimal ring algorithms send them:
// an all-reduce 2 (N - 1) / N of a bucket, a reduce-scatter or all-gather
// (N - 1) / N; grad_comm = bf16 halves the gradients'. 0 on one rank.
int64_t BytesSentPerStep(const Plan& plan);

}  // namespace trainc

#endif  // TRAINC_COMPILER_PLANNER_PLANNER_H_
