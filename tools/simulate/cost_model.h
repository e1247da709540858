// What one instruction of a plan costs on a machine profile.
//
// Compute: a roofline per instruction from the op table's cost rule
// (ops::EstimateCost: FLOPs and bytes read + written, from the buffers'
// shapes), plus a fixed per-kernel overhead, corrected by the profile's
// efficiency (per op, else per op category) and calibrated scale:
//
//   t = scale[op] · (overhead + max(flops / peak, bytes / bandwidth) / efficiency)
//
// where peak is the TF32 peak for matmul, attention and convolution when
// the plan has tf32 = true.
//
// Collectives: the α-β model. With n ranks, a buffer of S bytes per rank,
// α the latency of one step and β = 1 / bus bandwidth of the link class the
// collective runs on (MachineProfile::LinkFor):
//
//   ring all-reduce          2(n-1) α + 2 (n-1)/n S β   (reduce-scatter then
//                                                       all-gather; NCCL's ring)
//   tree all-reduce          2 ⌈log2 n⌉ α + 2 S β       (pipelined double
//                                                       binary tree: up, down)
//   whole-buffer ring        (n-1) (α + S β)            (Gloo's AllreduceRing:
//                                                       the whole buffer goes
//                                                       round n-1 times)
//   auto                     the faster of ring and tree, as NCCL's tuner
//   reduce-scatter (ring)    (n-1) α + (n-1)/n S β      S: the whole input
//   all-gather (ring)        (n-1) α + (n-1)/n S β      S: the whole output
//
// β is defined so that nccl-tests' "busbw" is 1 / β for every collective
// (busbw = S/t · 2(n-1)/n for all-reduce, S/t · (n-1)/n for the others).
#ifndef TRAINC_TOOLS_SIMULATE_COST_MODEL_H_
#define TRAINC_TOOLS_SIMULATE_COST_MODEL_H_

#include <cstdint>

#include "compiler/plan/plan.h"
#include "tools/simulate/machine_profile.h"

namespace trainc::simulate {

// The α-β formulas above, in microseconds; 0 for n <= 1.
double RingAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double TreeAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double WholeBufferRingAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double ReduceScatterUs(const LinkProfile& link, int64_t n, double bytes);
double AllGatherUs(const LinkProfile& link, int64_t n, double bytes);

// An all-reduce of `bytes` per rank with the profile's algorithm, on the
// link class for n ranks.
double AllReduceUs(const MachineProfile& profile, int64_t n, double bytes);

// The model of one compute instruction, before and after the profile's
// corrections.
struct ComputeEstimate {
  double flops = 0;
  double bytes = 0;
  double roofline_us = 0;  // max(flops / peak, bytes / bandwidth)
  double us = 0;           // the formula in the header comment
};
ComputeEstimate EstimateCompute(const Plan& plan, const Instruction& instr,
                                const MachineProfile& profile);

// The time of any instruction of `plan` when it runs on `world_size` ranks:
// a compute instruction's estimate, or an all_reduce's collective (what the
// executor issues for it: nothing for one rank; in deterministic mode an
// all-gather of every slot, then their ordered sum on the comm stream).
double InstructionUs(const Plan& plan, const Instruction& instr,
                     const MachineProfile& profile, int64_t world_size);

}  // namespace trainc::simulate

#endif  // TRAINC_TOOLS_SIMULATE_COST_MODEL_H_
