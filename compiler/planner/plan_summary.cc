// PlanSummary (declared in planner.h): what a person wants to know about a
// plan before running it.
#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/cost/cost_model.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/op_table.h"
#include "compiler/planner/planner.h"

namespace trainc {
namespace {

std::string Bytes(int64_t bytes) {
  if (bytes < 1024 * 1024) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%.2f MiB", bytes / (1024.0 * 1024.0));
}

// precision = bf16: how many buffers are bf16 and how many casts make them.
std::string PrecisionLine(const Plan& plan) {
  int casts = 0, parameter_casts = 0, bf16_buffers = 0;
  for (const Instruction& in : plan.instructions) {
    if (FamilyOfInstruction(in.op) != KernelFamily::kCast || in.micro_step > 0) continue;
    ++casts;
    parameter_casts += plan.buffers[in.outputs[0]].kind == BufferKind::kParameterCopy;
  }
  for (const Buffer& b : plan.buffers) bf16_buffers += b.dtype == DType::kBF16;
  return absl::StrCat("precision: bf16 (", bf16_buffers, " bf16 buffers; ",
                      casts - parameter_casts, " casts per micro-step and ", parameter_casts,
                      " per step make the matrix products' bf16 operands; f32 accumulation, "
                      "f32 master weights, gradients and optimizer state)\n");
}

// The instructions: per micro-step (they repeat) and once per step.
std::string InstructionsLine(const Plan& plan) {
  std::map<int, std::pair<int, int>> per_micro;  // micro -> (forward, backward)
  int optimizer = 0;
  std::map<std::string, int> collectives;
  for (const Instruction& in : plan.instructions) {
    if (in.phase == Phase::kForward) ++per_micro[in.micro_step].first;
    if (in.phase == Phase::kBackward) ++per_micro[in.micro_step].second;
    if (in.stream == Stream::kComm) ++collectives[in.op];
    if (FamilyOfInstruction(in.op) == KernelFamily::kOptimizer) ++optimizer;
  }
  const char* reduce = plan.zero > 0 ? "reduce_scatter" : "all_reduce";
  const bool every_micro = plan.zero_accumulate == ZeroAccumulate::kShard;
  return absl::StrCat("instructions: ", plan.instructions.size(), " (", plan.accumulate,
                      " micro-steps of 1 load_batch + ", per_micro[0].first, " forward + ",
                      per_micro[0].second, " backward; ", plan.buckets.size(), " ", reduce,
                      every_micro ? " in each; " : " in the last; ", optimizer, " optimizer",
                      plan.zero > 0
                          ? absl::StrCat(" + ", collectives["all_gather"], " all_gather")
                          : std::string(),
                      "), ", plan.num_events, " events, ", plan.buffers.size(), " buffers\n");
}

// The op table's cost rules over one rank's step.
std::string ComputeLine(const Plan& plan) {
  double flops[2] = {0, 0};  // forward, backward
  for (const Instruction& in : plan.instructions) {
    const ops::OpDef* def = ops::FindOp(in.op);
    if (def == nullptr || (in.phase != Phase::kForward && in.phase != Phase::kBackward)) {
      continue;
    }
    std::vector<ops::Shape> ins, outs;
    for (int id : in.inputs) ins.push_back(plan.buffers[id].shape);
    for (int id : in.outputs) outs.push_back(plan.buffers[id].shape);
    flops[in.phase == Phase::kBackward] += ops::EstimateCost(*def, ins, outs).flops;
  }
  return absl::StrCat("compute per rank and step: ", absl::StrFormat("%.3g", flops[0] / 1e9),
                      " GFLOP forward + ", absl::StrFormat("%.3g", flops[1] / 1e9),
                      " GFLOP backward\n");
}

// What the ZeRO stage keeps of each bucket on a rank ("" without ZeRO).
std::string ZeroNote(const Plan& plan) {
  const bool every_micro = plan.zero_accumulate == ZeroAccumulate::kShard;
  if (plan.zero == 1) {
    return absl::StrCat("; ZeRO-1: 1/", plan.world_size, " of each bucket's update per rank");
  }
  if (plan.zero == 2) {
    return absl::StrCat("; ZeRO-2: 1/", plan.world_size,
                        " of each bucket's gradient and update per rank, the "
                        "bucket freed once ",
                        every_micro ? "each micro-step's is scattered" : "scattered");
  }
  if (plan.zero == 3) {
    return absl::StrCat("; ZeRO-3: 1/", plan.world_size,
                        " of each bucket's parameters, gradient and update per "
                        "rank; the parameters all-gathered for each forward and "
                        "backward pass, ",
                        plan.zero_prefetch, " bucket(s) ahead of their first "
                        "reader, and freed after their last");
  }
  return std::string();
}

// The buckets, the searches' choices, and one line per bucket.
std::string BucketsSection(const Plan& plan) {
  std::string out = absl::StrCat("buckets: ", plan.buckets.size(), " (bucket_mb ",
                                 plan.bucket_mb, ", in ",
                                 plan.zero > 0 ? "reduce-scatter" : "all-reduce", " order",
                                 ZeroNote(plan), ")\n");
  if (!plan.bucket_choice.empty()) absl::StrAppend(&out, "  ", plan.bucket_choice, "\n");
  if (!plan.zero_accumulate_choice.empty()) {
    absl::StrAppend(&out, "  ", plan.zero_accumulate_choice, "\n");
  }
  if (!plan.zero_prefetch_choice.empty()) {
    absl::StrAppend(&out, "  ", plan.zero_prefetch_choice, "\n");
  }
  for (const Bucket& b : plan.buckets) {
    absl::StrAppend(&out, "  bucket ", b.id, ": ", Bytes(b.bytes),
                    b.shard_elems > 0 ? absl::StrCat(" (shard ", Bytes(b.shard_elems * 4), ")")
                                      : std::string(),
                    ", ", b.parameters.size(), " parameters: ",
                    absl::StrJoin(b.parameters, ", "), "\n");
  }
  return out;
}

// The bytes a rank sends per step, and in which precision.
std::string CommunicationLine(const Plan& plan) {
  return absl::StrCat("communication per rank and step: ", Bytes(BytesSentPerStep(plan)),
                      " sent (", EnumName(plan.grad_comm), " gradients",
                      plan.zero == 3 && plan.precision == Precision::kBf16
                          ? ", bf16 parameter all-gathers where no pass reads the f32 weights"
                      : plan.zero > 0 ? ", fp32 parameter all-gather"
                                      : "",
                      plan.deterministic ? ", deterministic: every rank's slots gathered" : "",
                      "; ring algorithms)\n");
}

// precision = bf16: a size against the same plan's in f32 ("" without).
std::string VersusFp32(int64_t bytes, int64_t fp32) {
  if (fp32 <= 0) return std::string();
  return absl::StrFormat(" (fp32: %s, %+.0f%%)", Bytes(fp32), 100.0 * (bytes - fp32) / fp32);
}

// repeat(..., recompute = true): the forward instructions the backward
// runs again, per micro-step.
int RecomputedInstructions(const Plan& plan) {
  int recomputed = 0;
  for (const Instruction& in : plan.instructions) {
    recomputed += absl::EndsWith(in.label, " (recompute)") && in.micro_step <= 0;
  }
  return recomputed;
}

// The memory plan of one rank, line by line.
std::string MemorySection(const Plan& plan) {
  const MemoryReport& m = plan.memory;
  std::string out = plan.memory_choice;
  const double saved =
      m.unshared_bytes > 0 ? 100.0 * (m.unshared_bytes - m.arena_bytes) / m.unshared_bytes : 0;
  absl::StrAppend(&out, "memory per rank:\n");
  absl::StrAppend(&out, "  parameters        ", Bytes(m.parameter_bytes),
                  plan.zero == 3 ? " (this rank's shards; each pass's gathers are activations)"
                                 : "",
                  "\n");
  if (m.parameter_copy_bytes > 0) {
    absl::StrAppend(&out, "  bf16 copies       ", Bytes(m.parameter_copy_bytes),
                    " (the parameters in bf16, cast once per step)\n");
  }
  absl::StrAppend(&out, "  gradients         ", Bytes(m.gradient_bytes),
                  plan.zero >= 2 ? " (this rank's shards; the buckets are activations)" : "",
                  "\n");
  absl::StrAppend(&out, "  optimizer state   ", Bytes(m.optimizer_state_bytes), " (",
                  EnumName(plan.optimizer.kind), ")\n");
  absl::StrAppend(&out, "  peak activations  ", Bytes(m.peak_activation_bytes),
                  VersusFp32(m.peak_activation_bytes, m.fp32_peak_activation_bytes), "\n");
  if (const int recomputed = RecomputedInstructions(plan); recomputed > 0) {
    absl::StrAppend(&out, "  recomputed        ", recomputed,
                    " forward instructions run again in the backward (per micro-step), "
                    "their activations not kept\n");
  }
  if (m.workspace_bytes > 0) {
    absl::StrAppend(&out, "  workspace         ", Bytes(m.workspace_bytes),
                    " (the largest; convolution and pooling scratch, in the arena)\n");
  }
  absl::StrAppend(&out, "  arena             ", Bytes(m.arena_bytes),
                  VersusFp32(m.arena_bytes, m.fp32_arena_bytes), "\n");
  if (m.bf16_staging_bytes > 0) {
    absl::StrAppend(&out, "  bf16 staging      ", Bytes(m.bf16_staging_bytes),
                    " (beside the arena: one instruction's bf16 operands as f32)\n");
  }
  absl::StrAppend(&out, "  without reuse     ", Bytes(m.unshared_bytes),
                  absl::StrFormat(" (reuse saves %.0f%%)", saved), "\n");
  return out;
}

}  // namespace

int64_t BytesSentPerStep(const Plan& plan) {
  double sent = 0;
  for (const Instruction& in : plan.instructions) {
    const cost::CollectivePayload p = cost::PayloadOf(plan, in, plan.world_size);
    if (p.kind == cost::CollectivePayload::Kind::kNone || !in.attrs.count("bucket")) continue;
    sent += cost::RingBytesSent(p, plan.world_size);
  }
  return static_cast<int64_t>(sent);
}

std::string PlanSummary(const Plan& plan) {
  std::string out;
  absl::StrAppend(&out, "plan ", plan.model, " (", plan.source, "), format v", plan.version,
                  "\n");
  absl::StrAppend(&out, "batch: global ", plan.global_batch, " = ", plan.world_size,
                  " ranks x micro_batch ", plan.micro_batch, " x accumulate ",
                  plan.accumulate, "; loss = sum / ", plan.global_batch,
                  " (mean over the global batch)\n");
  absl::StrAppend(&out, "drop_last: an epoch's last partial global batch is dropped; ",
                  plan.epochs > 0 ? absl::StrCat(plan.epochs, " epochs")
                                  : absl::StrCat(plan.steps, " steps"),
                  plan.deterministic ? "; deterministic (bit-reproducible sums)" : "",
                  "\n");
  if (plan.precision == Precision::kBf16) absl::StrAppend(&out, PrecisionLine(plan));
  absl::StrAppend(&out, InstructionsLine(plan), ComputeLine(plan), BucketsSection(plan));
  if (plan.world_size > 1) absl::StrAppend(&out, CommunicationLine(plan));
  absl::StrAppend(&out, MemorySection(plan));
  return out;
}

}  // namespace trainc
