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
//   reduce-scatter (halving- ⌈log2 n⌉ α + (n-1)/n S β  (Gloo's
//     doubling)                                         ReduceScatterHalvingDoubling)
//   all-gather (ring)        (n-1) α + (n-1)/n S β      S: the whole output
//
// A profile whose all-reduce is NCCL's (ring, tree, auto) reduce-scatters
// and all-gathers with NCCL's ring; Gloo's (whole_buffer_ring) with
// halving-doubling and ring. Under grad_comm = bf16 a gradient collective
// moves half the bytes (the parameter all-gather of ZeRO-1 stays fp32).
//
// β is defined so that nccl-tests' "busbw" is 1 / β for every collective
// (busbw = S/t · 2(n-1)/n for all-reduce, S/t · (n-1)/n for the others).
#ifndef TRAINC_COMPILER_COST_COST_MODEL_H_
#define TRAINC_COMPILER_COST_COST_MODEL_H_

#include <cstdint>

#include "compiler/plan/plan.h"
#include "compiler/cost/machine_profile.h"

namespace trainc::cost {

// The α-β formulas above, in microseconds; 0 for n <= 1.
double RingAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double TreeAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double WholeBufferRingAllReduceUs(const LinkProfile& link, int64_t n, double bytes);
double ReduceScatterUs(const LinkProfile& link, int64_t n, double bytes);
double AllGatherUs(const LinkProfile& link, int64_t n, double bytes);
double HalvingDoublingReduceScatterUs(const LinkProfile& link, int64_t n, double bytes);

// An all-reduce of `bytes` per rank with the profile's algorithm, on the
// link class for n ranks.
double AllReduceUs(const MachineProfile& profile, int64_t n, double bytes);
// A reduce-scatter (all-gather) of `bytes` in all with the library the
// profile's all-reduce algorithm names (NCCL or Gloo, see above).
double ReduceScatterUs(const MachineProfile& profile, int64_t n, double bytes);
double AllGatherUs(const MachineProfile& profile, int64_t n, double bytes);

// True for a collective: an op of category kCollective in the op table
// (all_reduce, reduce_scatter, all_gather). The plan puts these, and only
// these, on the comm stream.
bool IsCollective(const Instruction& instr);

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

// What one collective instruction of `plan` moves on `world_size` ranks:
// the one rule behind both its time (InstructionUs) and the plan
// summary's bytes on the wire (BytesSentPerStep). A bucket's all_reduce
// or reduce_scatter moves the bucket, halved under grad_comm = bf16;
// ZeRO-1's all_gather the bucket's fp32 parameter span; in deterministic
// mode both are an all-gather of every rank's `accumulate` slots, summed
// on the device after; an all_reduce without a bucket its one input
// (ZeRO-1's grad_sq).
struct CollectivePayload {
  enum class Kind { kNone, kAllReduce, kReduceScatter, kAllGather };
  Kind kind = Kind::kNone;
  double bytes = 0;         // per rank; an all-gather's: the gathered whole
  double summed_bytes = 0;  // deterministic mode: what the ordered sum reads
  bool gradients = false;   // a bucket's gradients (not a parameter or scalar)
};
CollectivePayload PayloadOf(const Plan& plan, const Instruction& instr, int64_t world_size);

// Bytes one rank sends for `p` with bandwidth-optimal ring algorithms: an
// all-reduce 2 (N - 1) / N of its bytes, a reduce-scatter (N - 1) / N, an
// all-gather (N - 1) / N of the whole.
double RingBytesSent(const CollectivePayload& p, int64_t world_size);

// The time of any instruction of `plan` when it runs on `world_size` ranks:
// a compute instruction's estimate, or a collective (what the executor
// issues for it, PayloadOf: nothing for one rank).
double InstructionUs(const Plan& plan, const Instruction& instr,
                     const MachineProfile& profile, int64_t world_size);

}  // namespace trainc::cost

#endif  // TRAINC_COMPILER_COST_COST_MODEL_H_
