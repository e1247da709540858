#include "compiler/cost/test_plan.h"

namespace trainc::cost::testing {

Plan TwoStreamPlan(const std::vector<TestCompute>& before, bool wait,
                   const std::vector<TestCompute>& after, int64_t bucket_bytes,
                   int64_t world_size) {
  Plan plan;
  plan.model = "two_stream";
  plan.world_size = world_size;
  plan.micro_batch = 1;
  plan.global_batch = world_size;
  auto add_buffer = [&](BufferKind kind, std::vector<int64_t> shape) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = "b" + std::to_string(b.id);
    b.kind = kind;
    b.shape = shape;
    b.bytes = 4 * shape[0];
    plan.buffers.push_back(b);
    return b.id;
  };
  const int x = add_buffer(BufferKind::kActivation, {1});
  const int y = add_buffer(BufferKind::kActivationGrad, {1});
  const int grads = add_buffer(BufferKind::kBucket, {bucket_bytes / 4});
  Bucket bucket;
  bucket.grad_buffer = grads;
  bucket.bytes = bucket_bytes;
  auto add = [&](const std::string& op, Stream stream, Phase phase) -> Instruction& {
    Instruction in;
    in.id = static_cast<int>(plan.instructions.size());
    in.op = op;
    in.stream = stream;
    in.phase = phase;
    in.label = op;
    plan.instructions.push_back(in);
    return plan.instructions.back();
  };
  for (const TestCompute& c : before) {
    Instruction& in = add(c.op, Stream::kCompute, c.phase);
    in.inputs = {x};
    in.outputs = {y};
  }
  if (wait && !before.empty()) {
    plan.instructions.back().record_events = {0};
    plan.num_events = 1;
  }
  Instruction& all_reduce = add("all_reduce", Stream::kComm, Phase::kComm);
  all_reduce.inputs = all_reduce.outputs = {grads};
  all_reduce.attrs["bucket"] = 0;
  if (wait && !before.empty()) all_reduce.wait_events = {0};
  bucket.all_reduce = all_reduce.id;
  plan.buckets.push_back(bucket);
  for (const TestCompute& c : after) {
    Instruction& in = add(c.op, Stream::kCompute, c.phase);
    in.inputs = {x};
    in.outputs = {y};
  }
  return plan;
}

MachineProfile UnitProfile(double alpha_us, double bandwidth_GBps) {
  MachineProfile p;
  p.name = "unit";
  p.peak_flops = p.peak_flops_tf32 = 1e30;
  p.memory_bandwidth = 1e30;
  p.kernel_overhead_us = 1;
  p.host_synchronous = true;
  p.ranks_per_node = 1024;
  p.intra = p.inter = {alpha_us, bandwidth_GBps};
  p.all_reduce = AllReduceAlgorithm::kWholeBufferRing;
  p.reduce_bandwidth = 1e12;
  return p;
}

}  // namespace trainc::cost::testing
