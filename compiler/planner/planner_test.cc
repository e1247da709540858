// Structure of built plans: micro-steps, accumulate flags, streams and
// events, deterministic slots, summary and errors.
#include "compiler/planner/planner.h"

#include <map>
#include <string>

#include "compiler/cost/bundled_profiles.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan_io.h"
#include "compiler/planner/testing/specs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

bool WritesKind(const Plan& plan, const Instruction& in, BufferKind kind) {
  for (int id : in.outputs) {
    if (plan.buffers[id].kind == kind) return true;
  }
  return false;
}

TEST(BuildPlan, MicroStepsThenReducesThenOptimizer) {
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.bucket_mb = 0;  // six buckets
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(ValidatePlan(*plan).ok());
  EXPECT_EQ(plan->accumulate, 2);
  int loads = 0, optimizers = 0;
  for (const Instruction& in : plan->instructions) {
    if (in.op == "load_batch") {
      EXPECT_EQ(in.attrs.at("micro"), loads);
      EXPECT_EQ(in.micro_step, loads++);
    }
    if (in.op == "all_reduce") {
      EXPECT_EQ(in.micro_step, 1);  // only in the last micro-step
      EXPECT_EQ(in.stream, Stream::kComm);
      // Issued right after the compute instruction it waits for (other
      // all-reduces completed by the same instruction may come between).
      int before = in.id - 1;
      while (plan->instructions[before].op == "all_reduce") --before;
      const Instruction& ready = plan->instructions[before];
      ASSERT_EQ(in.wait_events.size(), 1u);
      EXPECT_THAT(ready.record_events, ::testing::Contains(in.wait_events[0]));
    }
    if (in.op == "optimizer") {
      ++optimizers;
      EXPECT_EQ(in.stream, Stream::kCompute);
      const Bucket& b = plan->buckets[static_cast<int>(in.attrs.at("bucket"))];
      EXPECT_EQ(in.wait_events, plan->instructions[b.all_reduce].record_events);
      EXPECT_GT(in.id, b.all_reduce);
    }
    if (WritesKind(*plan, in, BufferKind::kGradient)) {
      EXPECT_EQ(in.attrs.at("accumulate"), in.micro_step == 0 ? 0 : 1) << in.label;
    }
    if (in.op == "cross_entropy_grad") {
      EXPECT_EQ(in.attrs.at("scale"), 1.0 / 256);
    }
    // The first layer's input gradient is never computed.
    EXPECT_NE(in.label, "grad/image = linear_grad_input");
  }
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(optimizers, 6);
  EXPECT_EQ(plan->buckets.size(), 6u);
  EXPECT_EQ(plan->num_events, 12);
  for (const Bucket& b : plan->buckets) {
    EXPECT_THAT(plan->instructions[b.ready_after].record_events,
                ::testing::Contains(plan->instructions[b.all_reduce].wait_events[0]));
  }
}

TEST(BuildPlan, DeterministicModeWritesSlots) {
  TrainSpec spec = testing::MlpSpec(8, {6}, 3, 2, 4, 3);
  spec.train.deterministic = true;
  spec.train.optimizer.decay_all = true;  // one bucket
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const Bucket& bucket = plan->buckets[0];
  EXPECT_EQ(plan->buffers[bucket.grad_buffer].bytes, 3 * bucket.bytes);
  for (const Instruction& in : plan->instructions) {
    if (!WritesKind(*plan, in, BufferKind::kGradient)) continue;
    EXPECT_EQ(in.attrs.at("accumulate"), 0);
    for (int id : in.outputs) {
      const Buffer& g = plan->buffers[id];
      const Buffer& slot0 = plan->buffers[bucket.grad_buffer];
      // Slot k of this micro-step, at the same place within its slot.
      EXPECT_EQ((g.offset - slot0.offset) / bucket.bytes, in.micro_step) << g.name;
    }
  }
}

TEST(BuildPlan, WorldOfOneStillReduces) {
  TrainSpec spec = testing::MlpSpec(4, {3}, 3, 1, 2, 1);
  spec.train.optimizer.decay_all = true;  // one bucket
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 1u);
  EXPECT_EQ(plan->instructions[plan->buckets[0].all_reduce].op, "all_reduce");
}

TEST(BuildPlan, ResidualAccumulatesIntoSharedGradient) {
  absl::StatusOr<Plan> plan = BuildPlan(testing::ResidualSpec(6, 4, 3, 1, 2, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  // h feeds both layernorm and add: two contributions to grad/h.
  std::vector<double> flags;
  for (const Instruction& in : plan->instructions) {
    if (in.outputs.size() == 1 && plan->buffers[in.outputs[0]].name == "grad/h") {
      flags.push_back(in.attrs.at("accumulate"));
    }
  }
  EXPECT_EQ(flags, (std::vector<double>{0, 1}));
}

TEST(BuildPlan, MseTargetGetsNoGradient) {
  absl::StatusOr<Plan> plan = BuildPlan(testing::AutoencoderSpec(6, 3, 1, 2, 1));
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Buffer& b : plan->buffers) EXPECT_NE(b.name, "grad/x");
}

TEST(BuildPlan, UnusedParameterKeepsABucketSlot) {
  testing::SpecBuilder b("unused");
  b.Input("x", {4});
  b.Label("y", ElementType::kI32, {3});
  b.Linear("side", "x", 5);  // never reaches the loss
  b.Linear("logits", "x", 3);
  b.CrossEntropy("loss", "logits", "y");
  TrainSpec spec = b.Build(1, 2, 2);
  spec.train.bucket_mb = 0;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->buckets.size(), 4u);
  EXPECT_EQ(plan->buckets[3].parameters[0], "side.bias");
  for (const Instruction& in : plan->instructions) EXPECT_NE(in.label, "side = linear");
}

TEST(BuildPlan, RejectsInconsistentBatch) {
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.global_batch = 100;
  EXPECT_THAT(BuildPlan(spec).status().message(), HasSubstr("global_batch 100"));
}

TEST(BuildPlan, SgdWithMomentumHasOneStateSpan) {
  TrainSpec spec = testing::MlpSpec(4, {3}, 3, 1, 2, 1);
  spec.train.optimizer.kind = OptimizerKind::kSgd;
  spec.train.optimizer.momentum = 0.9;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->buckets[0].state_spans.size(), 1u);
  EXPECT_EQ(plan->optimizer.kind, OptimizerKind::kSgd);
  spec.train.optimizer.momentum = 0;
  plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->buckets[0].state_spans.empty());
}

TEST(PlanningProfile, EachDevicesDefaultIsABundledProfile) {
  // train (--device) and viz (the device a trace records) both ask this.
  EXPECT_STREQ(DefaultMachineOfDevice("cuda"), "h100_nvlink_ib");
  EXPECT_STREQ(DefaultMachineOfDevice("cpu"), kDefaultMachine);
  EXPECT_STREQ(DefaultMachineOfDevice(""), kDefaultMachine);  // a trace without a device
  for (const char* device : {"cpu", "cuda"}) {
    EXPECT_TRUE(cost::LoadMachineProfile(DefaultMachineOfDevice(device)).ok()) << device;
  }
}

TEST(PlanSummary, SaysWhatMatters) {
  absl::StatusOr<Plan> plan = BuildPlan(testing::FashionMlpSpec());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string s = PlanSummary(*plan);
  EXPECT_THAT(s, HasSubstr("global 256 = 2 ranks x micro_batch 64 x accumulate 2"));
  EXPECT_THAT(s, HasSubstr("drop_last: an epoch's last partial global batch is dropped"));
  // The loss and its gradient are one forward instruction, and so is each
  // hidden layer's linear and relu (fusion).
  EXPECT_THAT(s, HasSubstr("1 load_batch + 4 forward + 7 backward"));
  // Weight decay applies to matrices only: the biases get a bucket of their
  // own, ready (and reduced) last.
  EXPECT_THAT(s, HasSubstr("bucket 0: 917.0 KiB, 3 parameters: logits.weight"));
  EXPECT_THAT(s, HasSubstr("bucket 1: 1.6 KiB, 3 parameters: logits.bias"));
  EXPECT_THAT(s, HasSubstr("without reuse"));
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

TEST(BuildPlan, ClippingSumsEveryReducedBucketBeforeAnyOptimizer) {
  TrainSpec spec = testing::FashionMlpSpec();
  spec.train.bucket_mb = 0.1;
  spec.train.clip_grad_norm = 1.0;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->buckets.size(), 2u);
  int sums = 0, last_sum = -1, first_optimizer = -1;
  for (const Instruction& in : plan->instructions) {
    if (in.op == "sum_squares") {
      const int b = static_cast<int>(in.attrs.at("bucket"));
      EXPECT_EQ(b, sums) << "in bucket order";
      EXPECT_EQ(in.attrs.at("accumulate"), b > 0 ? 1 : 0);
      EXPECT_EQ(in.inputs[0], plan->buckets[b].grad_buffer);
      // After that bucket's all-reduce, whatever stream order says.
      EXPECT_THAT(in.wait_events,
                  ::testing::Contains(plan->instructions[plan->buckets[b].all_reduce]
                                          .record_events[0]));
      ++sums;
      last_sum = in.id;
    }
    if (in.op == "optimizer") {
      if (first_optimizer < 0) first_optimizer = in.id;
      EXPECT_EQ(in.attrs.at("clip"), 1.0);
      EXPECT_EQ(plan->buffers[in.inputs.back()].name, "grad_sq");
    }
  }
  EXPECT_EQ(sums, static_cast<int>(plan->buckets.size()));
  EXPECT_LT(last_sum, first_optimizer) << "no optimizer before the last sum";
  EXPECT_TRUE(ValidatePlan(*plan).ok());
}

TEST(BuildPlan, Bf16CastsParametersOncePerStepAndKeepsStateF32) {
  TrainSpec spec = testing::ResidualSpec(5, 4, 3, 1, 2, /*accumulate=*/2);
  spec.train.precision = Precision::kBf16;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->precision, Precision::kBf16);
  int parameter_casts = 0, activation_casts[2] = {0, 0};
  for (const Instruction& in : plan->instructions) {
    if (in.op != "cast") continue;
    const Buffer& from = plan->buffers[in.inputs[0]];
    const Buffer& to = plan->buffers[in.outputs[0]];
    EXPECT_EQ(to.dtype, DType::kBF16) << in.label;
    if (from.kind == BufferKind::kParameter) {
      EXPECT_EQ(to.kind, BufferKind::kParameterCopy);
      EXPECT_EQ(in.micro_step, 0) << "once per step: " << in.label;
      ++parameter_casts;
    } else {
      ++activation_casts[in.micro_step];
    }
  }
  EXPECT_EQ(parameter_casts, 6);  // three linears' weights and biases
  EXPECT_EQ(activation_casts[0], activation_casts[1]);  // x and r, each micro-step
  EXPECT_EQ(activation_casts[0], 2);
  for (const Buffer& b : plan->buffers) {
    const bool may_be_bf16 = b.kind == BufferKind::kActivation ||
                             b.kind == BufferKind::kActivationGrad ||
                             b.kind == BufferKind::kParameterCopy;
    if (!may_be_bf16) {
      EXPECT_NE(b.dtype, DType::kBF16) << b.name;
    }
  }
  const MemoryReport& m = plan->memory;
  EXPECT_GT(m.parameter_copy_bytes, 0);
  EXPECT_LE(m.parameter_copy_bytes, m.parameter_bytes);
  EXPECT_GT(m.fp32_peak_activation_bytes, 0);
  EXPECT_GT(m.fp32_arena_bytes, 0);
  // The plan file carries all of it.
  absl::StatusOr<Plan> back = PlanFromText(PlanToText(*plan), "bf16.plan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(PlanToText(*back), PlanToText(*plan));
  EXPECT_THAT(PlanSummary(*plan), HasSubstr("precision: bf16"));
  // Validation keeps bf16 off persistent state.
  Plan bad = *plan;
  bad.buffers[bad.parameter_buffers[0]].dtype = DType::kBF16;
  bad.buffers[bad.parameter_buffers[0]].bytes /= 2;
  EXPECT_THAT(ValidatePlan(bad).message(), HasSubstr("a bf16 parameter"));
  bad = *plan;
  bad.precision = Precision::kFp32;
  EXPECT_THAT(ValidatePlan(bad).message(), HasSubstr("in a plan of precision fp32"));
}

// The backend says how much bf16 staging it keeps (the CUDA device: only
// for operands its kernels do not read as bf16); the memory report, the
// summary and the memory search then count that, asked once per plan.
TEST(BuildPlan, Bf16StagingIsTheBackendsWhenItSays) {
  TrainSpec spec = testing::ResidualSpec(5, 4, 3, 1, 2, /*accumulate=*/2);
  spec.train.precision = Precision::kBf16;
  absl::StatusOr<Plan> all_staged = BuildPlan(spec);
  ASSERT_TRUE(all_staged.ok()) << all_staged.status();
  EXPECT_GT(all_staged->memory.bf16_staging_bytes, 0);
  EXPECT_THAT(PlanSummary(*all_staged), HasSubstr("bf16 staging"));
  PlanOptions options;
  int asked = 0;
  options.bf16_staging = [&asked](const Plan& plan) -> absl::StatusOr<int64_t> {
    ++asked;
    EXPECT_TRUE(ValidatePlan(plan).ok());  // complete when asked
    return 0;
  };
  absl::StatusOr<Plan> native = BuildPlan(spec, options);
  ASSERT_TRUE(native.ok()) << native.status();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(native->memory.bf16_staging_bytes, 0);
  EXPECT_THAT(PlanSummary(*native), Not(HasSubstr("bf16 staging")));
  // fp32 plans have nothing to stage: the backend is not asked.
  spec.train.precision = Precision::kFp32;
  ASSERT_TRUE(BuildPlan(spec, options).ok());
  EXPECT_EQ(asked, 1);
  // Its error is the plan's.
  spec.train.precision = Precision::kBf16;
  options.bf16_staging = [](const Plan&) -> absl::StatusOr<int64_t> {
    return absl::UnavailableError("no such backend");
  };
  EXPECT_THAT(BuildPlan(spec, options).status().message(), HasSubstr("no such backend"));
}

TEST(BuildPlan, ZeroGatherInNextForwardGathersFirstAndWaitsAtTheFirstReader) {
  TrainSpec spec = testing::FashionMlpSpec();  // 2 ranks
  spec.train.bucket_mb = 0.1;
  spec.train.zero = 1;
  spec.train.zero_gather = ZeroGather::kNextForward;
  absl::StatusOr<Plan> plan = BuildPlan(spec);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int buckets = static_cast<int>(plan->buckets.size());
  ASSERT_GE(buckets, 2);
  // The all-gathers open the step; nothing else gathers.
  int gathers = 0;
  for (const Instruction& in : plan->instructions) {
    if (in.op != "all_gather") continue;
    EXPECT_EQ(in.id, gathers) << in.label;
    EXPECT_EQ(plan->buckets[static_cast<int>(in.attrs.at("bucket"))].all_gather, in.id);
    ++gathers;
  }
  EXPECT_EQ(gathers, buckets);
  // Each bucket's gather event is awaited once, by the first instruction
  // reading one of its parameters, in micro-step 0.
  std::map<int, int> waited;  // event -> instruction
  for (const Instruction& in : plan->instructions) {
    for (int e : in.wait_events) {
      if (e < buckets) waited[e] = in.id;
    }
  }
  EXPECT_EQ(static_cast<int>(waited.size()), buckets);
  for (const auto& [event, id] : waited) {
    const Instruction& reader = plan->instructions[id];
    EXPECT_EQ(reader.micro_step, 0);
    const Bucket& b = plan->buckets[static_cast<int>(plan->instructions[event].attrs.at("bucket"))];
    bool reads_it = false;
    for (int in : reader.inputs) {
      const Buffer& buf = plan->buffers[in];
      const Buffer& span = plan->buffers[b.param_span];
      reads_it |= buf.kind == BufferKind::kParameter && buf.offset >= span.offset &&
                  buf.offset < span.offset + span.bytes;
    }
    EXPECT_TRUE(reads_it) << reader.label;
    for (int i = buckets; i < id; ++i) {  // no earlier reader of the bucket
      for (int in : plan->instructions[i].inputs) {
        const Buffer& buf = plan->buffers[in];
        const Buffer& span = plan->buffers[b.param_span];
        EXPECT_FALSE(buf.kind == BufferKind::kParameter && buf.offset >= span.offset &&
                     buf.offset < span.offset + span.bytes)
            << plan->instructions[i].label;
      }
    }
  }
  EXPECT_TRUE(ValidatePlan(*plan).ok());
  absl::StatusOr<Plan> back = PlanFromText(PlanToText(*plan), "nf.plan");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->zero_gather, ZeroGather::kNextForward);
}

TEST(BytesSentPerStep, FollowsTheCollectivesOnTheWire) {
  // 2 ranks, ring algorithms: an all-reduce sends the bucket once (2 x
  // 1/2), a reduce-scatter or all-gather half of it; bf16 halves only the
  // gradients; deterministic mode gathers both of the other rank's slots.
  TrainSpec spec = testing::FashionMlpSpec();
  int64_t buckets = 0;
  auto sent = [&](int zero, GradComm grad_comm, bool deterministic) {
    spec.train.zero = zero;
    spec.train.grad_comm = grad_comm;
    spec.train.deterministic = deterministic;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    EXPECT_TRUE(plan.ok()) << plan.status();
    buckets = 0;
    for (const Bucket& b : plan->buckets) buckets += b.bytes;
    return BytesSentPerStep(*plan);
  };
  // (Each plan's own buckets: ZeRO-1 pads them to whole shards.)
  int64_t got = sent(0, GradComm::kFp32, false);
  EXPECT_EQ(got, buckets);
  got = sent(0, GradComm::kBf16, false);
  EXPECT_EQ(got, buckets / 2);
  got = sent(1, GradComm::kFp32, false);
  EXPECT_EQ(got, buckets);  // 1/2 reduce-scatter + 1/2 all-gather
  got = sent(1, GradComm::kBf16, false);
  EXPECT_EQ(got, buckets / 4 + buckets / 2);
  got = sent(0, GradComm::kFp32, true);
  EXPECT_EQ(got, spec.train.accumulate * buckets);
  spec.train.gpus = 1;
  spec.train.global_batch = spec.train.micro_batch * spec.train.accumulate;
  EXPECT_EQ(sent(0, GradComm::kFp32, false), 0);
}

// A tied weight gets its gradient twice (the head's linear, then the
// embedding, last in backward): its bucket is ready only after the second,
// in the last micro-step. Checked as the rule for every bucket: ready_after
// is the last instruction of the last micro-step writing any of its
// gradients, whatever the bucket size.
TEST(PlannerTest, EveryBucketWaitsForItsLastGradientTiedWeightsToo) {
  constexpr char kTiedLm[] = R"(
model lm {
  const ctx = 8, width = 16
  input  tokens: i32[ctx]
  label  next:   i32[ctx]
  wte    = embedding(tokens, 256, width)
  h      = gelu(linear(wte, width))
  logits = linear(h, 256, weight = wte.weight, bias = false)
  loss   = cross_entropy(logits, next)
}
data { train = text("corpus.txt") }
train { gpus = 2  micro_batch = 2  accumulate = 2  steps = 1  optimizer = sgd(lr = 0.1) }
)";
  CompileOptions model_only;
  model_only.read_data = false;
  const FrontendResult compiled = CompileSource(kTiedLm, "tied.train", {}, model_only);
  ASSERT_TRUE(compiled.spec) << FormatDiagnostics(compiled.diagnostics, compiled.source);
  for (double mb : {0.0, 0.001, 25.0}) {
    TrainSpec spec = *compiled.spec;
    spec.train.bucket_mb = mb;
    absl::StatusOr<Plan> plan = BuildPlan(spec);
    ASSERT_TRUE(plan.ok()) << plan.status();
    bool saw_tied = false;
    for (const Bucket& bucket : plan->buckets) {
      const Buffer& span = plan->buffers[bucket.grad_buffer];
      int last = -1, writes = 0;
      for (const Instruction& in : plan->instructions) {
        if (in.micro_step != plan->accumulate - 1 || in.phase != Phase::kBackward) continue;
        for (int out : in.outputs) {
          const Buffer& b = plan->buffers[out];
          if (b.kind == BufferKind::kGradient && b.offset >= span.offset &&
              b.offset + b.bytes <= span.offset + span.bytes) {
            last = in.id;
            writes += b.name == "grad/wte.weight";
          }
        }
      }
      saw_tied |= writes == 2;
      EXPECT_EQ(bucket.ready_after, last) << "bucket_mb " << mb << ", bucket " << bucket.id;
    }
    EXPECT_TRUE(saw_tied) << "bucket_mb " << mb << ": the tied weight's two gradient writes";
  }
}

}  // namespace
}  // namespace trainc
