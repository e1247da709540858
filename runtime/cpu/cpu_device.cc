#include "runtime/cpu/cpu_device.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "compiler/util/status_macros.h"
#include "runtime/cpu/kernels.h"

namespace trainc {
namespace {

constexpr int64_t kAlignment = 64;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<char, FreeDeleter>;

absl::StatusOr<AlignedBytes> AllocateZeroed(int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("negative allocation");
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
  // valid (64-byte) block so arena() is never null once allocated.
  const int64_t rounded =
      std::max<int64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment *
                                        kAlignment);
  char* p = static_cast<char*>(std::aligned_alloc(kAlignment, rounded));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  std::memset(p, 0, rounded);
  return AlignedBytes(p);
}

// Every compute op of plan.h, resolved once by Prepare.
enum class Op : uint8_t {
  kNotCompute,  // load_batch / all_reduce: the executor's, not a kernel
  kFused,       // an activation already computed by the linear before it
  kLinear,
  kLinearGradInput,
  kLinearGradParams,
  kRelu,
  kReluGrad,
  kGelu,
  kGeluGrad,
  kTanh,
  kTanhGrad,
  kLayerNorm,
  kLayerNormGradInput,
  kLayerNormGradParams,
  kAdd,
  kCopyGrad,
  kCrossEntropy,
  kCrossEntropyGrad,
  kMse,
  kMseGrad,
  kAdamW,
  kSgd,
};

struct OpInfo {
  const char* name;
  Op op;
  int inputs;   // minimum
  int outputs;  // minimum
};

constexpr OpInfo kOps[] = {
    {"load_batch", Op::kNotCompute, 0, 0},
    {"all_reduce", Op::kNotCompute, 0, 0},
    {"linear", Op::kLinear, 2, 1},
    {"linear_grad_input", Op::kLinearGradInput, 2, 1},
    {"linear_grad_params", Op::kLinearGradParams, 2, 1},
    {"relu", Op::kRelu, 1, 1},
    {"relu_grad", Op::kReluGrad, 2, 1},
    {"gelu", Op::kGelu, 1, 1},
    {"gelu_grad", Op::kGeluGrad, 2, 1},
    {"tanh", Op::kTanh, 1, 1},
    {"tanh_grad", Op::kTanhGrad, 2, 1},
    {"layernorm", Op::kLayerNorm, 3, 3},
    {"layernorm_grad_input", Op::kLayerNormGradInput, 5, 1},
    {"layernorm_grad_params", Op::kLayerNormGradParams, 4, 2},
    {"add", Op::kAdd, 2, 1},
    {"copy_grad", Op::kCopyGrad, 1, 1},
    {"cross_entropy", Op::kCrossEntropy, 2, 2},
    {"cross_entropy_grad", Op::kCrossEntropyGrad, 2, 1},
    {"mse", Op::kMse, 2, 1},
    {"mse_grad", Op::kMseGrad, 2, 1},
    {"optimizer", Op::kAdamW, 0, 0},  // kAdamW or kSgd, from plan.optimizer
};

// One instruction with everything RunKernel needs as plain values.
struct Kernel {
  Op op = Op::kNotCompute;
  bool accumulate = false;
  cpu::Activation act = cpu::Activation::kNone;
  int64_t rows = 0;  // batch rows (or elements for elementwise ops)
  int64_t in = 0;    // linear: in features; layernorm: d; ce: classes
  int64_t out = 0;   // linear: out features
  float scalar = 0;  // layernorm eps, loss-grad scale
  const float* x[5] = {};
  float* y[3] = {};
  const int32_t* labels = nullptr;
  float* state[2] = {};  // optimizer state spans
};

int64_t Elements(const Buffer& b) { return b.bytes / 4; }

}  // namespace

struct CpuDevice::State {
  CpuDeviceOptions options;

  AlignedBytes arena;
  int64_t arena_bytes = 0;
  std::vector<AlignedBytes> scratch;

  const Plan* prepared_plan = nullptr;
  std::vector<Kernel> kernels;  // by instruction id

  // Comm stream.
  struct Item {
    enum Kind { kWork, kRecord, kWait } kind;
    int event = 0;
    std::function<absl::Status()> work;
  };
  absl::Mutex mu;
  std::deque<Item> queue ABSL_GUARDED_BY(mu);
  int64_t pending ABSL_GUARDED_BY(mu) = 0;  // queued + running items
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::vector<char> recorded ABSL_GUARDED_BY(mu);
  absl::Status error ABSL_GUARDED_BY(mu);  // first failure, sticky
  std::thread worker;

  void SetError(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (error.ok()) error = status;
  }

  absl::Status CheckEvent(int event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (event < 0 || event >= static_cast<int>(recorded.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "event ", event, " out of range (ResetEvents(", recorded.size(),
          "))"));
    }
    return absl::OkStatus();
  }

  absl::Status Enqueue(Item item) {
    absl::MutexLock lock(&mu);
    if (!error.ok()) return error;
    if (item.kind != Item::kWork) RETURN_IF_ERROR(CheckEvent(item.event));
    queue.push_back(std::move(item));
    ++pending;
    return absl::OkStatus();
  }

  void WorkerLoop() {
    for (;;) {
      Item item;
      {
        absl::MutexLock lock(&mu);
        mu.Await(absl::Condition(
            +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return s->stop || !s->queue.empty();
            },
            this));
        if (queue.empty()) return;  // stop requested and drained
        item = std::move(queue.front());
        queue.pop_front();
      }
      switch (item.kind) {
        case Item::kWork: {
          bool failed;
          {
            absl::MutexLock lock(&mu);
            failed = !error.ok();
          }
          // After a failure the stream only drains: later work may depend
          // on what failed, but records and waits still run so that no
          // waiter hangs.
          absl::Status status = failed ? absl::OkStatus() : item.work();
          if (!status.ok()) {
            absl::MutexLock lock(&mu);
            SetError(status);
          }
          break;
        }
        case Item::kRecord: {
          absl::MutexLock lock(&mu);
          recorded[item.event] = 1;
          break;
        }
        case Item::kWait: {
          absl::MutexLock lock(&mu);
          std::pair<State*, int> arg(this, item.event);
          mu.Await(absl::Condition(
              +[](std::pair<State*, int>* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                return a->first->recorded[a->second] != 0 ||
                       !a->first->error.ok() || a->first->stop;
              },
              &arg));
          break;
        }
      }
      absl::MutexLock lock(&mu);
      --pending;
    }
  }
};

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : state_(std::make_unique<State>()) {
  state_->options = options;
  if (options.blas_threads > 0) cpu::SetBlasThreads(options.blas_threads);
  state_->worker = std::thread([s = state_.get()] { s->WorkerLoop(); });
}

CpuDevice::~CpuDevice() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stop = true;
  }
  state_->worker.join();
}

absl::Status CpuDevice::AllocateArena(int64_t bytes) {
  if (state_->arena != nullptr) {
    return absl::FailedPreconditionError("cpu: arena already allocated");
  }
  ASSIGN_OR_RETURN(state_->arena, AllocateZeroed(bytes));
  state_->arena_bytes = bytes;
  return absl::OkStatus();
}

char* CpuDevice::arena() { return state_->arena.get(); }

absl::StatusOr<char*> CpuDevice::AllocateScratch(int64_t bytes) {
  ASSIGN_OR_RETURN(AlignedBytes block, AllocateZeroed(bytes));
  state_->scratch.push_back(std::move(block));
  return state_->scratch.back().get();
}

absl::Status CpuDevice::Upload(int64_t offset, const void* src,
                               int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset + bytes > state_->arena_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "cpu: upload [", offset, ", +", bytes, ") outside the arena of ",
        state_->arena_bytes, " bytes"));
  }
  std::memcpy(state_->arena.get() + offset, src, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::Download(int64_t offset, void* dst, int64_t bytes) {
  if (offset < 0 || bytes < 0 || offset + bytes > state_->arena_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "cpu: download [", offset, ", +", bytes, ") outside the arena of ",
        state_->arena_bytes, " bytes"));
  }
  // The compute stream is this thread, so everything submitted to it is done.
  std::memcpy(dst, state_->arena.get() + offset, bytes);
  return absl::OkStatus();
}

absl::Status CpuDevice::Prepare(const Plan& plan) {
  if (state_->arena == nullptr) {
    return absl::FailedPreconditionError("cpu: Prepare before AllocateArena");
  }
  if (plan.arena_bytes > state_->arena_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu: plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", state_->arena_bytes));
  }
  char* base = state_->arena.get();
  const int num_buffers = static_cast<int>(plan.buffers.size());
  for (const Buffer& b : plan.buffers) {
    if (b.offset < 0 || b.bytes < 0 ||
        b.offset + b.bytes > state_->arena_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu: buffer ", b.name, " lies outside the arena"));
    }
  }
  std::vector<Kernel> kernels(plan.instructions.size());

  for (size_t i = 0; i < plan.instructions.size(); ++i) {
    const Instruction& instr = plan.instructions[i];
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu: instruction ", i, " (", instr.op, " \"", instr.label,
          "\"): ", why));
    };
    if (instr.id != static_cast<int>(i)) return fail("id != its index");
    const OpInfo* info = nullptr;
    for (const OpInfo& candidate : kOps) {
      if (instr.op == candidate.name) info = &candidate;
    }
    if (info == nullptr) return fail("unknown op");
    if (static_cast<int>(instr.inputs.size()) < info->inputs ||
        static_cast<int>(instr.outputs.size()) < info->outputs) {
      return fail(absl::StrCat("needs at least ", info->inputs, " inputs and ",
                               info->outputs, " outputs"));
    }
    for (int id : instr.inputs) {
      if (id < 0 || id >= num_buffers) return fail("input id out of range");
    }
    for (int id : instr.outputs) {
      if (id < 0 || id >= num_buffers) return fail("output id out of range");
    }
    Kernel& k = kernels[i];
    k.op = info->op;
    if (k.op == Op::kNotCompute) continue;
    if (instr.stream != Stream::kCompute) return fail("not on compute stream");

    auto in_buf = [&](int j) -> const Buffer& {
      return plan.buffers[instr.inputs[j]];
    };
    auto out_buf = [&](int j) -> const Buffer& {
      return plan.buffers[instr.outputs[j]];
    };
    auto fptr = [&](const Buffer& b) {
      return reinterpret_cast<float*>(base + b.offset);
    };
    for (size_t j = 0; j < instr.inputs.size() && j < 5; ++j) {
      k.x[j] = fptr(in_buf(j));
    }
    for (size_t j = 0; j < instr.outputs.size() && j < 3; ++j) {
      k.y[j] = fptr(out_buf(j));
    }
    auto attr = [&](const char* name, double fallback) {
      auto it = instr.attrs.find(name);
      return it == instr.attrs.end() ? fallback : it->second;
    };
    k.accumulate = attr("accumulate", 0) != 0;

    switch (k.op) {
      case Op::kLinear:
      case Op::kLinearGradInput:
      case Op::kLinearGradParams: {
        // The weight fixes [out, in]; the batch is whatever is left.
        const Buffer& w =
            k.op == Op::kLinearGradParams ? out_buf(0) : in_buf(1);
        if (w.shape.size() != 2) return fail("weight is not [out, in]");
        k.out = w.shape[0];
        k.in = w.shape[1];
        const Buffer& batch_side = in_buf(0);  // x or dy
        const int64_t per_row = k.op == Op::kLinear ? k.in : k.out;
        if (per_row == 0 || Elements(batch_side) % per_row != 0) {
          return fail("batch input does not match the weight");
        }
        k.rows = Elements(batch_side) / per_row;
        if (k.op == Op::kLinear) {
          if (Elements(out_buf(0)) != k.rows * k.out) return fail("y size");
          if (instr.inputs.size() < 3) k.x[2] = nullptr;  // no bias
          else if (Elements(in_buf(2)) != k.out) return fail("bias size");
        } else if (k.op == Op::kLinearGradInput) {
          if (Elements(out_buf(0)) != k.rows * k.in) return fail("dx size");
        } else {
          if (Elements(in_buf(1)) != k.rows * k.in) return fail("x size");
          if (instr.outputs.size() < 2) k.y[1] = nullptr;  // no bias
          else if (Elements(out_buf(1)) != k.out) return fail("db size");
        }
        break;
      }
      case Op::kRelu:
      case Op::kGelu:
      case Op::kTanh:
      case Op::kReluGrad:
      case Op::kGeluGrad:
      case Op::kTanhGrad:
      case Op::kAdd:
      case Op::kCopyGrad:
        k.rows = Elements(in_buf(0));
        for (int id : instr.inputs) {
          if (Elements(plan.buffers[id]) != k.rows) return fail("sizes differ");
        }
        if (Elements(out_buf(0)) != k.rows) return fail("output size");
        break;
      case Op::kLayerNorm:
      case Op::kLayerNormGradInput:
      case Op::kLayerNormGradParams: {
        const Buffer& per_feature = k.op == Op::kLayerNorm ? in_buf(1)
                                    : k.op == Op::kLayerNormGradInput
                                        ? in_buf(2)
                                        : out_buf(0);
        k.in = Elements(per_feature);
        if (k.in == 0 || Elements(in_buf(0)) % k.in != 0) {
          return fail("x is not [B, d]");
        }
        k.rows = Elements(in_buf(0)) / k.in;
        k.scalar = static_cast<float>(attr("eps", 1e-5));
        break;
      }
      case Op::kCrossEntropy:
      case Op::kCrossEntropyGrad: {
        const Buffer& label = in_buf(1);
        if (label.dtype != DType::kI32) return fail("label is not i32");
        k.labels = reinterpret_cast<const int32_t*>(base + label.offset);
        k.rows = Elements(label);
        if (k.rows == 0 || Elements(in_buf(0)) % k.rows != 0) {
          return fail("logits are not [B, C]");
        }
        k.in = Elements(in_buf(0)) / k.rows;
        if (k.op == Op::kCrossEntropy) {
          if (Elements(out_buf(0)) != 1) return fail("loss_sum is not [1]");
          if (Elements(out_buf(1)) != k.rows * k.in) return fail("probs size");
        } else {
          if (!instr.attrs.count("scale")) return fail("missing attr scale");
          k.scalar = static_cast<float>(attr("scale", 0));
        }
        break;
      }
      case Op::kMse:
      case Op::kMseGrad: {
        const Buffer& pred = in_buf(0);
        if (pred.shape.empty() || pred.shape[0] == 0) return fail("pred shape");
        k.rows = pred.shape[0];
        k.in = Elements(pred) / k.rows;
        if (Elements(in_buf(1)) != Elements(pred)) return fail("target size");
        if (k.op == Op::kMseGrad) {
          if (!instr.attrs.count("scale")) return fail("missing attr scale");
          k.scalar = static_cast<float>(attr("scale", 0));
        }
        break;
      }
      case Op::kAdamW:
      case Op::kSgd: {
        const int b = static_cast<int>(attr("bucket", -1));
        if (b < 0 || b >= static_cast<int>(plan.buckets.size())) {
          return fail("attr bucket out of range");
        }
        const Bucket& bucket = plan.buckets[b];
        if (bucket.param_span < 0 || bucket.param_span >= num_buffers ||
            bucket.grad_buffer < 0 || bucket.grad_buffer >= num_buffers) {
          return fail("bucket has no parameter span or gradient buffer");
        }
        const Buffer& params = plan.buffers[bucket.param_span];
        k.rows = Elements(params);
        if (bucket.bytes < params.bytes) {
          return fail("bucket gradient slot smaller than its parameters");
        }
        k.y[0] = fptr(params);
        k.x[0] = fptr(plan.buffers[bucket.grad_buffer]);
        size_t want_state;
        if (plan.optimizer.kind == "adamw") {
          k.op = Op::kAdamW;
          want_state = 2;
        } else if (plan.optimizer.kind == "sgd") {
          k.op = Op::kSgd;
          want_state = plan.optimizer.momentum != 0 ? 1 : 0;
        } else {
          return fail("unknown optimizer kind \"" + plan.optimizer.kind + "\"");
        }
        if (bucket.state_spans.size() != want_state) {
          return fail(absl::StrCat("bucket has ", bucket.state_spans.size(),
                                   " state spans, ", plan.optimizer.kind,
                                   " needs ", want_state));
        }
        for (size_t s = 0; s < want_state; ++s) {
          const int id = bucket.state_spans[s];
          if (id < 0 || id >= num_buffers ||
              Elements(plan.buffers[id]) != k.rows) {
            return fail("state span does not match the parameter span");
          }
          k.state[s] = fptr(plan.buffers[id]);
        }
        break;
      }
      case Op::kNotCompute:
      case Op::kFused:
        break;
    }
  }

  // Fuse "y = linear(...); h = act(y)" into one pass over y when nothing can
  // observe y between the two (adjacent, no events in between).
  for (size_t i = 0; i + 1 < kernels.size(); ++i) {
    Kernel& lin = kernels[i];
    Kernel& act = kernels[i + 1];
    const Instruction& a = plan.instructions[i];
    const Instruction& b = plan.instructions[i + 1];
    if (lin.op != Op::kLinear || !a.record_events.empty() ||
        !b.wait_events.empty() || b.inputs[0] != a.outputs[0] ||
        b.outputs[0] == a.outputs[0]) {
      continue;
    }
    cpu::Activation kind;
    if (act.op == Op::kRelu) kind = cpu::Activation::kRelu;
    else if (act.op == Op::kGelu) kind = cpu::Activation::kGelu;
    else if (act.op == Op::kTanh) kind = cpu::Activation::kTanh;
    else continue;
    lin.act = kind;
    lin.y[1] = act.y[0];
    act.op = Op::kFused;
  }

  state_->kernels = std::move(kernels);
  state_->prepared_plan = &plan;
  return absl::OkStatus();
}

absl::Status CpuDevice::RunKernel(const Plan& plan, const Instruction& instr,
                                  const StepState& step) {
  if (&plan != state_->prepared_plan || instr.id < 0 ||
      instr.id >= static_cast<int>(state_->kernels.size())) {
    return absl::FailedPreconditionError(
        "cpu: RunKernel for a plan that was not Prepare()d");
  }
  const Kernel& k = state_->kernels[instr.id];
  switch (k.op) {
    case Op::kNotCompute:
      return absl::InvalidArgumentError("cpu: " + instr.op +
                                        " is not a compute kernel");
    case Op::kFused:
      break;
    case Op::kLinear:
      cpu::LinearForward(k.x[0], k.x[1], k.x[2], k.rows, k.in, k.out, k.y[0],
                         k.act, k.y[1]);
      break;
    case Op::kLinearGradInput:
      cpu::LinearGradInput(k.x[0], k.x[1], k.rows, k.in, k.out, k.accumulate,
                           k.y[0]);
      break;
    case Op::kLinearGradParams:
      cpu::LinearGradParams(k.x[0], k.x[1], k.rows, k.in, k.out, k.accumulate,
                            k.y[0], k.y[1]);
      break;
    case Op::kRelu:
      cpu::Relu(k.x[0], k.rows, k.y[0]);
      break;
    case Op::kReluGrad:
      cpu::ReluGrad(k.x[0], k.x[1], k.rows, k.accumulate, k.y[0]);
      break;
    case Op::kGelu:
      cpu::Gelu(k.x[0], k.rows, k.y[0]);
      break;
    case Op::kGeluGrad:
      cpu::GeluGrad(k.x[0], k.x[1], k.rows, k.accumulate, k.y[0]);
      break;
    case Op::kTanh:
      cpu::Tanh(k.x[0], k.rows, k.y[0]);
      break;
    case Op::kTanhGrad:
      cpu::TanhGrad(k.x[0], k.x[1], k.rows, k.accumulate, k.y[0]);
      break;
    case Op::kLayerNorm:
      cpu::LayerNorm(k.x[0], k.x[1], k.x[2], k.rows, k.in, k.scalar, k.y[0],
                     k.y[1], k.y[2]);
      break;
    case Op::kLayerNormGradInput:
      cpu::LayerNormGradInput(k.x[0], k.x[1], k.x[2], k.x[3], k.x[4], k.rows,
                              k.in, k.accumulate, k.y[0]);
      break;
    case Op::kLayerNormGradParams:
      cpu::LayerNormGradParams(k.x[0], k.x[1], k.x[2], k.x[3], k.rows, k.in,
                               k.accumulate, k.y[0], k.y[1]);
      break;
    case Op::kAdd:
      cpu::Add(k.x[0], k.x[1], k.rows, k.y[0]);
      break;
    case Op::kCopyGrad:
      cpu::CopyGrad(k.x[0], k.rows, k.accumulate, k.y[0]);
      break;
    case Op::kCrossEntropy:
      if (!cpu::CrossEntropy(k.x[0], k.labels, k.rows, k.in, k.y[0], k.y[1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cpu: ", instr.label, ": a label is outside [0, ", k.in, ")"));
      }
      break;
    case Op::kCrossEntropyGrad:
      cpu::CrossEntropyGrad(k.x[0], k.labels, k.rows, k.in, k.scalar,
                            k.accumulate, k.y[0]);
      break;
    case Op::kMse:
      cpu::Mse(k.x[0], k.x[1], k.rows, k.in, k.y[0]);
      break;
    case Op::kMseGrad:
      cpu::MseGrad(k.x[0], k.x[1], k.rows, k.in, k.scalar, k.accumulate,
                   k.y[0]);
      break;
    case Op::kAdamW: {
      const OptimizerConfig& o = plan.optimizer;
      cpu::AdamWParams h;
      h.lr = step.lr;
      h.beta1 = o.beta1;
      h.beta2 = o.beta2;
      h.eps = o.eps;
      h.weight_decay = o.weight_decay;
      h.step = step.step;
      cpu::AdamW(h, k.x[0], k.rows, k.y[0], k.state[0], k.state[1]);
      break;
    }
    case Op::kSgd: {
      const OptimizerConfig& o = plan.optimizer;
      cpu::SgdParams h;
      h.lr = step.lr;
      h.momentum = o.momentum;
      h.weight_decay = o.weight_decay;
      h.nesterov = o.nesterov;
      h.step = step.step;
      cpu::Sgd(h, k.x[0], k.rows, k.y[0], k.state[0]);
      break;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::OrderedSum(Stream stream, const float* src, int64_t n,
                                   int64_t count, float* dst) {
  return Submit(stream, [=] {
    cpu::OrderedSum(src, n, count, dst);
    return absl::OkStatus();
  });
}

absl::Status CpuDevice::Submit(Stream stream,
                               std::function<absl::Status()> work) {
  State& s = *state_;
  // Work submitted to the comm stream from the comm stream's own work (the
  // executor's deterministic all-reduce calls OrderedSum there) runs at that
  // point of the stream, as it would on a CUDA stream; queueing it would put
  // it behind event records issued after the enclosing work.
  if (stream == Stream::kComm &&
      std::this_thread::get_id() != s.worker.get_id()) {
    State::Item item{State::Item::kWork, 0, std::move(work)};
    return s.Enqueue(std::move(item));
  }
  {
    absl::MutexLock lock(&s.mu);
    if (!s.error.ok()) return s.error;
  }
  absl::Status status = work();
  if (!status.ok()) {
    absl::MutexLock lock(&s.mu);
    s.SetError(status);
  }
  return status;
}

absl::Status CpuDevice::RecordEvent(Stream stream, int event) {
  State& s = *state_;
  if (stream == Stream::kComm) {
    return s.Enqueue({State::Item::kRecord, event, nullptr});
  }
  absl::MutexLock lock(&s.mu);
  RETURN_IF_ERROR(s.CheckEvent(event));
  s.recorded[event] = 1;  // the compute stream has already done its work
  return absl::OkStatus();
}

absl::Status CpuDevice::WaitEvent(Stream stream, int event) {
  State& s = *state_;
  if (stream == Stream::kComm) {
    return s.Enqueue({State::Item::kWait, event, nullptr});
  }
  absl::MutexLock lock(&s.mu);
  RETURN_IF_ERROR(s.CheckEvent(event));
  std::pair<State*, int> arg(&s, event);
  s.mu.Await(absl::Condition(
      +[](std::pair<State*, int>* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return a->first->recorded[a->second] != 0 || !a->first->error.ok();
      },
      &arg));
  return s.error;
}

absl::Status CpuDevice::ResetEvents(int num_events) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (s.pending != 0) {
    return absl::FailedPreconditionError(
        "cpu: ResetEvents while the comm stream is busy");
  }
  s.recorded.assign(num_events, 0);
  return s.error;
}

absl::Status CpuDevice::Synchronize() {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  s.mu.Await(absl::Condition(
      +[](State* st) ABSL_NO_THREAD_SAFETY_ANALYSIS { return st->pending == 0; },
      &s));
  return s.error;
}

}  // namespace trainc
