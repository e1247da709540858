#include "compiler/plan/plan_io.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Buffer MakeBuffer(int id, std::string name, BufferKind kind, std::vector<int64_t> shape,
                  int64_t offset, DType dtype = DType::kF32) {
  Buffer b;
  b.id = id;
  b.name = std::move(name);
  b.kind = kind;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.offset = offset;
  int64_t n = 1;
  for (int64_t d : b.shape) n *= d;
  b.bytes = n * DTypeBytes(dtype);
  return b;
}

// A one-layer model, one micro-step: load, linear, loss, backward, reduce,
// optimizer. Small but touches every record type.
Plan TinyPlan() {
  Plan p;
  p.model = "tiny model";  // a space, to exercise quoting
  p.source = "/tmp/tiny.train";
  p.world_size = 2;
  p.micro_batch = 2;
  p.accumulate = 1;
  p.global_batch = 4;
  p.epochs = 1;
  p.optimizer.kind = OptimizerKind::kAdamW;
  p.optimizer.lr = 1e-3;
  p.optimizer.weight_decay = 0.01;
  p.optimizer.beta1 = 0.9;
  p.optimizer.beta2 = 0.999;
  p.optimizer.eps = 1e-8;
  p.data.format = DataFormat::kIdx;
  p.data.train_paths = {"/data/a b.gz", "/data/labels.gz"};
  p.data.scale = 1.0 / 255;
  p.buffers = {
      MakeBuffer(0, "x", BufferKind::kInput, {2, 3}, 0),
      MakeBuffer(1, "y", BufferKind::kLabel, {2}, 64, DType::kI32),
      MakeBuffer(2, "fc.weight", BufferKind::kParameter, {2, 3}, 128),
      MakeBuffer(3, "grad/fc.weight", BufferKind::kGradient, {2, 3}, 192),
      MakeBuffer(4, "bucket0", BufferKind::kBucket, {16}, 192),
      MakeBuffer(5, "params0", BufferKind::kParameterSpan, {16}, 128),
      MakeBuffer(6, "m0", BufferKind::kStateSpan, {16}, 256),
      MakeBuffer(7, "v0", BufferKind::kStateSpan, {16}, 320),
      MakeBuffer(8, "loss", BufferKind::kLoss, {1}, 384),
      MakeBuffer(9, "probs", BufferKind::kActivation, {2, 2}, 448),
  };
  p.buffers[2].init = ParamInit::kUniform;
  p.buffers[2].init_bound = 0.5773502691896258;
  p.buffers[0].first_use = 0;
  p.buffers[0].last_use = 2;
  auto add = [&](std::string op, std::vector<int> in, std::vector<int> out, Stream s,
                 Phase ph, int micro) -> Instruction& {
    Instruction i;
    i.id = static_cast<int>(p.instructions.size());
    i.op = std::move(op);
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.stream = s;
    i.phase = ph;
    i.micro_step = micro;
    i.label = i.op;
    p.instructions.push_back(i);
    return p.instructions.back();
  };
  add("load_batch", {}, {0, 1}, Stream::kCompute, Phase::kData, 0).attrs["micro"] = 0;
  add("cross_entropy", {0, 1}, {8, 9}, Stream::kCompute, Phase::kForward, 0).label =
      "loss = cross_entropy";
  Instruction& g = add("linear_grad_params", {9, 0}, {3, 3}, Stream::kCompute,
                       Phase::kBackward, 0);
  g.attrs["accumulate"] = 0;
  g.record_events = {0};
  Instruction& r = add("all_reduce", {4}, {4}, Stream::kComm, Phase::kComm, 0);
  r.attrs["bucket"] = 0;
  r.wait_events = {0};
  r.record_events = {1};
  Instruction& o = add("optimizer", {5, 4, 6, 7}, {5, 6, 7}, Stream::kCompute,
                       Phase::kOptimizer, -1);
  o.attrs["bucket"] = 0;
  o.wait_events = {1};
  p.num_events = 2;
  Bucket b;
  b.parameters = {"fc.weight"};
  b.grad_buffer = 4;
  b.param_span = 5;
  b.state_spans = {6, 7};
  b.bytes = 64;
  b.ready_after = 2;
  b.all_reduce = 3;
  p.buckets.push_back(b);
  p.arena_bytes = 512;
  p.memory.arena_bytes = 512;
  p.memory.parameter_bytes = 64;
  p.input_buffers = {0, 1};
  p.loss_buffer = 8;
  p.parameter_buffers = {2};
  return p;
}

TEST(PlanIo, TinyPlanIsValid) { EXPECT_TRUE(ValidatePlan(TinyPlan()).ok()); }

// A plan file is input: one whose activation lies over the weights would
// train on corrupted weights.
TEST(PlanIo, BuffersSharingBytesWhileLiveAreRefused) {
  Plan over_weights = TinyPlan();
  over_weights.buffers[0].offset = 128;  // x, live 0..2, onto fc.weight
  EXPECT_THAT(std::string(ValidatePlan(over_weights).message()),
              HasSubstr("buffer 2 (fc.weight, parameter) and buffer 0 (x, input) share arena "
                        "bytes [128, 152) while both live (the whole run; instructions 0..2)"));

  // Two temporaries on the same bytes: refused while both live, fine when
  // one ends before the other starts (the memory planner's reuse).
  Plan temporaries = TinyPlan();
  Buffer& probs = temporaries.buffers[9];
  probs.offset = 0;
  probs.first_use = 1;
  probs.last_use = 2;
  EXPECT_THAT(std::string(ValidatePlan(temporaries).message()),
              HasSubstr("buffer 0 (x, input) and buffer 9 (probs, activation) share"));
  temporaries.buffers[0].last_use = 0;
  EXPECT_TRUE(ValidatePlan(temporaries).ok()) << ValidatePlan(temporaries);

  // A span holds its members; a member outside its span is an overlap.
  Plan outside = TinyPlan();
  outside.buffers[2].offset = 192;  // fc.weight onto the gradient bucket
  EXPECT_THAT(std::string(ValidatePlan(outside).message()), HasSubstr("share arena bytes"));
}

TEST(PlanIo, RoundTripIsExact) {
  const Plan plan = TinyPlan();
  const std::string text = PlanToText(plan);
  absl::StatusOr<Plan> parsed = PlanFromText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(PlanToText(*parsed), text);
  EXPECT_EQ(parsed->model, "tiny model");
  EXPECT_EQ(parsed->data.train_paths[0], "/data/a b.gz");
  EXPECT_EQ(parsed->data.scale, 1.0 / 255);  // exact, not approximately
  EXPECT_EQ(parsed->buffers[2].init_bound, 0.5773502691896258);
  EXPECT_EQ(parsed->optimizer.eps, 1e-8);
  EXPECT_EQ(parsed->instructions[3].stream, Stream::kComm);
  EXPECT_EQ(parsed->instructions[3].wait_events, std::vector<int>{0});
  EXPECT_EQ(parsed->buffers[1].dtype, DType::kI32);
  EXPECT_EQ(parsed->buckets[0].state_spans, (std::vector<int>{6, 7}));
  EXPECT_EQ(parsed->buffers[0].last_use, 2);
  EXPECT_EQ(parsed->buffers[3].first_use, -1);
}

TEST(PlanIo, TextIsReadable) {
  const std::string text = PlanToText(TinyPlan());
  EXPECT_THAT(text, HasSubstr("trainc-plan 1\n"));
  EXPECT_THAT(text, HasSubstr("model name=\"tiny model\"\n"));
  EXPECT_THAT(text, HasSubstr("lr=0.001 "));
  EXPECT_THAT(text, HasSubstr("buffer 2 name=fc.weight kind=parameter dtype=f32 shape=2x3"));
  EXPECT_THAT(text, HasSubstr("label=\"loss = cross_entropy\""));
}

TEST(PlanIo, FileRoundTrip) {
  const std::string path = ::testing::TempDir() + "/tiny.plan";
  ASSERT_TRUE(WritePlanFile(TinyPlan(), path).ok());
  absl::StatusOr<Plan> read = ReadPlanFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(PlanToText(*read), PlanToText(TinyPlan()));
  EXPECT_EQ(ReadPlanFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(PlanIo, TokenDataRoundTrips) {
  Plan plan = TinyPlan();
  plan.data.format = DataFormat::kText;
  plan.data.train_paths = {"/usr/share/games/fortunes/art", "/f/b c"};
  plan.data.eval_paths = plan.data.train_paths;
  plan.data.train_split = {0.0, 0.95};
  plan.data.eval_split = {0.95, 1.0};
  plan.data.token_vocab = 256;
  const std::string text = PlanToText(plan);
  EXPECT_THAT(text, HasSubstr("data format=text scale=0.00392156862745098 shuffle=1 "
                              "train_split=0:0.95 eval_split=0.95:1 token_vocab=256\n"));
  absl::StatusOr<Plan> parsed = PlanFromText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(PlanToText(*parsed), text);
  EXPECT_EQ(parsed->data.format, DataFormat::kText);
  EXPECT_EQ(parsed->data.eval_paths, plan.data.eval_paths);
  EXPECT_EQ(parsed->data.train_split.begin, 0.0);
  EXPECT_EQ(parsed->data.train_split.end, 0.95);
  EXPECT_EQ(parsed->data.eval_split.begin, 0.95);
  EXPECT_EQ(parsed->data.eval_split.end, 1.0);
  EXPECT_EQ(parsed->data.token_vocab, 256);
}

TEST(PlanIo, PlansWithoutTokenFieldsStillRead) {
  // An idx plan writes no split and no vocabulary (its text is what older
  // versions wrote); reading it gives the defaults.
  const std::string text = PlanToText(TinyPlan());
  EXPECT_THAT(text, HasSubstr("data format=idx scale=0.00392156862745098 shuffle=1\n"));
  absl::StatusOr<Plan> parsed = PlanFromText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data.train_split.begin, 0.0);
  EXPECT_EQ(parsed->data.train_split.end, 1.0);
  EXPECT_EQ(parsed->data.eval_split.end, 1.0);
  EXPECT_EQ(parsed->data.token_vocab, 0);
}

TEST(PlanIo, TheModelSignatureRoundTripsAndMayBeAbsent) {
  Plan plan = TinyPlan();
  plan.model_signature = "2 x linear(bias=true, out_features=2)\ninput x: f32[3]";
  const std::string text = PlanToText(plan);
  EXPECT_THAT(text, HasSubstr("model name=\"tiny model\" signature=\"2 x linear("));
  absl::StatusOr<Plan> parsed = PlanFromText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_EQ(parsed->model_signature, plan.model_signature);
  // A plan written before signatures existed reads with none.
  absl::StatusOr<Plan> old = PlanFromText(PlanToText(TinyPlan()));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->model_signature, "");
}

TEST(PlanIo, TheHashIsOfThePlanNotOfItsFileName) {
  // Ranks compare it (the handshake) and traces record it (viz).
  Plan a = TinyPlan();
  Plan b = a;
  b.source = "elsewhere/m.train";
  EXPECT_EQ(PlanHash(a), PlanHash(b));
  b.micro_batch += 1;
  EXPECT_NE(PlanHash(a), PlanHash(b));
  b = a;
  b.optimizer.lr *= 2;
  EXPECT_NE(PlanHash(a), PlanHash(b));
}

TEST(PlanIo, BadTokenFieldsNameTheLine) {
  const std::string good = PlanToText(TinyPlan());
  const std::string data_line = "data format=idx scale=0.00392156862745098 shuffle=1";
  for (const char* bad : {" train_split=0.9:0.5", " eval_split=0.5", " train_split=0:1.5",
                          " eval_split=a:b", " token_vocab=-1", " token_vocab=x"}) {
    std::string text =
        absl::StrReplaceAll(good, {{data_line, absl::StrCat(data_line, bad)}});
    absl::Status s = PlanFromText(text, "p").status();
    EXPECT_THAT(s.message(), HasSubstr("p:7: ")) << bad;
  }
}

TEST(PlanIo, OtherVersionIsAClearError) {
  std::string text = PlanToText(TinyPlan());
  text = absl::StrReplaceAll(text, {{"trainc-plan 1", "trainc-plan 7"}});
  absl::Status s = PlanFromText(text, "old.plan").status();
  EXPECT_THAT(s.message(), HasSubstr("old.plan:1: plan format version 7 is not supported"));
}

TEST(PlanIo, ParseErrorsNameTheLine) {
  const std::string good = PlanToText(TinyPlan());
  // Line 3 is `source ...`; line 4 is `config ...`.
  std::string text = absl::StrReplaceAll(good, {{"micro_batch=2", "micro_batch=two"}});
  EXPECT_THAT(PlanFromText(text, "p").status().message(),
              HasSubstr("p:4: 'micro_batch=two': expected an integer"));
  text = absl::StrReplaceAll(good, {{"kind=loss", "kind=lost"}});
  EXPECT_THAT(PlanFromText(text, "p").status().message(), HasSubstr("expected one of input"));
  text = absl::StrReplaceAll(good, {{" tf32=0", " tf32=0 colour=red"}});
  EXPECT_THAT(PlanFromText(text, "p").status().message(),
              HasSubstr("p:4: unknown field 'colour'"));
  text = absl::StrReplaceAll(good, {{"end\n", ""}});
  EXPECT_THAT(PlanFromText(text, "p").status().message(), HasSubstr("no 'end'"));
  EXPECT_THAT(PlanFromText("hello\n", "p").status().message(),
              HasSubstr("p:1: not a trainc plan"));
  text = absl::StrReplaceAll(good, {{"buffer 1 ", "buffer 5 "}});
  EXPECT_THAT(PlanFromText(text, "p").status().message(), HasSubstr("out of order"));
}

// The enumerated settings are written and read through their name tables
// (compiler/plan/settings.h): the defaults are left out of `config`, the
// others written by name; a name outside its table is refused on reading,
// precision and zero_gather worded as before they were enums.
TEST(PlanIo, EnumeratedSettingsRoundTripByName) {
  Plan p = TinyPlan();
  const std::string defaults = PlanToText(p);
  EXPECT_THAT(defaults, Not(HasSubstr("precision=")));
  EXPECT_THAT(defaults, Not(HasSubstr("grad_comm=")));
  EXPECT_THAT(defaults, Not(HasSubstr("zero_gather=")));
  EXPECT_THAT(defaults, HasSubstr("optimizer kind=adamw "));
  EXPECT_THAT(defaults, HasSubstr("schedule kind=constant "));
  EXPECT_THAT(defaults, HasSubstr(" init=uniform init_bound="));
  p.grad_comm = GradComm::kBf16;
  p.zero_gather = ZeroGather::kNextForward;
  p.optimizer.kind = OptimizerKind::kSgd;
  p.schedule.kind = ScheduleKind::kCosine;
  p.data.format = DataFormat::kTokens;
  p.buffers[2].init = ParamInit::kNormal;
  const std::string text = PlanToText(p);
  EXPECT_THAT(text, HasSubstr(" zero_gather=next_forward grad_comm=bf16"));
  EXPECT_THAT(text, HasSubstr("optimizer kind=sgd "));
  EXPECT_THAT(text, HasSubstr("schedule kind=cosine "));
  EXPECT_THAT(text, HasSubstr("data format=tokens "));
  EXPECT_THAT(text, HasSubstr(" init=normal "));
  absl::StatusOr<Plan> parsed = PlanFromText(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->grad_comm, GradComm::kBf16);
  EXPECT_EQ(parsed->zero_gather, ZeroGather::kNextForward);
  EXPECT_EQ(parsed->optimizer.kind, OptimizerKind::kSgd);
  EXPECT_EQ(parsed->schedule.kind, ScheduleKind::kCosine);
  EXPECT_EQ(parsed->data.format, DataFormat::kTokens);
  EXPECT_EQ(parsed->buffers[2].init, ParamInit::kNormal);
  EXPECT_EQ(parsed->buffers[0].init, ParamInit::kNone);
  EXPECT_EQ(PlanToText(*parsed), text);

  const std::string good = PlanToText(TinyPlan());
  auto error = [&](const std::string& from, const std::string& to) {
    return std::string(
        PlanFromText(absl::StrReplaceAll(good, {{from, to}}), "p").status().message());
  };
  EXPECT_EQ(error(" tf32=0", " tf32=0 precision=fp16"),
            "p: invalid plan: precision \"fp16\", expected fp32 or bf16");
  EXPECT_EQ(error(" tf32=0", " tf32=0 zero_gather=later"),
            "p: invalid plan: zero_gather \"later\", expected step_end or next_forward");
  EXPECT_THAT(error(" tf32=0", " tf32=0 grad_comm=fp8"),
              HasSubstr("p:4: 'grad_comm=fp8': expected one of fp32, bf16"));
  EXPECT_THAT(error("kind=adamw", "kind=adam"),
              HasSubstr("'kind=adam': expected one of sgd, adamw"));
  EXPECT_THAT(error("kind=constant", "kind=linear"),
              HasSubstr("'kind=linear': expected one of constant, cosine"));
  EXPECT_THAT(error("format=idx", "format=csv"),
              HasSubstr("'format=csv': expected one of idx, text, tokens"));
  EXPECT_THAT(error("init=uniform", "init=xavier"),
              HasSubstr("'init=xavier': expected one of zeros, ones, uniform, normal"));
}

TEST(PlanIo, ValidateCatchesBrokenReferences) {
  Plan p = TinyPlan();
  p.instructions[1].inputs = {0, 42};
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("input buffer 42"));

  p = TinyPlan();
  p.buffers[9].bytes = 4;
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("bytes 4 but shape holds 16"));

  p = TinyPlan();
  p.buffers[9].offset = 500;
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("not 64-byte aligned"));

  p = TinyPlan();
  p.buffers[9].offset = 512;
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("past the arena"));

  p = TinyPlan();  // The all-reduce waits for an event recorded later.
  std::swap(p.instructions[2].record_events, p.instructions[4].record_events);
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("not recorded before"));

  p = TinyPlan();
  p.instructions[3].stream = Stream::kCompute;
  EXPECT_FALSE(ValidatePlan(p).ok());

  p = TinyPlan();
  p.global_batch = 5;
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("global_batch"));

  p = TinyPlan();
  p.instructions[1].op = "convolution_3d";
  EXPECT_THAT(ValidatePlan(p).message(), HasSubstr("unknown op"));
}

}  // namespace
}  // namespace trainc
