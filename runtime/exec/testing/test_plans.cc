#include "runtime/exec/testing/test_plans.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/util/status_macros.h"

namespace trainc {
namespace testing {
namespace {

int64_t Align64(int64_t x) { return (x + 63) / 64 * 64; }

class PlanWriter {
 public:
  explicit PlanWriter(Plan* plan) : plan_(plan) {}

  // A buffer at the next free (aligned) offset.
  int Add(const std::string& name, BufferKind kind, std::vector<int64_t> shape,
          DType dtype = DType::kF32) {
    const int id = AddAt(name, kind, std::move(shape), next_, dtype);
    next_ = Align64(next_ + plan_->buffers[id].bytes);
    return id;
  }
  // A buffer at a fixed offset (a view inside a span or bucket).
  int AddAt(const std::string& name, BufferKind kind,
            std::vector<int64_t> shape, int64_t offset,
            DType dtype = DType::kF32) {
    Buffer b;
    b.id = static_cast<int>(plan_->buffers.size());
    b.name = name;
    b.kind = kind;
    b.dtype = dtype;
    b.shape = std::move(shape);
    b.offset = offset;
    b.bytes = 4;
    for (int64_t d : b.shape) b.bytes *= d;
    plan_->buffers.push_back(b);
    return b.id;
  }
  // Reserves `bytes` and returns their offset.
  int64_t Reserve(int64_t bytes) {
    const int64_t at = next_;
    next_ = Align64(next_ + bytes);
    return at;
  }
  Instruction& Emit(const std::string& op, std::vector<int> in,
                    std::vector<int> out, Phase phase, int micro,
                    const std::string& label) {
    Instruction i;
    i.id = static_cast<int>(plan_->instructions.size());
    i.op = op;
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.phase = phase;
    i.micro_step = micro;
    i.label = label;
    i.stream = IsCollectiveOp(StepOpOfInstruction(op)) ? Stream::kComm : Stream::kCompute;
    plan_->instructions.push_back(i);
    return plan_->instructions.back();
  }
  int64_t end() const { return next_; }

 private:
  Plan* plan_;
  int64_t next_ = 0;
};

}  // namespace

Plan MakeMlpPlan(const MlpPlanOptions& o) {
  Plan plan;
  plan.model = "test_mlp";
  plan.world_size = o.world_size;
  plan.micro_batch = o.micro_batch;
  plan.accumulate = o.accumulate;
  plan.global_batch = o.world_size * o.micro_batch * o.accumulate;
  plan.deterministic = o.deterministic;
  plan.optimizer = o.optimizer;
  PlanWriter w(&plan);
  const int L = static_cast<int>(o.dims.size()) - 1;
  const int64_t mb = o.micro_batch;
  const int64_t slots = o.deterministic ? o.accumulate : 1;
  auto lname = [](int l) { return absl::StrCat("l", l); };

  const int x = w.Add("image", BufferKind::kInput, {mb, o.dims[0]});
  const int label = w.Add("class", BufferKind::kLabel, {mb}, DType::kI32);
  plan.input_buffers = {x, label};

  // Buckets from the last layer back; inside one, weight then bias per layer.
  std::vector<int> weight(L + 1), bias(L + 1), bucket_of(L + 1);
  std::vector<std::vector<int>> dweight(L + 1, std::vector<int>(slots)),
      dbias(L + 1, std::vector<int>(slots));
  std::vector<int> last_layer_of_bucket;  // the layer written last (lowest)
  for (int top = L; top >= 1; top -= o.layers_per_bucket) {
    const int bottom = std::max(1, top - o.layers_per_bucket + 1);
    Bucket bucket;
    bucket.id = static_cast<int>(plan.buckets.size());
    int64_t floats = 0;
    for (int l = top; l >= bottom; --l) {
      floats += o.dims[l] * o.dims[l - 1] + o.dims[l];
      bucket.parameters.push_back(lname(l) + ".weight");
      bucket.parameters.push_back(lname(l) + ".bias");
      bucket_of[l] = bucket.id;
    }
    bucket.bytes = floats * 4;
    const std::string tag = absl::StrCat("bucket", bucket.id);
    const int64_t p_at = w.Reserve(bucket.bytes);
    const int64_t g_at = w.Reserve(bucket.bytes * slots);
    bucket.param_span =
        w.AddAt("params/" + tag, BufferKind::kParameterSpan, {floats}, p_at);
    bucket.grad_buffer = w.AddAt("grads/" + tag, BufferKind::kBucket,
                                 {slots * floats}, g_at);
    int64_t off = 0;
    for (int l = top; l >= bottom; --l) {
      const int64_t nw = o.dims[l] * o.dims[l - 1];
      weight[l] = w.AddAt(lname(l) + ".weight", BufferKind::kParameter,
                          {o.dims[l], o.dims[l - 1]}, p_at + off * 4);
      bias[l] = w.AddAt(lname(l) + ".bias", BufferKind::kParameter,
                        {o.dims[l]}, p_at + (off + nw) * 4);
      for (int64_t k = 0; k < slots; ++k) {
        const int64_t slot = g_at + k * bucket.bytes;
        const std::string suffix = slots > 1 ? absl::StrCat("#", k) : "";
        dweight[l][k] = w.AddAt("grad/" + lname(l) + ".weight" + suffix,
                                BufferKind::kGradient,
                                {o.dims[l], o.dims[l - 1]}, slot + off * 4);
        dbias[l][k] = w.AddAt("grad/" + lname(l) + ".bias" + suffix,
                              BufferKind::kGradient, {o.dims[l]},
                              slot + (off + nw) * 4);
      }
      off += nw + o.dims[l];
    }
    const int num_state = o.optimizer.kind == OptimizerKind::kAdamW ? 2
                          : o.optimizer.momentum != 0 ? 1
                                                      : 0;
    for (int s = 0; s < num_state; ++s) {
      bucket.state_spans.push_back(
          w.Add(absl::StrCat("state", s, "/", tag), BufferKind::kStateSpan,
                {floats}));
    }
    plan.buckets.push_back(bucket);
    last_layer_of_bucket.push_back(bottom);
  }
  for (int l = 1; l <= L; ++l) {
    plan.parameter_buffers.push_back(weight[l]);
    plan.parameter_buffers.push_back(bias[l]);
  }

  // Activations (shared by every micro-step: their lives do not overlap).
  std::vector<int> z(L + 1), h(L + 1), dz(L + 1), dh(L + 1);
  h[0] = x;
  for (int l = 1; l <= L; ++l) {
    z[l] = w.Add(lname(l) + ".pre", BufferKind::kActivation, {mb, o.dims[l]});
    if (l < L) {
      h[l] = w.Add(lname(l), BufferKind::kActivation, {mb, o.dims[l]});
      dh[l] = w.Add("grad/" + lname(l), BufferKind::kActivationGrad,
                    {mb, o.dims[l]});
    }
    dz[l] = w.Add("grad/" + lname(l) + ".pre", BufferKind::kActivationGrad,
                  {mb, o.dims[l]});
  }
  const int loss = w.Add("loss", BufferKind::kLoss, {1});
  const int probs =
      w.Add("probs", BufferKind::kActivation, {mb, o.dims[L]});
  plan.loss_buffer = loss;

  const int nb = static_cast<int>(plan.buckets.size());
  plan.num_events = 2 * nb;  // per bucket: grads ready, all-reduce done
  for (int k = 0; k < o.accumulate; ++k) {
    w.Emit("load_batch", {}, {x, label}, Phase::kData, k, "load_batch")
        .attrs["micro"] = k;
    for (int l = 1; l <= L; ++l) {
      w.Emit("linear", {h[l - 1], weight[l], bias[l]}, {z[l]}, Phase::kForward,
             k, lname(l) + ".pre = linear");
      if (l < L) {
        w.Emit("relu", {z[l]}, {h[l]}, Phase::kForward, k,
               lname(l) + " = relu");
      }
    }
    w.Emit("cross_entropy", {z[L], label}, {loss, probs}, Phase::kForward, k,
           "loss = cross_entropy");
    Instruction& ce = w.Emit("cross_entropy_grad", {probs, label}, {dz[L]},
                             Phase::kBackward, k, "grad logits");
    ce.attrs["scale"] = 1.0 / plan.global_batch;
    ce.attrs["accumulate"] = 0;
    for (int l = L; l >= 1; --l) {
      const int slot = o.deterministic ? k : 0;
      Instruction& gp =
          w.Emit("linear_grad_params", {dz[l], h[l - 1]},
                 {dweight[l][slot], dbias[l][slot]}, Phase::kBackward, k,
                 "grad " + lname(l) + " params");
      gp.attrs["accumulate"] = (!o.deterministic && k > 0) ? 1 : 0;
      const int gp_id = gp.id;  // `gp` dangles after the next Emit
      const int b = bucket_of[l];
      if (k == o.accumulate - 1 && last_layer_of_bucket[b] == l) {
        gp.record_events.push_back(2 * b);
        Instruction& ar = w.Emit("all_reduce", {plan.buckets[b].grad_buffer},
                                 {plan.buckets[b].grad_buffer}, Phase::kComm,
                                 k, absl::StrCat("all_reduce bucket ", b));
        ar.attrs["bucket"] = b;
        ar.wait_events.push_back(2 * b);
        ar.record_events.push_back(2 * b + 1);
        plan.buckets[b].ready_after = gp_id;
        plan.buckets[b].all_reduce = ar.id;
      }
      if (l > 1) {
        w.Emit("linear_grad_input", {dz[l], weight[l]}, {dh[l - 1]},
               Phase::kBackward, k, "grad " + lname(l - 1))
            .attrs["accumulate"] = 0;
        w.Emit("relu_grad", {dh[l - 1], h[l - 1]}, {dz[l - 1]},
               Phase::kBackward, k, "grad " + lname(l - 1) + ".pre")
            .attrs["accumulate"] = 0;
      }
    }
  }
  for (int b = 0; b < nb; ++b) {
    // The planner's operands: params, grads, state spans -> params, state
    // spans.
    std::vector<int> ins = {plan.buckets[b].param_span, plan.buckets[b].grad_buffer};
    std::vector<int> outs = {plan.buckets[b].param_span};
    for (int s : plan.buckets[b].state_spans) ins.push_back(s), outs.push_back(s);
    Instruction& opt = w.Emit("optimizer", ins, outs, Phase::kOptimizer, -1,
                              absl::StrCat("optimizer bucket ", b));
    opt.attrs["bucket"] = b;
    opt.wait_events.push_back(2 * b + 1);
  }
  plan.arena_bytes = w.end();
  plan.memory.arena_bytes = w.end();
  return plan;
}

MlpParams RandomMlpParams(const std::vector<int64_t>& dims, uint32_t seed) {
  std::mt19937 gen(seed);
  MlpParams p;
  p.w.resize(dims.size());
  p.b.resize(dims.size());
  for (size_t l = 1; l < dims.size(); ++l) {
    // nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in)).
    const float bound = 1.0f / std::sqrt(static_cast<float>(dims[l - 1]));
    std::uniform_real_distribution<float> dist(-bound, bound);
    p.w[l].resize(dims[l] * dims[l - 1]);
    p.b[l].resize(dims[l]);
    for (float& v : p.w[l]) v = dist(gen);
    for (float& v : p.b[l]) v = dist(gen);
  }
  return p;
}

absl::Status UploadMlpParams(const Plan& plan, const MlpParams& params,
                             Device& device) {
  for (size_t i = 0; i < plan.parameter_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.parameter_buffers[i]];
    const size_t l = i / 2 + 1;
    const std::vector<float>& v = i % 2 == 0 ? params.w[l] : params.b[l];
    if (static_cast<int64_t>(v.size() * 4) != b.bytes) {
      return absl::InvalidArgumentError("parameter size mismatch: " + b.name);
    }
    RETURN_IF_ERROR(device.Upload(b.offset, v.data(), b.bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<MlpParams> DownloadMlpParams(const Plan& plan, Device& device) {
  MlpParams p;
  const size_t layers = plan.parameter_buffers.size() / 2;
  p.w.resize(layers + 1);
  p.b.resize(layers + 1);
  for (size_t i = 0; i < plan.parameter_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.parameter_buffers[i]];
    std::vector<float>& v = i % 2 == 0 ? p.w[i / 2 + 1] : p.b[i / 2 + 1];
    v.resize(b.bytes / 4);
    RETURN_IF_ERROR(device.Download(b.offset, v.data(), b.bytes));
  }
  return p;
}

std::vector<MlpBatch> RandomBatches(const std::vector<int64_t>& dims,
                                    int64_t micro_batch, int64_t count,
                                    uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> xdist(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> ldist(
      0, static_cast<int32_t>(dims.back() - 1));
  std::vector<MlpBatch> out(count);
  for (MlpBatch& b : out) {
    b.x.resize(micro_batch * dims[0]);
    b.label.resize(micro_batch);
    for (float& v : b.x) v = xdist(gen);
    for (int32_t& v : b.label) v = ldist(gen);
  }
  return out;
}

absl::Status VectorBatchSource::Fill(int micro_step, const Plan& plan,
                                     Device& device) {
  if (micro_step < 0 || micro_step >= static_cast<int>(batches_.size())) {
    return absl::OutOfRangeError(absl::StrCat("no micro-step ", micro_step));
  }
  const MlpBatch& b = batches_[micro_step];
  const Buffer& x = plan.buffers[plan.input_buffers[0]];
  const Buffer& label = plan.buffers[plan.input_buffers[1]];
  RETURN_IF_ERROR(device.Upload(x.offset, b.x.data(), x.bytes));
  return device.Upload(label.offset, b.label.data(), label.bytes);
}

MlpReference::MlpReference(std::vector<int64_t> dims,
                           OptimizerConfig optimizer, const MlpParams& init)
    : dims_(std::move(dims)), opt_(std::move(optimizer)) {
  const size_t L = dims_.size() - 1;
  p_.resize(L + 1);
  m_.resize(L + 1);
  v_.resize(L + 1);
  for (size_t l = 1; l <= L; ++l) {
    p_[l].assign(init.w[l].begin(), init.w[l].end());
    p_[l].insert(p_[l].end(), init.b[l].begin(), init.b[l].end());
    m_[l].assign(p_[l].size(), 0.0);
    v_[l].assign(p_[l].size(), 0.0);
  }
}

double MlpReference::Step(const StepState& state,
                          const std::vector<MlpBatch>& global) {
  const size_t L = dims_.size() - 1;
  int64_t samples = 0;
  for (const MlpBatch& b : global) samples += b.label.size();
  std::vector<std::vector<double>> grad(L + 1);
  for (size_t l = 1; l <= L; ++l) grad[l].assign(p_[l].size(), 0.0);
  double loss_sum = 0.0;
  for (const MlpBatch& batch : global) {
    for (size_t s = 0; s < batch.label.size(); ++s) {
      // Forward, keeping every layer's output (post-ReLU except the last).
      std::vector<std::vector<double>> a(L + 1);
      a[0].assign(batch.x.begin() + s * dims_[0],
                  batch.x.begin() + (s + 1) * dims_[0]);
      for (size_t l = 1; l <= L; ++l) {
        const int64_t in = dims_[l - 1], out = dims_[l];
        a[l].assign(out, 0.0);
        for (int64_t o = 0; o < out; ++o) {
          double acc = p_[l][out * in + o];
          for (int64_t i = 0; i < in; ++i) acc += p_[l][o * in + i] * a[l - 1][i];
          a[l][o] = (l < L) ? std::max(acc, 0.0) : acc;
        }
      }
      const std::vector<double>& logits = a[L];
      const double mx = *std::max_element(logits.begin(), logits.end());
      double z = 0.0;
      for (double v : logits) z += std::exp(v - mx);
      const int t = batch.label[s];
      loss_sum += std::log(z) + mx - logits[t];
      // Backward of the mean over the global batch.
      std::vector<double> d(logits.size());
      for (size_t j = 0; j < d.size(); ++j) {
        d[j] = (std::exp(logits[j] - mx) / z - (static_cast<int>(j) == t)) /
               samples;
      }
      for (size_t l = L; l >= 1; --l) {
        const int64_t in = dims_[l - 1], out = dims_[l];
        for (int64_t o = 0; o < out; ++o) {
          for (int64_t i = 0; i < in; ++i) grad[l][o * in + i] += d[o] * a[l - 1][i];
          grad[l][out * in + o] += d[o];
        }
        if (l == 1) break;
        std::vector<double> dprev(in, 0.0);
        for (int64_t i = 0; i < in; ++i) {
          for (int64_t o = 0; o < out; ++o) dprev[i] += p_[l][o * in + i] * d[o];
          if (a[l - 1][i] <= 0) dprev[i] = 0;
        }
        d = std::move(dprev);
      }
    }
  }
  const double lr = state.lr;
  const int64_t t = state.step;
  for (size_t l = 1; l <= L; ++l) {
    for (size_t i = 0; i < p_[l].size(); ++i) {
      const double g = grad[l][i];
      double& p = p_[l][i];
      if (opt_.kind == OptimizerKind::kAdamW) {
        p -= lr * opt_.weight_decay * p;
        m_[l][i] = opt_.beta1 * m_[l][i] + (1 - opt_.beta1) * g;
        v_[l][i] = opt_.beta2 * v_[l][i] + (1 - opt_.beta2) * g * g;
        p -= lr * (m_[l][i] / (1 - std::pow(opt_.beta1, t))) /
             (std::sqrt(v_[l][i] / (1 - std::pow(opt_.beta2, t))) + opt_.eps);
      } else {
        double dp = g + opt_.weight_decay * p;
        if (opt_.momentum != 0) {
          m_[l][i] = t == 1 ? dp : opt_.momentum * m_[l][i] + dp;
          dp = opt_.nesterov ? dp + opt_.momentum * m_[l][i] : m_[l][i];
        }
        p -= lr * dp;
      }
    }
  }
  return loss_sum;
}

MlpParams MlpReference::params() const {
  MlpParams out;
  const size_t L = dims_.size() - 1;
  out.w.resize(L + 1);
  out.b.resize(L + 1);
  for (size_t l = 1; l <= L; ++l) {
    const size_t nw = dims_[l] * dims_[l - 1];
    out.w[l].assign(p_[l].begin(), p_[l].begin() + nw);
    out.b[l].assign(p_[l].begin() + nw, p_[l].end());
  }
  return out;
}

}  // namespace testing
}  // namespace trainc
