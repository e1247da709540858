#include "tools/viz/synthetic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
    i.stream = op == "all_reduce" ? Stream::kComm : Stream::kCompute;
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

}  // namespace

Plan MakeSyntheticPlan(const MlpPlanOptions& o) {
  Plan p;
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
  Builder b(&p);
  const int64_t B = o.micro_batch;

  std::vector<Layer> layers;
  int64_t prev = o.input;
  for (int l = 1; l <= o.hidden_layers; ++l) {
    layers.push_back({absl::StrCat("h", l), prev, o.width});
    prev = o.width;
  }
  layers.push_back({"logits", prev, o.classes});

  // Buckets in backward (ready) order; parameters and gradients laid out
  // contiguously in that order so that each bucket is one span.
  struct Pending {
    std::vector<std::pair<Layer*, bool>> members;  // (layer, is_weight)
    int64_t bytes = 0;
  };
  std::vector<Pending> buckets(1);
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    for (bool w : {true, false}) {
      if (buckets.back().bytes >= o.bucket_bytes) buckets.emplace_back();
      int64_t bytes = (w ? it->out * it->in : it->out) * 4;
      buckets.back().members.push_back({&*it, w});
      buckets.back().bytes += Align64(bytes);
    }
  }
  int x = b.AddBuffer("image", BufferKind::kInput, {B, o.input});
  int y = b.AddBuffer("class", BufferKind::kLabel, {B}, DType::kI32);
  p.input_buffers = {x, y};
  std::vector<int> bucket_buf, span_buf;
  for (size_t k = 0; k < buckets.size(); ++k) {
    int64_t bytes = buckets[k].bytes;
    int64_t pa = b.Reserve(bytes), ga = b.Reserve(bytes);
    span_buf.push_back(b.AddBuffer(absl::StrCat("params/bucket", k),
                                   BufferKind::kParameterSpan, {bytes / 4},
                                   DType::kF32, pa));
    bucket_buf.push_back(b.AddBuffer(absl::StrCat("grads/bucket", k),
                                     BufferKind::kBucket, {bytes / 4},
                                     DType::kF32, ga));
    int64_t off = 0;
    for (auto& [layer, w] : buckets[k].members) {
      std::string pname = absl::StrCat(layer->name, w ? ".weight" : ".bias");
      std::vector<int64_t> shape = w ? std::vector<int64_t>{layer->out, layer->in}
                                     : std::vector<int64_t>{layer->out};
      int param = b.AddBuffer(pname, BufferKind::kParameter, shape,
                              DType::kF32, pa + off);
      p.buffers[param].init = ParamInit::kUniform;
      p.buffers[param].init_bound = 1.0 / std::sqrt(static_cast<double>(layer->in));
      int grad = b.AddBuffer(absl::StrCat("grad/", pname), BufferKind::kGradient,
                             shape, DType::kF32, ga + off);
      (w ? layer->weight : layer->bias) = param;
      (w ? layer->grad_w : layer->grad_b) = grad;
      off += Align64(p.buffers[param].bytes);
    }
  }
  for (const Layer& l : layers) {
    p.parameter_buffers.push_back(l.weight);
    p.parameter_buffers.push_back(l.bias);
  }
  std::vector<std::vector<int>> state(buckets.size());
  for (size_t k = 0; k < buckets.size(); ++k) {
    for (const char* s : {"m", "v"}) {
      state[k].push_back(b.AddBuffer(absl::StrCat("adamw.", s, "/bucket", k),
                                     BufferKind::kStateSpan,
                                     {buckets[k].bytes / 4}));
    }
  }
  for (Layer& l : layers) {
    bool hidden = l.name != "logits";
    l.linear_out = b.AddBuffer(hidden ? l.name + ".0" : l.name,
                               BufferKind::kActivation, {B, l.out});
    if (hidden) l.act = b.AddBuffer(l.name, BufferKind::kActivation, {B, l.out});
  }
  int loss = b.AddBuffer("loss", BufferKind::kLoss, {1});
  int probs = b.AddBuffer("loss.probs", BufferKind::kActivation, {B, o.classes});
  p.loss_buffer = loss;
  for (Layer& l : layers) {
    bool hidden = l.name != "logits";
    l.d_linear_out = b.AddBuffer(absl::StrCat("grad/", hidden ? l.name + ".0" : l.name),
                                 BufferKind::kActivationGrad, {B, l.out});
    if (hidden) {
      l.d_act = b.AddBuffer(absl::StrCat("grad/", l.name),
                            BufferKind::kActivationGrad, {B, l.out});
    }
  }

  // Which parameter write completes which bucket.
  std::map<int, int> completes;  // grad buffer -> bucket
  for (size_t k = 0; k < buckets.size(); ++k) {
    auto& [layer, w] = buckets[k].members.back();
    completes[w ? layer->grad_w : layer->grad_b] = static_cast<int>(k);
  }
  p.buckets.resize(buckets.size());
  int events = 0;
  const double scale = 1.0 / p.global_batch;
  for (int m = 0; m < o.accumulate; ++m) {
    const bool last = m == o.accumulate - 1;
    b.Add("load_batch", {}, {x, y}, Phase::kData, m, "load_batch").attrs["micro"] = m;
    int in = x;
    for (Layer& l : layers) {
      bool hidden = l.name != "logits";
      b.Add("linear", {in, l.weight, l.bias}, {l.linear_out}, Phase::kForward, m,
            absl::StrCat(p.buffers[l.linear_out].name, " = linear"));
      in = l.linear_out;
      if (hidden) {
        b.Add("relu", {l.linear_out}, {l.act}, Phase::kForward, m,
              absl::StrCat(l.name, " = relu"));
        in = l.act;
      }
    }
    const Layer& head = layers.back();
    b.Add("cross_entropy", {head.linear_out, y}, {loss, probs}, Phase::kForward,
          m, "loss = cross_entropy");
    Instruction& ceg = b.Add("cross_entropy_grad", {probs, y}, {head.d_linear_out},
                             Phase::kBackward, m, "grad/logits = cross_entropy_grad");
    ceg.attrs["accumulate"] = 0;
    ceg.attrs["scale"] = scale;
    for (int li = static_cast<int>(layers.size()) - 1; li >= 0; --li) {
      Layer& l = layers[li];
      int dy = l.d_linear_out;
      if (l.name != "logits") {
        b.Add("relu_grad", {l.d_act, l.act}, {dy}, Phase::kBackward, m,
              absl::StrCat(p.buffers[dy].name, " = relu_grad"))
            .attrs["accumulate"] = 0;
      }
      int x_in = li == 0 ? x : layers[li - 1].act;
      Instruction& g = b.Add("linear_grad_params", {dy, x_in}, {l.grad_w, l.grad_b},
                             Phase::kBackward, m,
                             absl::StrCat("grad/", l.name, ".weight = linear_grad_params"));
      g.attrs["accumulate"] = m > 0 ? 1 : 0;
      int gid = g.id;
      if (last) {
        for (int grad : {l.grad_w, l.grad_b}) {
          auto c = completes.find(grad);
          if (c == completes.end()) continue;
          int k = c->second;
          int ev = events++;
          p.instructions[gid].record_events.push_back(ev);
          Instruction& ar = b.Add("all_reduce", {bucket_buf[k]}, {bucket_buf[k]},
                                  Phase::kComm, m, absl::StrCat("all_reduce bucket ", k));
          ar.attrs["bucket"] = k;
          ar.wait_events = {ev};
          ar.record_events = {events++};
          Bucket& bk = p.buckets[k];
          bk.id = k;
          bk.bytes = buckets[k].bytes;
          bk.grad_buffer = bucket_buf[k];
          bk.param_span = span_buf[k];
          bk.state_spans = state[k];
          bk.ready_after = gid;
          bk.all_reduce = ar.id;
          for (auto& [layer, w] : buckets[k].members) {
            bk.parameters.push_back(absl::StrCat(layer->name, w ? ".weight" : ".bias"));
          }
        }
      }
      if (li > 0) {
        b.Add("linear_grad_input", {dy, l.weight}, {layers[li - 1].d_act},
              Phase::kBackward, m,
              absl::StrCat(p.buffers[layers[li - 1].d_act].name, " = linear_grad_input"))
            .attrs["accumulate"] = 0;
      }
    }
  }
  for (size_t k = 0; k < buckets.size(); ++k) {
    std::vector<int> ins = {span_buf[k], bucket_buf[k]};
    ins.insert(ins.end(), state[k].begin(), state[k].end());
    std::vector<int> outs = {span_buf[k]};
    outs.insert(outs.end(), state[k].begin(), state[k].end());
    Instruction& opt = b.Add("optimizer", ins, outs, Phase::kOptimizer, -1,
                             absl::StrCat("adamw bucket ", k));
    opt.attrs["bucket"] = k;
    opt.wait_events = p.instructions[p.buckets[k].all_reduce].record_events;
  }
  p.num_events = events;
  p.arena_bytes = b.arena();
  for (const Buffer& buf : p.buffers) {
    switch (buf.kind) {
      case BufferKind::kParameter: p.memory.parameter_bytes += buf.bytes; break;
      case BufferKind::kGradient: p.memory.gradient_bytes += buf.bytes; break;
      case BufferKind::kStateSpan: p.memory.optimizer_state_bytes += buf.bytes; break;
      case BufferKind::kActivation:
      case BufferKind::kActivationGrad:
        p.memory.peak_activation_bytes += buf.bytes;
        break;
      default: break;
    }
  }
  p.memory.arena_bytes = p.arena_bytes;
  p.memory.unshared_bytes = p.arena_bytes;  // nothing is reused here
  return p;
}

std::string MakeSyntheticTrace(const Plan& plan, int steps) {
  std::string events;
  auto emit = [&](const Instruction& in, int rank, int step, double ts,
                  double dur) {
    if (!events.empty()) events += ",\n";
    std::string args = absl::StrFormat(
        "\"instr\": %d, \"step\": %d, \"micro\": %d, \"op\": \"%s\"", in.id,
        step, in.micro_step, in.op);
    auto bucket = in.attrs.find("bucket");
    if (in.op == "all_reduce" && bucket != in.attrs.end()) {
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
        if (in.op == "all_reduce") {
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
