#include "compiler/cost/cost_model.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "compiler/cost/test_plan.h"

namespace trainc::cost {
namespace {

// α = 2 us, 1 GB/s = 1000 bytes/us, S = 1 MB: S β = 1000 us.
const LinkProfile kLink{/*alpha_us=*/2, /*bandwidth_GBps=*/1};
constexpr double kBytes = 1e6;

TEST(CollectiveCostTest, RingAllReduceIsReduceScatterThenAllGather) {
  // 2 (n-1) α + 2 (n-1)/n S β = 2·3·2 + 2·(3/4)·1000.
  EXPECT_DOUBLE_EQ(RingAllReduceUs(kLink, 4, kBytes), 12 + 1500);
  EXPECT_DOUBLE_EQ(RingAllReduceUs(kLink, 4, kBytes),
                   ReduceScatterUs(kLink, 4, kBytes) + AllGatherUs(kLink, 4, kBytes));
}

TEST(CollectiveCostTest, TreeAllReducePaysLogStepsAndTheWholeBufferTwice) {
  // 2 ⌈log2 n⌉ α + 2 S β.
  EXPECT_DOUBLE_EQ(TreeAllReduceUs(kLink, 4, kBytes), 2 * 2 * 2 + 2000);
  EXPECT_DOUBLE_EQ(TreeAllReduceUs(kLink, 5, kBytes), 2 * 3 * 2 + 2000);
  EXPECT_DOUBLE_EQ(TreeAllReduceUs(kLink, 1024, kBytes), 2 * 10 * 2 + 2000);
}

TEST(CollectiveCostTest, WholeBufferRingSendsEverythingEachRound) {
  // (n-1) (α + S β).
  EXPECT_DOUBLE_EQ(WholeBufferRingAllReduceUs(kLink, 4, kBytes), 3 * (2 + 1000));
}

TEST(CollectiveCostTest, ReduceScatterAndAllGather) {
  // (n-1) α + (n-1)/n S β.
  EXPECT_DOUBLE_EQ(ReduceScatterUs(kLink, 4, kBytes), 6 + 750);
  EXPECT_DOUBLE_EQ(AllGatherUs(kLink, 8, kBytes), 14 + 875);
}

TEST(CollectiveCostTest, OneRankCostsNothing) {
  EXPECT_EQ(RingAllReduceUs(kLink, 1, kBytes), 0);
  EXPECT_EQ(TreeAllReduceUs(kLink, 1, kBytes), 0);
  EXPECT_EQ(WholeBufferRingAllReduceUs(kLink, 1, kBytes), 0);
  EXPECT_EQ(ReduceScatterUs(kLink, 1, kBytes), 0);
}

TEST(CollectiveCostTest, AutoPicksTheFasterAndTheLinkFollowsTheNodeSize) {
  MachineProfile p = testing::UnitProfile(0, 1);
  p.ranks_per_node = 8;
  p.intra = {1, 100};   // 100 GB/s: 1 MB takes 10 us
  p.inter = {10, 10};   // 10 GB/s: 1 MB takes 100 us
  p.all_reduce = AllReduceAlgorithm::kAuto;
  // 8 ranks: intra. Ring 14 + 2·(7/8)·10 = 31.5; tree 6 + 20 = 26.
  EXPECT_DOUBLE_EQ(AllReduceUs(p, 8, kBytes), 26);
  // 1024 ranks: inter. Ring 2·1023·10 + 2·(1023/1024)·100; tree 200 + 200.
  EXPECT_DOUBLE_EQ(AllReduceUs(p, 1024, kBytes), 400);
  // 9 ranks span two nodes: the inter-node link.
  p.all_reduce = AllReduceAlgorithm::kRing;
  EXPECT_DOUBLE_EQ(AllReduceUs(p, 9, kBytes), RingAllReduceUs(p.inter, 9, kBytes));
}

// linear x[64, 784] w[256, 784] b[256] -> y[64, 256], every operand of
// `dtype`: buffers 0..3, and the instruction.
std::pair<Plan, Instruction> LinearPlan(DType dtype) {
  Plan plan;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{64, 784}, {256, 784}, {256}, {64, 256}}) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.shape = shape;
    b.dtype = dtype;
    plan.buffers.push_back(b);
  }
  Instruction in;
  in.op = "linear";
  in.inputs = {0, 1, 2};
  in.outputs = {3};
  return {plan, in};
}

TEST(ComputeCostTest, RooflineWithOverheadEfficiencyAndScale) {
  auto [plan, in] = LinearPlan(DType::kF32);
  MachineProfile p = testing::UnitProfile(0, 1);
  p.peak_flops = p.peak_flops_tf32 = 1e12;  // 1 FLOP/ps
  p.memory_bandwidth = 1e11;
  p.kernel_overhead_us = 2;
  const double flops = 2.0 * 64 * 784 * 256;                       // 25.69 MFLOP
  const double bytes = 4.0 * (64 * 784 + 256 * 784 + 256 + 64 * 256);  // 1.07 MB
  ComputeEstimate e = EstimateCompute(plan, in, p);
  EXPECT_DOUBLE_EQ(e.flops, flops);
  EXPECT_DOUBLE_EQ(e.bytes, bytes);
  EXPECT_DOUBLE_EQ(e.roofline_us, flops / 1e6);  // compute-bound: 25.69 us
  EXPECT_DOUBLE_EQ(e.us, 2 + flops / 1e6);

  p.efficiency["matmul"] = 0.5;
  EXPECT_DOUBLE_EQ(EstimateCompute(plan, in, p).us, 2 + 2 * flops / 1e6);
  p.efficiency["linear"] = 0.25;  // the op's own key wins over its category
  EXPECT_DOUBLE_EQ(EstimateCompute(plan, in, p).us, 2 + 4 * flops / 1e6);
  p.scale["linear"] = 3;
  EXPECT_DOUBLE_EQ(EstimateCompute(plan, in, p).us, 3 * (2 + 4 * flops / 1e6));

  p.memory_bandwidth = 1e10;  // now memory-bound: 107 us
  p.efficiency.clear();
  p.scale.clear();
  EXPECT_DOUBLE_EQ(EstimateCompute(plan, in, p).roofline_us, bytes / 1e4);
}

TEST(ComputeCostTest, Bf16OperandsMoveHalfTheBytesAtTheBf16Rate) {
  auto [plan, in] = LinearPlan(DType::kBF16);
  MachineProfile p = testing::UnitProfile(0, 1);
  p.peak_flops = p.peak_flops_tf32 = 1e12;
  p.peak_flops_bf16 = 4e12;
  p.memory_bandwidth = 1e11;
  p.kernel_overhead_us = 0;
  const double flops = 2.0 * 64 * 784 * 256;
  const double bytes = 2.0 * (64 * 784 + 256 * 784 + 256 + 64 * 256);
  const ComputeEstimate e = EstimateCompute(plan, in, p);
  EXPECT_DOUBLE_EQ(e.bytes, bytes);
  EXPECT_DOUBLE_EQ(e.roofline_us, flops / 4e6);
  // A cast reads f32 and writes bf16: 6 bytes an element.
  plan.buffers[0].dtype = DType::kF32;
  in.op = "cast";
  in.inputs = {0};
  in.outputs = {3};
  plan.buffers[3].shape = {64, 784};
  EXPECT_DOUBLE_EQ(EstimateCompute(plan, in, p).bytes, 6.0 * 64 * 784);
}

TEST(ComputeCostTest, AllReduceInstructionFollowsWorldAndDeterminism) {
  Plan plan = testing::TwoStreamPlan({{"relu"}}, true, {}, 1000, 2);
  MachineProfile p = testing::UnitProfile(/*alpha_us=*/49, /*bandwidth_GBps=*/1);
  const Instruction& all_reduce = plan.instructions[1];
  EXPECT_DOUBLE_EQ(InstructionUs(plan, all_reduce, p, 2), 50);  // α + S β
  EXPECT_DOUBLE_EQ(InstructionUs(plan, all_reduce, p, 1), 0);
  EXPECT_DOUBLE_EQ(InstructionUs(plan, all_reduce, p, 3), 2 * 50);
  // Deterministic: gather 2 ranks x 2 slots of 1000 bytes (ring all-gather:
  // α + (1/2) 4000 β = 49 + 2), then sum 4000 bytes at 1e9 B/s (4 us).
  plan.deterministic = true;
  plan.accumulate = 2;
  p.reduce_bandwidth = 1e9;
  EXPECT_DOUBLE_EQ(InstructionUs(plan, all_reduce, p, 2), 49 + 2 + 4);
}

TEST(ComputeCostTest, ZeroCollectivesAndBf16Gradients) {
  // One bucket of 1000 bytes on 2 ranks, α 49 us, 1 GB/s (1 us per 1000 B).
  Plan plan = testing::TwoStreamPlan({{"relu"}}, true, {}, 1000, 2);
  MachineProfile gloo = testing::UnitProfile(/*alpha_us=*/49, /*bandwidth_GBps=*/1);
  Instruction in = plan.instructions[1];
  // Gloo's halving-doubling reduce-scatter: ⌈log2 2⌉ α + (1/2) S β.
  in.op = "reduce_scatter";
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 2), 49 + 0.5);
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 4), 2 * 49 + 0.75);
  MachineProfile nccl = gloo;
  nccl.all_reduce = AllReduceAlgorithm::kRing;  // NCCL: a ring, (n-1) α
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, nccl, 4), 3 * 49 + 0.75);
  // The parameter all-gather: a ring in both, fp32 whatever grad_comm.
  in.op = "all_gather";
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 4), 3 * 49 + 0.75);
  plan.grad_comm = GradComm::kBf16;
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 4), 3 * 49 + 0.75);
  // bf16 gradients: half the bytes through the reduce-scatter and the
  // all-reduce.
  in.op = "reduce_scatter";
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 2), 49 + 0.25);
  in.op = "all_reduce";
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 2), 49 + 0.5);
  // Without a bucket: the one scalar it sums (grad_sq), fp32.
  in.attrs.clear();
  plan.buffers[in.inputs[0]].bytes = 4;
  EXPECT_DOUBLE_EQ(InstructionUs(plan, in, gloo, 2), 49 + 0.004);
  EXPECT_TRUE(IsCollective(in));
  EXPECT_FALSE(IsCollective(plan.instructions[0]));
}

}  // namespace
}  // namespace trainc::cost
