#include "compiler/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "compiler/ops/kernel_families.h"
#include "compiler/ops/op_table.h"

namespace trainc::cost {
namespace {

// Microseconds to move `bytes` at `GBps` (1e9 bytes/s = 1e3 bytes/us).
double TransferUs(double bytes, double GBps) { return bytes / (GBps * 1e3); }

bool UsesTensorCores(ops::OpCategory category) {
  return category == ops::OpCategory::kMatmul ||
         category == ops::OpCategory::kAttention ||
         category == ops::OpCategory::kConvolution;
}

double Lookup(const std::map<std::string, double>& m, const std::string& key,
              double fallback) {
  auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

}  // namespace

double RingAllReduceUs(const LinkProfile& link, int64_t n, double bytes) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.alpha_us +
         2.0 * (n - 1) / n * TransferUs(bytes, link.bandwidth_GBps);
}

double TreeAllReduceUs(const LinkProfile& link, int64_t n, double bytes) {
  if (n <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2.0 * depth * link.alpha_us + 2.0 * TransferUs(bytes, link.bandwidth_GBps);
}

double WholeBufferRingAllReduceUs(const LinkProfile& link, int64_t n, double bytes) {
  if (n <= 1) return 0;
  return (n - 1) * (link.alpha_us + TransferUs(bytes, link.bandwidth_GBps));
}

double ReduceScatterUs(const LinkProfile& link, int64_t n, double bytes) {
  if (n <= 1) return 0;
  return (n - 1) * link.alpha_us +
         double(n - 1) / n * TransferUs(bytes, link.bandwidth_GBps);
}

double AllGatherUs(const LinkProfile& link, int64_t n, double bytes) {
  return ReduceScatterUs(link, n, bytes);  // the same traffic, reversed
}

double HalvingDoublingReduceScatterUs(const LinkProfile& link, int64_t n, double bytes) {
  if (n <= 1) return 0;
  return std::ceil(std::log2(static_cast<double>(n))) * link.alpha_us +
         double(n - 1) / n * TransferUs(bytes, link.bandwidth_GBps);
}

double AllReduceUs(const MachineProfile& profile, int64_t n, double bytes) {
  const LinkProfile& link = profile.LinkFor(n);
  switch (profile.all_reduce) {
    case AllReduceAlgorithm::kRing: return RingAllReduceUs(link, n, bytes);
    case AllReduceAlgorithm::kTree: return TreeAllReduceUs(link, n, bytes);
    case AllReduceAlgorithm::kAuto:
      return std::min(RingAllReduceUs(link, n, bytes), TreeAllReduceUs(link, n, bytes));
    case AllReduceAlgorithm::kWholeBufferRing:
      return WholeBufferRingAllReduceUs(link, n, bytes);
  }
  return 0;
}

double ReduceScatterUs(const MachineProfile& profile, int64_t n, double bytes) {
  const LinkProfile& link = profile.LinkFor(n);
  return profile.all_reduce == AllReduceAlgorithm::kWholeBufferRing
             ? HalvingDoublingReduceScatterUs(link, n, bytes)
             : ReduceScatterUs(link, n, bytes);
}

double AllGatherUs(const MachineProfile& profile, int64_t n, double bytes) {
  return AllGatherUs(profile.LinkFor(n), n, bytes);  // a ring in both libraries
}

bool IsCollective(const Instruction& instr) {
  const ops::OpDef* def = ops::FindOp(instr.op);
  return def != nullptr && def->category == ops::OpCategory::kCollective;
}

ComputeEstimate EstimateCompute(const Plan& plan, const Instruction& instr,
                                const MachineProfile& profile) {
  ComputeEstimate e;
  const ops::OpDef* def = ops::FindOp(instr.op);
  if (def == nullptr) return e;  // plan validation rejects these first
  std::vector<ops::Shape> ins, outs;
  for (int id : instr.inputs) ins.push_back(plan.buffers[id].shape);
  for (int id : instr.outputs) outs.push_back(plan.buffers[id].shape);
  const ops::Cost cost = ops::EstimateCost(*def, ins, outs);
  e.flops = cost.flops;
  // The op table counts 4-byte elements; bf16 operands move half.
  double elements = 0, bytes = 0;
  bool bf16 = false;
  for (const std::vector<int>* ids : {&instr.inputs, &instr.outputs}) {
    for (int id : *ids) {
      const Buffer& b = plan.buffers[id];
      double n = 1;
      for (int64_t d : b.shape) n *= static_cast<double>(d);
      elements += n;
      bytes += n * static_cast<double>(DTypeBytes(b.dtype));
      bf16 |= b.dtype == DType::kBF16;
    }
  }
  e.bytes = elements > 0 ? cost.bytes * bytes / (4 * elements) : cost.bytes;
  // Matrix products of bf16 operands run at the bf16 rate (the linear ops'
  // bf16 GEMMs; attention and convolution widen theirs to f32).
  const double peak = bf16 && def->category == ops::OpCategory::kMatmul
                          ? profile.peak_flops_bf16
                      : plan.tf32 && UsesTensorCores(def->category)
                          ? profile.peak_flops_tf32
                          : profile.peak_flops;
  e.roofline_us = std::max(e.flops / peak, e.bytes / profile.memory_bandwidth) * 1e6;
  const double efficiency =
      Lookup(profile.efficiency, instr.op,
             Lookup(profile.efficiency, ops::OpCategoryName(def->category), 1.0));
  e.us = Lookup(profile.scale, instr.op, 1.0) *
         (profile.kernel_overhead_us + e.roofline_us / efficiency);
  return e;
}

CollectivePayload PayloadOf(const Plan& plan, const Instruction& instr, int64_t world_size) {
  using Kind = CollectivePayload::Kind;
  CollectivePayload p;
  if (!IsCollective(instr)) return p;
  const StepOp op = StepOpOfInstruction(instr.op);
  auto it = instr.attrs.find("bucket");
  const int b = it == instr.attrs.end() ? -1 : static_cast<int>(it->second);
  if (b < 0) {  // a step scalar summed over ranks (ZeRO-1's grad_sq)
    if (op != StepOp::kAllReduce || instr.inputs.empty()) return p;
    p.kind = Kind::kAllReduce;
    p.bytes = static_cast<double>(plan.buffers[instr.inputs[0]].bytes);
    return p;
  }
  if (b >= static_cast<int>(plan.buckets.size())) return p;
  const double bytes = static_cast<double>(plan.buckets[b].bytes);
  if (op == StepOp::kAllGather) {
    p.kind = Kind::kAllGather;
    // ZeRO-3 under bf16 gathers a bf16 span: its own size.
    const bool own = !instr.outputs.empty() && instr.outputs[0] >= 0 &&
                     instr.outputs[0] < static_cast<int>(plan.buffers.size());
    p.bytes = own ? static_cast<double>(plan.buffers[instr.outputs[0]].bytes) : bytes;
    return p;
  }
  p.gradients = true;
  const double width = plan.grad_comm == GradComm::kBf16 ? 0.5 : 1.0;
  if (!plan.deterministic) {
    p.kind = op == StepOp::kReduceScatter ? Kind::kReduceScatter : Kind::kAllReduce;
    p.bytes = bytes * width;
    return p;
  }
  // Every rank's `accumulate` slots, gathered, then summed in global order
  // (the reduce-scatter of deterministic mode is the same).
  const double gathered = static_cast<double>(world_size) * plan.accumulate * bytes;
  p.kind = Kind::kAllGather;
  p.bytes = gathered * width;
  p.summed_bytes = gathered;
  return p;
}

double RingBytesSent(const CollectivePayload& p, int64_t world_size) {
  using Kind = CollectivePayload::Kind;
  const double n = static_cast<double>(world_size);
  if (world_size <= 1) return 0;
  switch (p.kind) {
    case Kind::kAllReduce: return 2.0 * (n - 1) / n * p.bytes;
    case Kind::kReduceScatter:
    case Kind::kAllGather: return (n - 1) / n * p.bytes;
    case Kind::kNone: break;
  }
  return 0;
}

double InstructionUs(const Plan& plan, const Instruction& instr,
                     const MachineProfile& profile, int64_t world_size) {
  using Kind = CollectivePayload::Kind;
  if (!IsCollective(instr)) return EstimateCompute(plan, instr, profile).us;
  const CollectivePayload p = PayloadOf(plan, instr, world_size);
  if (p.summed_bytes > 0) {  // deterministic: gather, then the ordered sum
    if (world_size <= 1 && plan.accumulate <= 1) return 0;
    return AllGatherUs(profile, world_size, p.bytes) +
           p.summed_bytes / profile.reduce_bandwidth * 1e6;
  }
  switch (p.kind) {
    case Kind::kAllReduce: return AllReduceUs(profile, world_size, p.bytes);
    case Kind::kReduceScatter: return ReduceScatterUs(profile, world_size, p.bytes);
    case Kind::kAllGather: return AllGatherUs(profile, world_size, p.bytes);
    case Kind::kNone: break;
  }
  return 0;
}

}  // namespace trainc::cost
