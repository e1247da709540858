// A machine profile: what the cost model knows about one kind of machine.
//
// A profile is a text file of `key = value` lines; `#` starts a comment
// (sources go there: datasheets, nccl-tests figures). Keys and their units:
//
//   name                          a label for tables
//   compute.peak_flops            FLOP/s of one device (f32)
//   compute.peak_flops_tf32       FLOP/s of matmul-like ops when the plan has
//                                 tf32 = true (default: compute.peak_flops)
//   compute.peak_flops_bf16       FLOP/s of a matrix product of bf16
//                                 operands (precision = bf16; default:
//                                 compute.peak_flops)
//   compute.memory_bandwidth      bytes/s of one device's memory
//   compute.kernel_overhead_us    fixed cost of every compute instruction
//   compute.host_synchronous      true: the host thread runs each compute
//                                 instruction itself (the CPU device), so it
//                                 issues nothing else meanwhile; false: the
//                                 host enqueues and runs ahead (CUDA streams)
//   compute.step_overhead_us      host time between two steps (loss read,
//                                 learning rate, logging)
//   compute.rank_imbalance        the slowest rank's compute takes (1 + this)
//                                 times the model's (default 0; see
//                                 simulator.h)
//   compute.comm_contention       while its comm stream moves data, a rank's
//                                 compute runs 1 + this times slower (they
//                                 share cores on a CPU, SMs on a GPU;
//                                 default 0)
//   efficiency.<kind>             fraction of the roofline an op reaches;
//                                 <kind> is an op ("linear_grad_params") or
//                                 an op category ("matmul", "elementwise",
//                                 ...; ops::OpCategoryName); an op's own key
//                                 wins over its category's, default 1
//   scale.<op>                    measured / modelled time of an op (what
//                                 --calibrate writes), default 1
//   network.ranks_per_node        ranks that share the fast link
//   network.intra.alpha_us        latency of one step of a collective within
//   network.intra.bandwidth_GBps  a node, and its bus bandwidth in 1e9 B/s
//                                 (nccl-tests' busbw: β = 1 / bandwidth)
//   network.inter.alpha_us        the same once a collective spans nodes
//   network.inter.bandwidth_GBps
//   network.all_reduce            ring | tree | auto | whole_buffer_ring
//                                 (cost_model.h has the formulas)
//   network.reduce_bandwidth      bytes/s at which the comm stream sums
//                                 (deterministic mode's ordered sum)
//
// Every numeric key must be present except the ones with a default above.
#ifndef TRAINC_COMPILER_COST_MACHINE_PROFILE_H_
#define TRAINC_COMPILER_COST_MACHINE_PROFILE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace trainc::cost {

enum class AllReduceAlgorithm { kRing, kTree, kAuto, kWholeBufferRing };
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);

// The α-β parameters of one class of link.
struct LinkProfile {
  double alpha_us = 0;        // per step of the collective
  double bandwidth_GBps = 0;  // bus bandwidth, 1e9 bytes/s
};

struct MachineProfile {
  std::string name;
  double peak_flops = 0;
  double peak_flops_tf32 = 0;
  double peak_flops_bf16 = 0;
  double memory_bandwidth = 0;
  double kernel_overhead_us = 0;
  bool host_synchronous = false;
  double step_overhead_us = 0;
  double rank_imbalance = 0;
  double comm_contention = 0;
  std::map<std::string, double> efficiency;  // op or category -> fraction
  std::map<std::string, double> scale;       // op -> measured / modelled

  int ranks_per_node = 1;
  LinkProfile intra;
  LinkProfile inter;
  AllReduceAlgorithm all_reduce = AllReduceAlgorithm::kRing;
  double reduce_bandwidth = 0;

  // The link class a collective over `world_size` ranks runs on.
  const LinkProfile& LinkFor(int64_t world_size) const {
    return world_size <= ranks_per_node ? intra : inter;
  }
};

// Parses profile text; errors are InvalidArgument and start with
// "<source_name>:<line>: " (or "<source_name>: " for a missing key).
absl::StatusOr<MachineProfile> ParseMachineProfile(const std::string& text,
                                                   const std::string& source_name);

// OK when `path` is a readable regular file; else an error whose message
// is the reason alone ("it is a directory", "it is not a regular file (a
// pipe or a device?)", or the system's "No such file or directory"), for
// the caller to name the path as it was given. `train`'s checker of
// `machine =` and `--machine` and ReadMachineProfile share it, so every
// tool refuses a folder rather than reading it as an empty profile.
absl::Status CheckProfileFile(const std::string& path);

// Reads and parses a profile file; errors name the file ("cannot read the
// machine profile 'PATH': REASON", REASON from CheckProfileFile).
absl::StatusOr<MachineProfile> ReadMachineProfile(const std::string& path);

// The profile as text that ParseMachineProfile reads back to the same
// values; `header` is written first as comment lines.
std::string FormatMachineProfile(const MachineProfile& profile,
                                 const std::string& header);

}  // namespace trainc::cost

#endif  // TRAINC_COMPILER_COST_MACHINE_PROFILE_H_
