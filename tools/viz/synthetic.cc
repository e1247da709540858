#include "tools/viz/synthetic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ops/kernel_families.h"

namespace trainc::viz {
namespace {

int64_t Align64(int64_t n) { return (n + 63) / 64 * 64; }

class Builder {
 public:
  explicit Builder(Plan* plan) : p_(plan) {}

  int AddBuffer(const std::string& name, BufferKind kind,
                std::vector<int64_t> shape, DType dtype = DType::kF32,
                int64_t offset = -1) {
    Buffer b;
    b.id = static_cast<int>(p_->buffers.size());
    b.name = name;
    b.kind = kind;
    b.dtype = dtype;
    b.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : b.shape) n *= d;
    b.bytes = n * DTypeBytes(dtype);
    if (offset < 0) {
      b.offset = next_;
      next_ = Align64(next_ + b.bytes);
    } else {
      b.offset = offset;
    }
    p_->buffers.push_back(b);
    return b.id;
  }
  int64_t Reserve(int64_t bytes) {
    int64_t at = next_;
    next_ = Align64(next_ + bytes);
    return at;
  }
  Instruction& Add(const std::string& op, std::vector<int> in,
                   std::vector<int> out, Phase phase, int micro,
                   const std::string& label) {
    Instruction i;
    i.id = static_cast<int>(p_->instructions.size());
    i.op = op;
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.phase = phase;
    i.stream = IsCollectiveOp(StepOpOfInstruction(op)) ? Stream::kComm : Stream::kCompute;
    i.micro_step = micro;
    i.label = label;
    p_->instructions.push_back(i);
    return p_->instructions.back();
  }
  int64_t arena() const { return next_; }

 private:
  Plan* p_;
  int64_t next_ = 0;
};

struct Layer {
  std::string name;  // "h1", "logits"
  int64_t in = 0, out = 0;
  int weight = -1, bias = -1, grad_w = -1, grad_b = -1;
  int linear_out = -1, act = -1;  // act: relu output (hidden layers)
  int d_linear_out = -1, d_act = -1;
};

// The settings every synthetic plan shares: AdamW, idx data, one epoch.
void SetSettings(const MlpPlanOptions& o, Plan& p) {
  p.model = o.model;
  p.source = absl::StrCat(o.model, ".train");
  p.world_size = o.world_size;
  p.micro_batch = o.micro_batch;
  p.accumulate = o.accumulate;
  p.global_batch = o.world_size * o.micro_batch * o.accumulate;
  p.epochs = 1;
  p.steps = 100;
  p.bucket_mb = o.bucket_bytes / (1024.0 * 1024.0);
  p.optimizer.kind = OptimizerKind::kAdamW;
  p.optimizer.lr = 1e-3;
  p.optimizer.weight_decay = 0.01;
  p.optimizer.beta1 = 0.9;
  p.optimizer.beta2 = 0.999;
  p.optimizer.eps = 1e-8;
  p.data.format = DataFormat::kIdx;
  p.data.train_paths = {"train-images.gz", "train-labels.gz"};
  p.data.scale = 1.0 / 255;
}

// A bucket being filled: its parameters, in backward (ready) order.
struct Pending {
  std::vector<std::pair<Layer*, bool>> members;  // (layer, is_weight)
  int64_t bytes = 0;
};

// Builds the synthetic MLP's plan, one part at a time: buffers (inputs,
// buckets with their parameters and gradients, optimizer state,
// activations), then each micro-step's forward and backward (the last one
// issuing each bucket's all-reduce as it completes), the optimizers and
// the memory report.
class SyntheticMlp {
 public:
  explicit SyntheticMlp(const MlpPlanOptions& o) : o_(o), b_(&p_) {
    SetSettings(o, p_);
    int64_t prev = o.input;
    for (int l = 1; l <= o.hidden_layers; ++l) {
      layers_.push_back({absl::StrCat("h", l), prev, o.width});
      prev = o.width;
    }
    layers_.push_back({"logits", prev, o.classes});
  }

  Plan Build() && {
    PlanBuckets();
    x_ = b_.AddBuffer("image", BufferKind::kInput, {o_.micro_batch, o_.input});
    y_ = b_.AddBuffer("class", BufferKind::kLabel, {o_.micro_batch}, DType::kI32);
    p_.input_buffers = {x_, y_};
    AddParametersAndGradients();
    AddOptimizerState();
    AddActivations();
    p_.buckets.resize(buckets_.size());
    for (int m = 0; m < o_.accumulate; ++m) {
      b_.Add("load_batch", {}, {x_, y_}, Phase::kData, m, "load_batch").attrs["micro"] = m;
      Forward(m);
      Backward(m);
    }
    AddOptimizers();
    p_.num_events = events_;
    p_.arena_bytes = b_.arena();
    FillMemoryReport();
    return std::move(p_);
  }

 private:
  // Buckets in backward (ready) order; parameters and gradients laid out
  // contiguously in that order so that each bucket is one span.
  void PlanBuckets() {
    buckets_.resize(1);
    for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
      for (bool w : {true, false}) {
        if (buckets_.back().bytes >= o_.bucket_bytes) buckets_.emplace_back();
        int64_t bytes = (w ? it->out * it->in : it->out) * 4;
        buckets_.back().members.push_back({&*it, w});
        buckets_.back().bytes += Align64(bytes);
      }
    }
  }

  // Each bucket's parameter span and gradient bucket, and inside them its
  // parameters and their gradients.
  void AddParametersAndGradients() {
    for (size_t k = 0; k < buckets_.size(); ++k) {
      int64_t bytes = buckets_[k].bytes;
      int64_t pa = b_.Reserve(bytes), ga = b_.Reserve(bytes);
      span_buf_.push_back(b_.AddBuffer(absl::StrCat("params/bucket", k),
                                       BufferKind::kParameterSpan, {bytes / 4}, DType::kF32, pa));
      bucket_buf_.push_back(b_.AddBuffer(absl::StrCat("grads/bucket", k), BufferKind::kBucket,
                                         {bytes / 4}, DType::kF32, ga));
      int64_t off = 0;
      for (auto& [layer, w] : buckets_[k].members) {
        std::string pname = absl::StrCat(layer->name, w ? ".weight" : ".bias");
        std::vector<int64_t> shape = w ? std::vector<int64_t>{layer->out, layer->in}
                                       : std::vector<int64_t>{layer->out};
        int param = b_.AddBuffer(pname, BufferKind::kParameter, shape, DType::kF32, pa + off);
        p_.buffers[param].init = ParamInit::kUniform;
        p_.buffers[param].init_bound = 1.0 / std::sqrt(static_cast<double>(layer->in));
        int grad = b_.AddBuffer(absl::StrCat("grad/", pname), BufferKind::kGradient, shape,
                                DType::kF32, ga + off);
        (w ? layer->weight : layer->bias) = param;
        (w ? layer->grad_w : layer->grad_b) = grad;
        off += Align64(p_.buffers[param].bytes);
      }
    }
    for (const Layer& l : layers_) {
      p_.parameter_buffers.push_back(l.weight);
      p_.parameter_buffers.push_back(l.bias);
    }
    // Which parameter write completes which bucket.
    for (size_t k = 0; k < buckets_.size(); ++k) {
      auto& [layer, w] = buckets_[k].members.back();
      completes_[w ? layer->grad_w : layer->grad_b] = static_cast<int>(k);
    }
  }

  // AdamW's m and v spans, per bucket.
  void AddOptimizerState() {
    state_.resize(buckets_.size());
    for (size_t k = 0; k < buckets_.size(); ++k) {
      for (const char* s : {"m", "v"}) {
        state_[k].push_back(b_.AddBuffer(absl::StrCat("adamw.", s, "/bucket", k),
                                         BufferKind::kStateSpan, {buckets_[k].bytes / 4}));
      }
    }
  }

  // The forward values, the loss, and their gradients.
  void AddActivations() {
    const int64_t B = o_.micro_batch;
    for (Layer& l : layers_) {
      bool hidden = l.name != "logits";
      l.linear_out =
          b_.AddBuffer(hidden ? l.name + ".0" : l.name, BufferKind::kActivation, {B, l.out});
      if (hidden) l.act = b_.AddBuffer(l.name, BufferKind::kActivation, {B, l.out});
    }
    loss_ = b_.AddBuffer("loss", BufferKind::kLoss, {1});
    probs_ = b_.AddBuffer("loss.probs", BufferKind::kActivation, {B, o_.classes});
    p_.loss_buffer = loss_;
    for (Layer& l : layers_) {
      bool hidden = l.name != "logits";
      l.d_linear_out = b_.AddBuffer(absl::StrCat("grad/", hidden ? l.name + ".0" : l.name),
                                    BufferKind::kActivationGrad, {B, l.out});
      if (hidden) {
        l.d_act =
            b_.AddBuffer(absl::StrCat("grad/", l.name), BufferKind::kActivationGrad, {B, l.out});
      }
    }
  }

  // Micro-step m's forward: linear (and relu) per layer, then the loss.
  void Forward(int m) {
    int in = x_;
    for (Layer& l : layers_) {
      bool hidden = l.name != "logits";
      b_.Add("linear", {in, l.weight, l.bias}, {l.linear_out}, Phase::kForward, m,
             absl::StrCat(p_.buffers[l.linear_out].name, " = linear"));
      in = l.linear_out;
      if (hidden) {
        b_.Add("relu", {l.linear_out}, {l.act}, Phase::kForward, m,
               absl::StrCat(l.name, " = relu"));
        in = l.act;
      }
    }
    b_.Add("cross_entropy", {layers_.back().linear_out, y_}, {loss_, probs_}, Phase::kForward, m,
           "loss = cross_entropy");
  }

  // Micro-step m's backward, layer by layer from the loss; in the last
  // micro-step a bucket's all-reduce follows the gradient that completes it.
  void Backward(int m) {
    Instruction& ceg = b_.Add("cross_entropy_grad", {probs_, y_}, {layers_.back().d_linear_out},
                              Phase::kBackward, m, "grad/logits = cross_entropy_grad");
    ceg.attrs["accumulate"] = 0;
    ceg.attrs["scale"] = 1.0 / p_.global_batch;
    for (int li = static_cast<int>(layers_.size()) - 1; li >= 0; --li) {
      Layer& l = layers_[li];
      int dy = l.d_linear_out;
      if (l.name != "logits") {
        b_.Add("relu_grad", {l.d_act, l.act}, {dy}, Phase::kBackward, m,
               absl::StrCat(p_.buffers[dy].name, " = relu_grad"))
            .attrs["accumulate"] = 0;
      }
      int x_in = li == 0 ? x_ : layers_[li - 1].act;
      Instruction& g = b_.Add("linear_grad_params", {dy, x_in}, {l.grad_w, l.grad_b},
                              Phase::kBackward, m,
                              absl::StrCat("grad/", l.name, ".weight = linear_grad_params"));
      g.attrs["accumulate"] = m > 0 ? 1 : 0;
      const int gid = g.id;
      if (m == o_.accumulate - 1) {
        for (int grad : {l.grad_w, l.grad_b}) {
          auto c = completes_.find(grad);
          if (c != completes_.end()) AllReduce(c->second, gid, m);
        }
      }
      if (li > 0) {
        b_.Add("linear_grad_input", {dy, l.weight}, {layers_[li - 1].d_act}, Phase::kBackward, m,
               absl::StrCat(p_.buffers[layers_[li - 1].d_act].name, " = linear_grad_input"))
            .attrs["accumulate"] = 0;
      }
    }
  }

  // Bucket k's all-reduce, after instruction `ready` (which records the
  // event it waits for), and the bucket's record.
  void AllReduce(int k, int ready, int m) {
    int ev = events_++;
    p_.instructions[ready].record_events.push_back(ev);
    Instruction& ar = b_.Add("all_reduce", {bucket_buf_[k]}, {bucket_buf_[k]}, Phase::kComm, m,
                             absl::StrCat("all_reduce bucket ", k));
    ar.attrs["bucket"] = k;
    ar.wait_events = {ev};
    ar.record_events = {events_++};
    Bucket& bk = p_.buckets[k];
    bk.id = k;
    bk.bytes = buckets_[k].bytes;
    bk.grad_buffer = bucket_buf_[k];
    bk.param_span = span_buf_[k];
    bk.state_spans = state_[k];
    bk.ready_after = ready;
    bk.all_reduce = ar.id;
    for (auto& [layer, w] : buckets_[k].members) {
      bk.parameters.push_back(absl::StrCat(layer->name, w ? ".weight" : ".bias"));
    }
  }

  // One optimizer per bucket, after its all-reduce.
  void AddOptimizers() {
    for (size_t k = 0; k < buckets_.size(); ++k) {
      std::vector<int> ins = {span_buf_[k], bucket_buf_[k]};
      ins.insert(ins.end(), state_[k].begin(), state_[k].end());
      std::vector<int> outs = {span_buf_[k]};
      outs.insert(outs.end(), state_[k].begin(), state_[k].end());
      Instruction& opt = b_.Add("optimizer", ins, outs, Phase::kOptimizer, -1,
                                absl::StrCat("adamw bucket ", k));
      opt.attrs["bucket"] = k;
      opt.wait_events = p_.instructions[p_.buckets[k].all_reduce].record_events;
    }
  }

  void FillMemoryReport() {
    for (const Buffer& buf : p_.buffers) {
      switch (buf.kind) {
        case BufferKind::kParameter: p_.memory.parameter_bytes += buf.bytes; break;
        case BufferKind::kGradient: p_.memory.gradient_bytes += buf.bytes; break;
        case BufferKind::kStateSpan: p_.memory.optimizer_state_bytes += buf.bytes; break;
        case BufferKind::kActivation:
        case BufferKind::kActivationGrad:
          p_.memory.peak_activation_bytes += buf.bytes;
          break;
        default: break;
      }
    }
    p_.memory.arena_bytes = p_.arena_bytes;
    p_.memory.unshared_bytes = p_.arena_bytes;  // nothing is reused here
  }

  const MlpPlanOptions o_;
  Plan p_;
  Builder b_;
  std::vector<Layer> layers_;  // not resized after construction: buckets point into it
  std::vector<Pending> buckets_;
  std::vector<int> bucket_buf_, span_buf_;
  std::vector<std::vector<int>> state_;
  std::map<int, int> completes_;  // grad buffer -> the bucket it completes
  int x_ = -1, y_ = -1, loss_ = -1, probs_ = -1;
  int events_ = 0;
};

}  // namespace

Plan MakeSyntheticPlan(const MlpPlanOptions& o) { return SyntheticMlp(o).Build(); }

std::string MakeSyntheticTrace(const Plan& plan, int steps) {
  std::string events;
  auto emit = [&](const Instruction& in, int rank, int step, double ts,
                  double dur) {
    if (!events.empty()) events += ",\n";
    std::string args = absl::StrFormat(
        "\"instr\": %d, \"step\": %d, \"micro\": %d, \"op\": \"%s\"", in.id,
        step, in.micro_step, in.op);
    auto bucket = in.attrs.find("bucket");
    if (StepOpOfInstruction(in.op) == StepOp::kAllReduce && bucket != in.attrs.end()) {
      int k = static_cast<int>(bucket->second);
      absl::StrAppend(&args, absl::StrFormat(", \"bucket\": %d, \"bytes\": %d",
                                             k, plan.buckets[k].bytes));
    }
    absl::StrAppend(&events, absl::StrFormat(
        "  {\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.1f, "
        "\"dur\": %.1f, \"pid\": %d, \"tid\": %d, \"args\": {%s}}",
        in.label, PhaseName(in.phase), ts, dur, rank,
        in.stream == Stream::kComm ? 1 : 0, args));
  };
  for (int rank = 0; rank < plan.world_size; ++rank) {
    double compute = rank, comm = rank;
    for (int step = 0; step < steps; ++step) {
      std::map<int, double> event_time;
      for (const Instruction& in : plan.instructions) {
        double ready = 0;
        for (int e : in.wait_events) ready = std::max(ready, event_time[e]);
        double& clock = in.stream == Stream::kComm ? comm : compute;
        double start = std::max(clock, ready);
        double dur = in.phase == Phase::kForward    ? 10
                     : in.phase == Phase::kBackward ? 20
                                                    : 5;
        if (StepOpOfInstruction(in.op) == StepOp::kAllReduce) {
          auto k = in.attrs.find("bucket");
          dur = plan.buckets[static_cast<int>(k->second)].bytes / 1024.0;
        }
        emit(in, rank, step, start, dur);
        clock = start + dur;
        for (int e : in.record_events) event_time[e] = clock;
      }
      compute = comm = std::max(compute, comm) + 50;  // next step
    }
  }
  std::string meta;
  for (int rank = 0; rank < plan.world_size; ++rank) {
    for (int tid = 0; tid < 2; ++tid) {
      absl::StrAppend(&meta, absl::StrFormat(
          "  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
          "\"args\": {\"name\": \"%s\"}},\n", rank, tid,
          tid == 0 ? "compute" : "comm"));
    }
  }
  return absl::StrFormat(
      "{\"traceEvents\": [\n%s%s\n],\n \"metadata\": {\"plan_model\": \"%s\", "
      "\"plan_instructions\": %d, \"world_size\": %d, \"steps_traced\": %d}}\n",
      meta, events, plan.model, plan.instructions.size(), plan.world_size, steps);
}

}  // namespace trainc::viz
