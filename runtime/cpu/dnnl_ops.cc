#include "runtime/cpu/dnnl_ops.h"

#include <omp.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/blocked_pool.h"

namespace trainc::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dims = memory::dims;
constexpr auto kF32 = memory::data_type::f32;

constexpr int64_t kAlign = 64;
int64_t AlignUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

Tag BlockedTag() { return ChannelBlock() == 16 ? Tag::nChw16c : Tag::nChw8c; }

// What an instruction does with the layout of its operands.
enum class LayoutUse {
  kDnnl,         // convolution, pooling: any layout per operand
  kElementwise,  // the same op on every element: all operands alike
  kConvert,      // flatten and its gradient: 4-D one side, 2-D the other
  kPlain,        // reads its operands as NCHW (linear, losses, dropout...)
};

LayoutUse UseOf(const Plan& plan, const Instruction& in) {
  // From the kernel families (compiler/ops/kernel_families.h): the window
  // family runs on oneDNN; a pointwise op reads and writes one layout.
  const KernelOp op = KernelOpOfInstruction(in.op);
  if (IsDnnlOp(op)) return LayoutUse::kDnnl;
  if ((op == KernelOp::kReshape || op == KernelOp::kCopyGrad) && in.inputs.size() == 1 &&
      in.outputs.size() == 1) {
    const Buffer& x = plan.buffers[in.inputs[0]];
    const Buffer& y = plan.buffers[in.outputs[0]];
    if (x.shape == y.shape) return LayoutUse::kElementwise;
    if (x.bytes == y.bytes && (x.shape.size() == 4) != (y.shape.size() == 4)) {
      return LayoutUse::kConvert;
    }
    return LayoutUse::kPlain;
  }
  if (PointwiseArity(op) > 0) return LayoutUse::kElementwise;
  return LayoutUse::kPlain;
}

// The layout each operand of one instruction is kept in.
struct Layouts {
  Tag in[5] = {Tag::nchw, Tag::nchw, Tag::nchw, Tag::nchw, Tag::nchw};
  Tag out[3] = {Tag::nchw, Tag::nchw, Tag::nchw};
};

Layouts LayoutsOf(const Instruction& instr, const std::vector<bool>& blocked) {
  Layouts t;
  for (size_t j = 0; j < instr.inputs.size() && j < 5; ++j) {
    if (blocked[instr.inputs[j]]) t.in[j] = BlockedTag();
  }
  for (size_t j = 0; j < instr.outputs.size() && j < 3; ++j) {
    if (blocked[instr.outputs[j]]) t.out[j] = BlockedTag();
  }
  return t;
}

// One primitive with its arguments, or (custom set) a kernel of ours.
struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
  std::function<void()> custom;
};

// What one instruction runs: reorders into oneDNN's layouts, the
// operation, reorders back, then `out += temp` for accumulated outputs.
struct Program {
  std::vector<Step> steps;
  struct Accumulate {
    const float* temp;
    float* out;
    int64_t n;
  };
  std::vector<Accumulate> accumulate;
};

// Lays out one instruction's workspace and, unless dry (sizing only),
// builds the memory objects and reorders over it.
class Builder {
 public:
  Builder(const dnnl::engine& engine, char* workspace, bool dry)
      : engine_(engine), base_(workspace), dry_(dry) {}

  int64_t used() const { return used_; }
  bool dry() const { return dry_; }

  // `bytes` of the workspace, 64-byte aligned.
  void* Take(int64_t bytes) {
    void* p = dry_ || base_ == nullptr ? nullptr : base_ + used_;
    used_ += AlignUp(bytes);
    return p;
  }

  // An input the user holds at `data` in the arena's layout `arena`, as the primitive
  // wants it (`want`): the buffer itself, or a copy reordered into the
  // workspace before the primitive runs.
  memory In(const memory::desc& arena, const void* data, const memory::desc& want) {
    if (want == arena) return Wrap(arena, const_cast<void*>(data));
    memory staged = Wrap(want, Take(want.get_size()));
    if (!dry_) {
      memory user = Wrap(arena, const_cast<void*>(data));
      before_.push_back({dnnl::reorder(user, staged), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, staged}}});
    }
    return staged;
  }

  // An output the user wants at `data` in the arena's layout `arena`, written (or, with
  // `accumulate`, added) from the primitive's layout `want`.
  memory Out(const memory::desc& arena, float* data, const memory::desc& want,
             bool accumulate) {
    void* target = data;
    if (accumulate) {
      const int64_t n = static_cast<int64_t>(arena.get_size() / sizeof(float));
      target = Take(arena.get_size());
      if (!dry_) accumulate_.push_back({static_cast<const float*>(target), data, n});
    }
    if (want == arena) return Wrap(arena, target);
    memory staged = Wrap(want, Take(want.get_size()));
    if (!dry_) {
      memory user = Wrap(arena, target);
      after_.push_back({dnnl::reorder(staged, user), {{DNNL_ARG_FROM, staged}, {DNNL_ARG_TO, user}}});
    }
    return staged;
  }

  memory Scratchpad(const memory::desc& md) { return Wrap(md, Take(md.get_size())); }

  Program Finish(dnnl::primitive primitive, std::unordered_map<int, memory> args) {
    return Finish({std::move(primitive), std::move(args), nullptr});
  }

  // The same with our kernel in the primitive's place.
  Program Finish(std::function<void()> custom) { return Finish({{}, {}, std::move(custom)}); }

  Program Finish(Step main) {
    Program p;
    p.steps = std::move(before_);
    p.steps.push_back(std::move(main));
    for (Step& s : after_) p.steps.push_back(std::move(s));
    p.accumulate = std::move(accumulate_);
    return p;
  }

 private:
  memory Wrap(const memory::desc& md, void* data) {
    if (dry_) return memory();
    return memory(md, engine_, data);
  }

  const dnnl::engine& engine_;
  char* base_;
  bool dry_;
  int64_t used_ = 0;
  std::vector<Step> before_, after_;
  std::vector<Program::Accumulate> accumulate_;
};

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::desc Plain(const Dims& dims, Tag tag) { return memory::desc(dims, kF32, tag); }
memory::desc Any(const Dims& dims) { return memory::desc(dims, kF32, Tag::any); }

struct ConvShapes {
  Dims image, weight, bias, out, strides, padding;
};
ConvShapes ShapesOf(const WindowGeometry& g) {
  return {{g.n, g.c, g.h, g.w},     {g.o, g.c, g.kh, g.kw}, {g.o},
          {g.n, g.o, g.oh, g.ow},   {g.stride, g.stride},   {g.padding, g.padding}};
}

// The forward convolution every convolution primitive is defined against
// (the backward ones take it as their hint).
dnnl::convolution_forward::primitive_desc ConvForwardDesc(const WindowGeometry& g,
                                                          const dnnl::engine& engine,
                                                          bool relu = false) {
  const ConvShapes s = ShapesOf(g);
  const memory::desc bias = g.has_bias ? Plain(s.bias, Tag::a) : memory::desc();
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                    dnnl::algorithm::convolution_direct, Any(s.image),
                                    Any(s.weight), bias, Any(s.out), s.strides, s.padding,
                                    s.padding);
  dnnl::primitive_attr attr = UserScratchpad();
  if (relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  return dnnl::convolution_forward::primitive_desc(d, attr, engine);
}

// conv2d, and conv2d_relu: the relu a post-op writing relu(conv) to y.
Program BuildConv2d(const KernelArgs& k, const Layouts& t, const dnnl::engine& engine,
                    Builder& b) {
  const WindowGeometry& g = k.window;
  const ConvShapes s = ShapesOf(g);
  auto pd = ConvForwardDesc(g, engine, k.op == KernelOp::kConv2dRelu);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = b.In(Plain(s.image, t.in[0]), k.x[0], pd.src_desc());
  args[DNNL_ARG_WEIGHTS] = b.In(Plain(s.weight, Tag::oihw), k.x[1], pd.weights_desc());
  if (g.has_bias) args[DNNL_ARG_BIAS] = b.In(Plain(s.bias, Tag::a), k.x[2], pd.bias_desc());
  args[DNNL_ARG_DST] = b.Out(Plain(s.out, t.out[0]), k.y[0], pd.dst_desc(), false);
  args[DNNL_ARG_SCRATCHPAD] = b.Scratchpad(pd.scratchpad_desc());
  if (b.dry()) return {};
  return b.Finish(dnnl::convolution_forward(pd), std::move(args));
}

Program BuildConv2dGradInput(const KernelArgs& k, const Layouts& t,
                             const dnnl::engine& engine, Builder& b) {
  const WindowGeometry& g = k.window;
  const ConvShapes s = ShapesOf(g);
  auto hint = ConvForwardDesc(g, engine);
  dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, Any(s.image),
                                          Any(s.weight), Any(s.out), s.strides, s.padding,
                                          s.padding);
  dnnl::convolution_backward_data::primitive_desc pd(d, UserScratchpad(), engine, hint);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_DIFF_DST] = b.In(Plain(s.out, t.in[0]), k.x[0], pd.diff_dst_desc());
  args[DNNL_ARG_WEIGHTS] = b.In(Plain(s.weight, Tag::oihw), k.x[1], pd.weights_desc());
  args[DNNL_ARG_DIFF_SRC] =
      b.Out(Plain(s.image, t.out[0]), k.y[0], pd.diff_src_desc(), k.accumulate);
  args[DNNL_ARG_SCRATCHPAD] = b.Scratchpad(pd.scratchpad_desc());
  if (b.dry()) return {};
  return b.Finish(dnnl::convolution_backward_data(pd), std::move(args));
}

Program BuildConv2dGradParams(const KernelArgs& k, const Layouts& t,
                              const dnnl::engine& engine, Builder& b) {
  const WindowGeometry& g = k.window;
  const ConvShapes s = ShapesOf(g);
  auto hint = ConvForwardDesc(g, engine);
  const memory::desc bias = g.has_bias ? Plain(s.bias, Tag::a) : memory::desc();
  dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct,
                                             Any(s.image), Any(s.weight), bias, Any(s.out),
                                             s.strides, s.padding, s.padding);
  dnnl::convolution_backward_weights::primitive_desc pd(d, UserScratchpad(), engine, hint);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_DIFF_DST] = b.In(Plain(s.out, t.in[0]), k.x[0], pd.diff_dst_desc());
  args[DNNL_ARG_SRC] = b.In(Plain(s.image, t.in[1]), k.x[1], pd.src_desc());
  args[DNNL_ARG_DIFF_WEIGHTS] =
      b.Out(Plain(s.weight, Tag::oihw), k.y[0], pd.diff_weights_desc(), k.accumulate);
  if (g.has_bias) {
    args[DNNL_ARG_DIFF_BIAS] =
        b.Out(Plain(s.bias, Tag::a), k.y[1], pd.diff_bias_desc(), k.accumulate);
  }
  args[DNNL_ARG_SCRATCHPAD] = b.Scratchpad(pd.scratchpad_desc());
  if (b.dry()) return {};
  return b.Finish(dnnl::convolution_backward_weights(pd), std::move(args));
}

dnnl::algorithm PoolAlgorithm(KernelOp op) {
  return op == KernelOp::kMaxPool2d || op == KernelOp::kMaxPool2dGrad
             ? dnnl::algorithm::pooling_max
             : dnnl::algorithm::pooling_avg_include_padding;
}

dnnl::pooling_forward::primitive_desc PoolForwardDesc(const WindowGeometry& g, KernelOp op,
                                                      Tag layout, const dnnl::engine& engine) {
  const ConvShapes s = ShapesOf(g);
  dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training, PoolAlgorithm(op),
                                Plain(s.image, layout), Plain(s.out, layout), s.strides,
                                {g.kh, g.kw}, s.padding, s.padding);
  return dnnl::pooling_forward::primitive_desc(d, UserScratchpad(), engine);
}

// Max pooling's oneDNN workspace (where each maximum came from) lives in
// the plan's argmax buffer, one i32 per output element.
bool ArgmaxFits(const dnnl::pooling_forward::primitive_desc& pd, const WindowGeometry& g) {
  return static_cast<int64_t>(pd.workspace_desc().get_size()) <= g.n * g.o * g.oh * g.ow * 4;
}

// The layout pooling runs in. oneDNN pools plain NCHW with its reference
// loops (20x slower than its JIT kernels here), so the image is reordered
// to channel blocks of the CPU's vector width (if it is not already) when a
// JIT kernel takes it and max pooling's workspace fits the argmax buffer;
// else plain. A function of the geometry and the CPU only, so the forward
// and backward instructions agree.
Tag PoolLayout(const WindowGeometry& g, KernelOp forward_op, const dnnl::engine& engine) {
  for (Tag blocked : {BlockedTag()}) {
    try {
      auto pd = PoolForwardDesc(g, forward_op, blocked, engine);
      const std::string impl = pd.impl_info_str();
      if (impl.rfind("jit", 0) != 0) continue;
      if (forward_op == KernelOp::kMaxPool2d && !ArgmaxFits(pd, g)) continue;
      return blocked;
    } catch (const dnnl::error&) {
    }
  }
  return Tag::nchw;
}

absl::Status CheckArgmaxFits(const dnnl::pooling_forward::primitive_desc& pd,
                             const WindowGeometry& g) {
  if (ArgmaxFits(pd, g)) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("oneDNN's max-pooling workspace needs ",
                                          pd.workspace_desc().get_size(),
                                          " bytes, the argmax buffer holds ",
                                          g.n * g.o * g.oh * g.ow * 4));
}

// Whether max pooling in `pd`'s layout runs on blocked_pool.h's kernels
// rather than oneDNN's (whose workspace they read and write alike): only
// where oneDNN's workspace is theirs, u8 window indices in the image's
// channel-blocked layout.
bool OursPool(const WindowGeometry& g, KernelOp forward_op,
              const dnnl::pooling_forward::primitive_desc& pd) {
  if (forward_op != KernelOp::kMaxPool2d || !BlockedMaxPoolRuns(g, ChannelBlock())) {
    return false;
  }
  const ConvShapes s = ShapesOf(g);
  return pd.src_desc() == Plain(s.image, BlockedTag()) &&
         pd.workspace_desc() == memory::desc(s.out, memory::data_type::u8, BlockedTag());
}

absl::StatusOr<Program> BuildPool(const KernelArgs& k, const Layouts& t,
                                  const dnnl::engine& engine, Builder& b) {
  const WindowGeometry& g = k.window;
  const ConvShapes s = ShapesOf(g);
  auto pd = PoolForwardDesc(g, k.op, PoolLayout(g, k.op, engine), engine);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_SRC] = b.In(Plain(s.image, t.in[0]), k.x[0], pd.src_desc());
  args[DNNL_ARG_DST] = b.Out(Plain(s.out, t.out[0]), k.y[0], pd.dst_desc(), false);
  if (k.op == KernelOp::kMaxPool2d) {
    if (absl::Status fits = CheckArgmaxFits(pd, g); !fits.ok()) return fits;
    if (!b.dry()) args[DNNL_ARG_WORKSPACE] = memory(pd.workspace_desc(), engine, k.y[1]);
  }
  if (OursPool(g, k.op, pd)) {
    if (b.dry()) return Program{};
    const float* x = static_cast<const float*>(args[DNNL_ARG_SRC].get_data_handle());
    float* y = static_cast<float*>(args[DNNL_ARG_DST].get_data_handle());
    auto* argmax = reinterpret_cast<uint8_t*>(k.y[1]);
    const int64_t block = ChannelBlock();
    return b.Finish([=] { BlockedMaxPoolForward(g, block, x, y, argmax); });
  }
  args[DNNL_ARG_SCRATCHPAD] = b.Scratchpad(pd.scratchpad_desc());
  if (b.dry()) return Program{};
  return b.Finish(dnnl::pooling_forward(pd), std::move(args));
}

absl::StatusOr<Program> BuildPoolGrad(const KernelArgs& k, const Layouts& t,
                                      const dnnl::engine& engine, Builder& b) {
  const WindowGeometry& g = k.window;
  const ConvShapes s = ShapesOf(g);
  const KernelOp forward_op =
      k.op == KernelOp::kMaxPool2dGrad ? KernelOp::kMaxPool2d : KernelOp::kAvgPool2d;
  const Tag layout = PoolLayout(g, forward_op, engine);
  auto hint = PoolForwardDesc(g, forward_op, layout, engine);
  dnnl::pooling_backward::desc d(PoolAlgorithm(k.op), Plain(s.image, layout),
                                 Plain(s.out, layout), s.strides, {g.kh, g.kw}, s.padding,
                                 s.padding);
  dnnl::pooling_backward::primitive_desc pd(d, UserScratchpad(), engine, hint);
  std::unordered_map<int, memory> args;
  args[DNNL_ARG_DIFF_DST] = b.In(Plain(s.out, t.in[0]), k.x[0], pd.diff_dst_desc());
  args[DNNL_ARG_DIFF_SRC] =
      b.Out(Plain(s.image, t.out[0]), k.y[0], pd.diff_src_desc(), k.accumulate);
  if (k.op == KernelOp::kMaxPool2dGrad) {
    if (absl::Status fits = CheckArgmaxFits(hint, g); !fits.ok()) return fits;
    if (!b.dry()) {
      args[DNNL_ARG_WORKSPACE] =
          memory(hint.workspace_desc(), engine, const_cast<float*>(k.x[3]));
    }
  }
  if (OursPool(g, forward_op, hint)) {
    if (b.dry()) return Program{};
    const float* dy = static_cast<const float*>(args[DNNL_ARG_DIFF_DST].get_data_handle());
    float* dx = static_cast<float*>(args[DNNL_ARG_DIFF_SRC].get_data_handle());
    const auto* argmax = reinterpret_cast<const uint8_t*>(k.x[3]);
    const int64_t block = ChannelBlock();
    return b.Finish([=] { BlockedMaxPoolBackward(g, block, dy, argmax, dx); });
  }
  args[DNNL_ARG_SCRATCHPAD] = b.Scratchpad(pd.scratchpad_desc());
  if (b.dry()) return Program{};
  return b.Finish(dnnl::pooling_backward(pd), std::move(args));
}

// flatten (reshape) of a channel-blocked image, or its gradient (copy_grad)
// into one: a reorder between the blocked 4-D side and the plain 2-D side
// (seen as NCHW), adding into the output with a sum post-op when it
// accumulates. No workspace.
absl::StatusOr<Program> BuildConvert(const Plan& plan, const Instruction& instr,
                                     const KernelArgs& k, const Layouts& t,
                                     const dnnl::engine& engine, Builder& b) {
  const Buffer& x = plan.buffers[instr.inputs[0]];
  const Buffer& y = plan.buffers[instr.outputs[0]];
  const std::vector<int64_t>& image = x.shape.size() == 4 ? x.shape : y.shape;
  const Dims dims(image.begin(), image.end());
  if (b.dry()) return Program{};
  memory from(Plain(dims, t.in[0]), engine, const_cast<float*>(k.x[0]));
  memory to(Plain(dims, t.out[0]), engine, k.y[0]);
  dnnl::primitive_attr attr;
  if (k.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  dnnl::reorder::primitive_desc pd(from, to, attr);
  Program p;
  p.steps.push_back({dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}});
  return p;
}

// Builds (or, dry, sizes) the program of one instruction; oneDNN reports
// errors as exceptions, turned into a Status here.
absl::StatusOr<Program> Build(const Plan& plan, const Instruction& instr, const KernelArgs& k,
                              const std::vector<bool>& blocked, const dnnl::engine& engine,
                              Builder& b) {
  const Layouts t = LayoutsOf(instr, blocked);
  try {
    switch (k.op) {
      case KernelOp::kConv2d:
      case KernelOp::kConv2dRelu: return BuildConv2d(k, t, engine, b);
      case KernelOp::kConv2dGradInput: return BuildConv2dGradInput(k, t, engine, b);
      case KernelOp::kConv2dGradParams: return BuildConv2dGradParams(k, t, engine, b);
      case KernelOp::kMaxPool2d:
      case KernelOp::kAvgPool2d: return BuildPool(k, t, engine, b);
      case KernelOp::kMaxPool2dGrad:
      case KernelOp::kAvgPool2dGrad: return BuildPoolGrad(k, t, engine, b);
      case KernelOp::kReshape:
      case KernelOp::kCopyGrad: return BuildConvert(plan, instr, k, t, engine, b);
      default: return absl::InternalError("not a oneDNN op");
    }
  } catch (const dnnl::error& e) {
    return absl::InvalidArgumentError(absl::StrCat("oneDNN: ", e.what()));
  }
}

// Whether oneDNN runs `instr`: convolution and pooling, and the copies
// that change a buffer's layout.
bool RunsOnDnnl(const Plan& plan, const Instruction& instr, const std::vector<bool>& blocked,
                KernelOp op) {
  if (IsDnnlOp(op)) return true;
  if (op != KernelOp::kReshape && op != KernelOp::kCopyGrad) return false;
  const Layouts t = LayoutsOf(instr, blocked);
  return UseOf(plan, instr) == LayoutUse::kConvert && t.in[0] != t.out[0];
}

const dnnl::engine& CpuEngine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

}  // namespace

void SetDnnlThreads(int threads) { omp_set_num_threads(threads); }

int64_t ChannelBlock() {
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  const int avx512 = static_cast<int>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512 ? 16 : 8;
}

bool IsDnnlOp(KernelOp op) { return IsWindowOp(op); }

std::vector<bool> BlockedBuffers(const Plan& plan) {
  const int64_t block = ChannelBlock();
  std::vector<bool> blocked(plan.buffers.size(), false);
  for (const Buffer& b : plan.buffers) {
    blocked[b.id] = b.shape.size() == 4 && b.dtype == DType::kF32 && b.shape[1] % block == 0 &&
                    (b.kind == BufferKind::kActivation || b.kind == BufferKind::kActivationGrad);
  }
  // Unblock until every instruction can take its operands' layouts: an
  // op reading NCHW gets NCHW; an elementwise op gets one layout for all.
  for (bool changed = true; changed;) {
    changed = false;
    for (const Instruction& in : plan.instructions) {
      const LayoutUse use = UseOf(plan, in);
      if (use == LayoutUse::kDnnl || use == LayoutUse::kConvert) continue;
      bool any = false, all = true;
      for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
        for (int id : *ids) {
          any = any || blocked[id];
          all = all && blocked[id];
        }
      }
      if (!any || (use == LayoutUse::kElementwise && all)) continue;
      for (const std::vector<int>* ids : {&in.inputs, &in.outputs}) {
        for (int id : *ids) blocked[id] = false;
      }
      changed = true;
    }
  }
  return blocked;
}

absl::StatusOr<int64_t> WorkspaceBytes(const Plan& plan, const Instruction& instr) {
  absl::StatusOr<KernelArgs> k = DescribeKernel(plan, instr, "cpu");
  if (!k.ok()) return k.status();
  if (k->op == KernelOp::kLinearGradInputGelu) return LinearGradInputGeluWorkspaceBytes(*k);
  if (!IsDnnlOp(k->op)) return 0;
  Builder sizing(CpuEngine(), nullptr, /*dry=*/true);
  absl::StatusOr<Program> program =
      Build(plan, instr, *k, BlockedBuffers(plan), CpuEngine(), sizing);
  if (!program.ok()) return program.status();
  return sizing.used();
}

struct DnnlOps::State {
  dnnl::stream stream{CpuEngine()};
  std::unordered_map<int, Program> programs;  // by instruction id
  std::unordered_set<int> converts;           // the layout copies among them
};

DnnlOps::DnnlOps() : state_(std::make_unique<State>()) {}
DnnlOps::~DnnlOps() = default;

absl::Status DnnlOps::Prepare(const Plan& plan, const std::vector<KernelArgs>& kernels) {
  state_->programs.clear();
  state_->converts.clear();
  const std::vector<bool> blocked = BlockedBuffers(plan);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelArgs& k = kernels[i];
    const Instruction& instr = plan.instructions[i];
    if (!RunsOnDnnl(plan, instr, blocked, k.op)) continue;
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("cpu: instruction ", i, " (", instr.op,
                                                     " \"", instr.label, "\"): ", why));
    };
    // One build: the memory objects only point into the workspace, so a
    // layout that would run past the plan's reservation is refused here,
    // before anything runs.
    Builder builder(CpuEngine(), k.workspace, /*dry=*/false);
    absl::StatusOr<Program> program =
        Build(plan, instr, k, blocked, CpuEngine(), builder);
    if (!program.ok()) return fail(std::string(program.status().message()));
    if (builder.used() > k.workspace_bytes) {
      return fail(absl::StrCat("oneDNN needs ", builder.used(),
                               " bytes of workspace, the plan reserves ", k.workspace_bytes,
                               " (a plan compiled for another device? compile it with "
                               "--device cpu)"));
    }
    state_->programs[static_cast<int>(i)] = *std::move(program);
    if (!IsDnnlOp(k.op)) state_->converts.insert(static_cast<int>(i));
  }
  return absl::OkStatus();
}

bool DnnlOps::Converts(int id) const { return state_->converts.count(id) > 0; }

absl::Status DnnlOps::Run(int id) {
  auto it = state_->programs.find(id);
  if (it == state_->programs.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu: instruction ", id, " has no oneDNN primitive"));
  }
  try {
    for (Step& step : it->second.steps) {
      if (step.custom) {
        state_->stream.wait();
        step.custom();
      } else {
        step.primitive.execute(state_->stream, step.args);
      }
    }
    state_->stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("cpu: oneDNN: ", e.what()));
  }
  for (const Program::Accumulate& a : it->second.accumulate) {
    for (int64_t j = 0; j < a.n; ++j) a.out[j] += a.temp[j];
  }
  return absl::OkStatus();
}

}  // namespace trainc::cpu
