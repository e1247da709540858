#include "compiler/autodiff/reference_eval.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/ops/kernel_families.h"
#include "compiler/ops/pointwise.h"
#include "compiler/ops/unit_family.h"

namespace trainc {
namespace {

// An i32 index held in the double arena.
int64_t Index(double v) { return static_cast<int64_t>(std::llround(v)); }

class Writer {
 public:
  Writer(const TensorRef& t, bool accumulate) : t_(t), acc_(accumulate) {}
  void Set(int64_t i, double v) { t_.data[i] = acc_ ? t_.data[i] + v : v; }

 private:
  TensorRef t_;
  bool acc_;
};

// A pointwise op (compiler/ops/pointwise.h): its formula in f64.
template <typename F, int kArity>
void Pointwise(const std::vector<TensorRef>& in, const std::vector<TensorRef>& out, bool acc) {
  Writer y(out[0], acc);
  for (int64_t i = 0; i < in[0].size(); ++i) {
    if constexpr (kArity == 1) {
      y.Set(i, F::F(in[0].data[i]));
    } else {
      y.Set(i, F::F(in[0].data[i], in[1].data[i]));
    }
  }
}

// Runs `op` if it is pointwise; false otherwise.
bool RunPointwise(KernelOp op, const std::vector<TensorRef>& in,
                  const std::vector<TensorRef>& out, bool acc) {
  switch (op) {
#define TRAINC_REFERENCE_POINTWISE(name, Name, arity) \
  case KernelOp::k##Name:                             \
    Pointwise<pointwise::Name, arity>(in, out, acc);  \
    return true;
    TRAINC_POINTWISE_OPS(TRAINC_REFERENCE_POINTWISE)
#undef TRAINC_REFERENCE_POINTWISE
    default:
      return false;
  }
}

// An instruction's attributes.
class Attrs {
 public:
  explicit Attrs(const std::map<std::string, double>& attrs) : attrs_(attrs) {}
  const std::map<std::string, double>& map() const { return attrs_; }
  // 0 when absent.
  double operator()(const char* name) const {
    auto it = attrs_.find(name);
    return it == attrs_.end() ? 0.0 : it->second;
  }

 private:
  const std::map<std::string, double>& attrs_;
};

// A convolution or pooling window over an NCHW image (the image side is
// [N, C, H, W], the other [N, O, OH, OW], O = C for pooling).
struct Window {
  int64_t N = 0, C = 0, H = 0, W = 0, O = 0, OH = 0, OW = 0, KH = 0, KW = 0, S = 1, P = 0;
  int64_t Image(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return ((n * C + c) * H + h) * W + w;
  }
  int64_t Other(int64_t n, int64_t o, int64_t i, int64_t j) const {
    return ((n * O + o) * OH + i) * OW + j;
  }
  // Image row (column) of window row p at output row i, maybe outside.
  int64_t Row(int64_t i, int64_t p) const { return i * S + p - P; }
  bool Inside(int64_t h, int64_t w) const { return h >= 0 && h < H && w >= 0 && w < W; }
};

absl::StatusOr<Window> WindowOf(const TensorRef& image, int64_t out_channels, int64_t kh,
                                int64_t kw, double stride, double padding) {
  Window g;
  if (image.shape.size() != 4) {
    return absl::InvalidArgumentError("reference_eval: the image is not [N, C, H, W]");
  }
  g.N = image.shape[0];
  g.C = image.shape[1];
  g.H = image.shape[2];
  g.W = image.shape[3];
  g.O = out_channels < 0 ? g.C : out_channels;
  g.KH = kh;
  g.KW = kw;
  g.S = static_cast<int64_t>(stride);
  g.P = static_cast<int64_t>(padding);
  if (g.S < 1 || (g.H + 2 * g.P - kh) % g.S || (g.W + 2 * g.P - kw) % g.S) {
    return absl::InvalidArgumentError("reference_eval: windows do not tile the image");
  }
  g.OH = (g.H + 2 * g.P - kh) / g.S + 1;
  g.OW = (g.W + 2 * g.P - kw) / g.S + 1;
  return g;
}

// Calls f(n, o_or_c, i, j, h, w) for every (output element, window
// element inside the image) pair; `c` is the output's channel.
template <typename F>
void ForEachWindowElement(const Window& g, F f) {
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t c = 0; c < g.O; ++c) {
      for (int64_t i = 0; i < g.OH; ++i) {
        for (int64_t j = 0; j < g.OW; ++j) {
          for (int64_t p = 0; p < g.KH; ++p) {
            for (int64_t q = 0; q < g.KW; ++q) {
              const int64_t h = g.Row(i, p), w = g.Row(j, q);
              if (g.Inside(h, w)) f(n, c, i, j, h, w, p, q);
            }
          }
        }
      }
    }
  }
}

// The float64 semantics of each op that is not pointwise, one function
// per kernel op (or per family sharing one body), found by ReferenceOf.

using RefOp = absl::Status (*)(KernelOp op, const Attrs& attr,
                               const std::vector<TensorRef>& in,
                               const std::vector<TensorRef>& out, bool acc);

absl::Status RefConv2d(KernelOp op, const Attrs& attr, const std::vector<TensorRef>& in,
                       const std::vector<TensorRef>& out, bool acc) {
  // The image is x (conv2d, grad_params) or dx; w[O, C, kh, kw].
  const bool relu = op == KernelOp::kConv2dRelu;  // y = relu(conv2d)
  const bool fwd = op == KernelOp::kConv2d || relu, params = op == KernelOp::kConv2dGradParams;
  const TensorRef& image = op == KernelOp::kConv2dGradInput ? out[0] : params ? in[1] : in[0];
  const TensorRef& w = params ? out[0] : in[1];
  if (w.shape.size() != 4) return absl::InvalidArgumentError("reference_eval: conv weight");
  absl::StatusOr<Window> win = WindowOf(image, w.shape[0], w.shape[2], w.shape[3],
                                        attr("stride"), attr("padding"));
  if (!win.ok()) return win.status();
  const Window g = *win;
  auto wi = [&](int64_t o, int64_t c, int64_t p, int64_t q) {
    return ((o * g.C + c) * g.KH + p) * g.KW + q;
  };
  // Sums in double, then written once (accumulate adds the sum).
  std::vector<double> sum(fwd ? out[0].size() : params ? w.size() : image.size(), 0.0);
  for (int64_t c = 0; c < g.C; ++c) {
    ForEachWindowElement(g, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t h,
                                int64_t ww, int64_t p, int64_t q) {
      const double x_or_dx = fwd || params ? image.data[g.Image(n, c, h, ww)] : 0;
      if (fwd) {
        sum[g.Other(n, o, i, j)] += x_or_dx * w.data[wi(o, c, p, q)];
      } else if (params) {
        sum[wi(o, c, p, q)] += in[0].data[g.Other(n, o, i, j)] * x_or_dx;
      } else {
        sum[g.Image(n, c, h, ww)] += in[0].data[g.Other(n, o, i, j)] * w.data[wi(o, c, p, q)];
      }
    });
  }
  if (fwd) {
    const bool bias = in.size() > 2;
    for (int64_t e = 0; e < out[0].size(); ++e) {
      out[0].data[e] = sum[e] + (bias ? in[2].data[(e / (g.OH * g.OW)) % g.O] : 0.0);
    }
    if (relu) Pointwise<pointwise::Relu, 1>({out[0]}, {out[0]}, false);
  } else {
    Writer dst(out[0], acc);
    for (size_t e = 0; e < sum.size(); ++e) dst.Set(static_cast<int64_t>(e), sum[e]);
    // conv2d_grad_params' outputs: dw, db (optional), workspace.
    if (params && out.size() > 2) {
      Writer db(out[1], acc);
      for (int64_t o = 0; o < g.O; ++o) {
        double s = 0;
        for (int64_t n = 0; n < g.N; ++n) {
          for (int64_t e = 0; e < g.OH * g.OW; ++e) s += in[0].data[(n * g.O + o) * g.OH * g.OW + e];
        }
        db.Set(o, s);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RefPool2d(KernelOp op, const Attrs& attr, const std::vector<TensorRef>& in,
                       const std::vector<TensorRef>& out, bool acc) {
  const bool fwd = op == KernelOp::kMaxPool2d || op == KernelOp::kAvgPool2d;
  const bool max = op == KernelOp::kMaxPool2d || op == KernelOp::kMaxPool2dGrad;
  const TensorRef& image = fwd ? in[0] : out[0];
  absl::StatusOr<Window> win =
      WindowOf(image, -1, static_cast<int64_t>(attr("kernel_h")),
               static_cast<int64_t>(attr("kernel_w")), attr("stride"), attr("padding"));
  if (!win.ok()) return win.status();
  const Window g = *win;
  const double area = static_cast<double>(g.KH * g.KW);
  if (op == KernelOp::kMaxPool2d) {
    // argmax (out[1]): the image element h W + w of the first maximum.
    std::vector<double> best(out[0].size(), -INFINITY), where(out[0].size(), -1);
    ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                int64_t w, int64_t, int64_t) {
      const int64_t e = g.Other(n, c, i, j);
      const double v = image.data[g.Image(n, c, h, w)];
      if (v > best[e]) {
        best[e] = v;
        where[e] = static_cast<double>(h * g.W + w);
      }
    });
    std::copy(best.begin(), best.end(), out[0].data);
    std::copy(where.begin(), where.end(), out[1].data);
  } else if (op == KernelOp::kAvgPool2d) {
    std::vector<double> sum(out[0].size(), 0.0);
    ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                int64_t w, int64_t, int64_t) {
      sum[g.Other(n, c, i, j)] += image.data[g.Image(n, c, h, w)];
    });
    for (size_t e = 0; e < sum.size(); ++e) out[0].data[e] = sum[e] / area;
  } else {
    // dy goes to the maximum's element (argmax, in[3]) or evenly over
    // the window (padding included in the count).
    std::vector<double> dx(image.size(), 0.0);
    if (max) {
      for (int64_t n = 0; n < g.N; ++n) {
        for (int64_t c = 0; c < g.C; ++c) {
          for (int64_t e = 0; e < g.OH * g.OW; ++e) {
            const int64_t k = (n * g.C + c) * g.OH * g.OW + e;
            dx[(n * g.C + c) * g.H * g.W + Index(in[3].data[k])] += in[0].data[k];
          }
        }
      }
    } else {
      ForEachWindowElement(g, [&](int64_t n, int64_t c, int64_t i, int64_t j, int64_t h,
                                  int64_t w, int64_t, int64_t) {
        dx[g.Image(n, c, h, w)] += in[0].data[g.Other(n, c, i, j)] / area;
      });
    }
    Writer d(out[0], acc);
    for (size_t e = 0; e < dx.size(); ++e) d.Set(static_cast<int64_t>(e), dx[e]);
  }
  return absl::OkStatus();
}

absl::Status RefReshape(KernelOp op, const Attrs& attr, const std::vector<TensorRef>& in,
                        const std::vector<TensorRef>& out, bool acc) {
  std::copy(in[0].data, in[0].data + in[0].size(), out[0].data);
  return absl::OkStatus();
}

// Kernel ops with no float64 reference here: each is checked by a test
// of its own (runtime/conformance's CheckedElsewhere).
constexpr RefOp RefDropout = nullptr, RefDropoutGrad = nullptr, RefCastToBf16 = nullptr,
                RefCastToF32 = nullptr, RefSumSquares = nullptr, RefAdamW = nullptr,
                RefSgd = nullptr;
// Families sharing one body.
constexpr RefOp RefConv2dRelu = &RefConv2d, RefConv2dGradInput = &RefConv2d, RefConv2dGradParams = &RefConv2d,
                RefMaxPool2d = &RefPool2d, RefMaxPool2dGrad = &RefPool2d,
                RefAvgPool2d = &RefPool2d, RefAvgPool2dGrad = &RefPool2d;

// A unit family's reference: its Resolve and its loops in float64
// (compiler/ops/kernel_families.h).
template <typename Family>
absl::Status RefUnit(KernelOp op, const Attrs& attr, const std::vector<TensorRef>& in,
                     const std::vector<TensorRef>& out, bool acc) {
  std::vector<std::vector<int64_t>> in_shapes, out_shapes;
  std::vector<const double*> x;
  std::vector<double*> y;
  for (const TensorRef& t : in) in_shapes.push_back(t.shape), x.push_back(t.data);
  for (const TensorRef& t : out) out_shapes.push_back(t.shape), y.push_back(t.data);
  typename Family::Args args;
  std::string why = Family::Resolve(op, in_shapes, out_shapes, attr.map(), &args);
  // The i32 operand (compiler/ops/unit_family.h), held in the double arena.
  std::vector<int32_t> ids;
  if (const int j = ops::unit::IdsInputOf<Family>(op); j >= 0 && why.empty()) {
    for (int64_t i = 0; i < in[j].size(); ++i) {
      const int64_t id = Index(in[j].data[i]);
      ids.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    }
    if constexpr (ops::unit::HasIds<Family>::value) args.*Family::kIds = ids.data();
  }
  if (why.empty()) why = ops::unit::RunUnit<Family, double>(op, args, x.data(), y.data(), acc);
  if (!why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference_eval: ", InstructionOpOf(op), ": ", why));
  }
  return absl::OkStatus();
}
#define TRAINC_REFERENCE_UNIT(Fam, Name, op) \
  constexpr RefOp Ref##Name = &RefUnit<ops::Fam##Family>;
TRAINC_UNIT_OPS(TRAINC_REFERENCE_UNIT)
#undef TRAINC_REFERENCE_UNIT
// The linear family (compiler/ops/linear_family.h): its Run<double>.
constexpr RefOp RefLinear = &RefUnit<ops::LinearFamily>, RefLinearGelu = RefLinear,
                RefLinearRelu = RefLinear, RefLinearTanh = RefLinear,
                RefLinearGeluErf = RefLinear, RefLinearGradInput = RefLinear,
                RefLinearGradInputGelu = RefLinear, RefLinearGradParams = RefLinear;

// Ref<Name> of every kernel op (compiler/ops/kernel_families.h), indexed
// by KernelOp; one missing fails to compile.
RefOp ReferenceOf(KernelOp op) {
#define TRAINC_REFERENCE_ENTRY(Family, Name, op) Ref##Name,
  static constexpr RefOp kRefs[] = {
      nullptr,
#define TRAINC_REFERENCE_NOT_POINTWISE(op, Name, arity) nullptr,
      TRAINC_POINTWISE_OPS(TRAINC_REFERENCE_NOT_POINTWISE)
      TRAINC_KERNEL_OPS(TRAINC_REFERENCE_ENTRY)};
#undef TRAINC_REFERENCE_ENTRY
#undef TRAINC_REFERENCE_NOT_POINTWISE
  static_assert(sizeof(kRefs) / sizeof(RefOp) == kNumKernelOps);
  return kRefs[static_cast<int>(op)];
}

}  // namespace

int64_t TensorRef::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status EvalOp(const std::string& op, const std::map<std::string, double>& attrs,
                    const std::vector<TensorRef>& in, const std::vector<TensorRef>& out) {
  const Attrs attr(attrs);
  const bool acc = attr("accumulate") != 0;
  const KernelOp kernel = KernelOpOfInstruction(op);
  if (RunPointwise(kernel, in, out, acc)) return absl::OkStatus();
  const RefOp ref = ReferenceOf(kernel);
  if (ref == nullptr) return absl::UnimplementedError(absl::StrCat("reference_eval: op ", op));
  return ref(kernel, attr, in, out, acc);
}

PlanInterpreter::PlanInterpreter(const Plan& plan)
    : plan_(plan), arena_(plan.arena_bytes / 4, 0.0) {}

TensorRef PlanInterpreter::buffer(int id) {
  const Buffer& b = plan_.buffers[id];
  return TensorRef{arena_.data() + b.offset / 4, b.shape};
}

absl::Status PlanInterpreter::Run(const Instruction& instr) {
  const StepOp step_op = StepOpOfInstruction(instr.op);
  if (step_op == StepOp::kLoadBatch) {
    const int k = static_cast<int>(instr.attrs.at("micro"));
    if (k >= static_cast<int>(batches_.size())) {
      return absl::FailedPreconditionError("no batch for this micro-step");
    }
    for (size_t j = 0; j < instr.outputs.size(); ++j) {
      TensorRef t = buffer(instr.outputs[j]);
      std::copy(batches_[k][j].begin(), batches_[k][j].end(), t.data);
    }
    return absl::OkStatus();
  }
  if (step_op == StepOp::kAllReduce) {
    if (!plan_.deterministic) return absl::OkStatus();
    const Bucket& bucket = plan_.buckets[static_cast<int>(instr.attrs.at("bucket"))];
    TensorRef t = buffer(bucket.grad_buffer);
    const int64_t n = bucket.bytes / 4;
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t k = 0; k < plan_.accumulate; ++k) s += t.data[k * n + i];
      t.data[i] = s;
    }
    return absl::OkStatus();
  }
  std::vector<TensorRef> in, out;
  for (int id : instr.inputs) in.push_back(buffer(id));
  for (int id : instr.outputs) out.push_back(buffer(id));
  return EvalOp(instr.op, instr.attrs, in, out);
}

}  // namespace trainc
