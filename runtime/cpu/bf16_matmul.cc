#include "runtime/cpu/bf16_matmul.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/gemm.h"

namespace trainc::cpu {
namespace {

using dnnl::memory;
using Key = std::array<int64_t, 13>;  // a product's shape, strides and accumulate

Key KeyOf(const GemmCall& g) {
  return {g.trans_a, g.trans_b, g.m,     g.n,        g.k,        g.lda,     g.ldb,
          g.ldc,     g.accumulate, g.batch, g.stride_a, g.stride_b, g.stride_c};
}

const dnnl::engine& Engine() {
  static const auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Row-major [rows, cols] with row stride ld, or its transpose when `trans`
// (the matrix stored [cols, rows]); `batch` of them `stride` apart when
// batch > 1.
memory::desc Matrix(int64_t rows, int64_t cols, int64_t ld, bool trans, memory::data_type type,
                    int64_t batch = 1, int64_t stride = 0) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  if (batch == 1) return memory::desc({rows, cols}, type, strides);
  return memory::desc({batch, rows, cols}, type, {stride, strides[0], strides[1]});
}

struct Descs {
  memory::desc src, weights, dst;
};
Descs DescsOf(const GemmCall& g) {
  constexpr auto kBf16 = memory::data_type::bf16;
  return {Matrix(g.m, g.k, g.lda, g.trans_a, kBf16, g.batch, g.stride_a),
          Matrix(g.k, g.n, g.ldb, g.trans_b, kBf16, g.batch, g.stride_b),
          Matrix(g.m, g.n, g.ldc, false, memory::data_type::f32, g.batch, g.stride_c)};
}

// The primitive of `g`'s shape with bf16 operands, when oneDNN has a bf16
// kernel for it (not its reference loops, nor a gemm that widens to f32).
std::optional<dnnl::matmul::primitive_desc> Bf16Desc(const GemmCall& g) {
  const Descs d = DescsOf(g);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);  // C += the product, in f32
    attr.set_post_ops(sum);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.src, d.weights, d.dst), attr, Engine());
    const absl::string_view impl = pd.impl_info_str();
    if (impl.find("bf16") == absl::string_view::npos || absl::StartsWith(impl, "ref")) {
      return std::nullopt;
    }
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;  // no implementation at all (below avx512_core)
  }
}

// The bf16 operand read from `slot` (its x slot before staging), or null.
Bf16Operand* Bf16Input(KernelArgs& k, const void* slot) {
  for (int i = 0; i < k.num_bf16; ++i) {
    if (!k.bf16[i].output && k.bf16[i].bf16 == slot) return &k.bf16[i];
  }
  return nullptr;
}

// TRAINC_BF16_GEMM=widened: every product on the f32 GEMM of the widened
// operands, whatever the CPU has.
bool WidenedByEnv() {
  const char* env = std::getenv("TRAINC_BF16_GEMM");
  return env != nullptr && absl::string_view(env) == "widened";
}

// The bf16 matmul's kernel on a GPT block's projection (256 rows), or ""
// where oneDNN has none. Probed once per process.
const std::string& ProbedBf16Kernel() {
  static const std::string* kernel = [] {
    GemmCall probe;
    probe.trans_b = true;
    probe.m = 256, probe.n = 768, probe.k = 768;
    probe.lda = probe.ldb = probe.k, probe.ldc = probe.n;
    const std::optional<dnnl::matmul::primitive_desc> pd = Bf16Desc(probe);
    return new std::string(pd ? pd->impl_info_str() : "");
  }();
  return *kernel;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

bool IsLinearProduct(KernelOp op) {
  switch (op) {
    case KernelOp::kLinear:
    case KernelOp::kLinearRelu:
    case KernelOp::kLinearTanh:
    case KernelOp::kLinearGeluErf:
    case KernelOp::kLinearGelu:
    case KernelOp::kLinearGradInput:
    case KernelOp::kLinearGradInputGelu:
    case KernelOp::kLinearGradParams: return true;
    default: return false;
  }
}

GemmCall LinearGemmOf(const KernelArgs& k) {
  const ops::LinearFamily::Args& l = k.linear;
  GemmCall g;
  g.a = k.x[0];
  g.b = k.x[1];
  g.c = k.y[0];
  switch (k.op) {
    case KernelOp::kLinearGradParams:  // dw[out,in] (+)= dy[rows,out]^T x[rows,in]
      g.trans_a = true;
      g.m = l.out, g.n = l.in, g.k = l.rows;
      g.lda = l.out, g.ldb = l.in, g.ldc = l.in;
      g.accumulate = k.accumulate;
      return g;
    case KernelOp::kLinearGradInput:
    case KernelOp::kLinearGradInputGelu:  // dx[rows,in] (+)= dy[rows,out] w[out,in]
      g.m = l.rows, g.n = l.in, g.k = l.out;
      g.lda = l.out, g.ldb = l.in, g.ldc = l.in;
      g.accumulate = k.op == KernelOp::kLinearGradInput && k.accumulate;
      if (k.op == KernelOp::kLinearGradInputGelu && k.accumulate) {
        g.c = reinterpret_cast<float*>(k.workspace);
      }
      return g;
    default:  // y[rows,out] = x[rows,in] w[out,in]^T
      g.trans_b = true;
      g.m = l.rows, g.n = l.out, g.k = l.in;
      g.lda = l.in, g.ldb = l.in, g.ldc = l.out;
      return g;
  }
}

void RunF32(const GemmCall& g) {
  Sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, static_cast<const float*>(g.a), g.lda,
        static_cast<const float*>(g.b), g.ldb, g.accumulate ? 1.0f : 0.0f, g.c, g.ldc);
}

std::string Bf16GemmSummary() {
  static const std::string* summary = [] {
    if (WidenedByEnv()) return new std::string("widened to f32 (TRAINC_BF16_GEMM=widened)");
    const std::string& kernel = ProbedBf16Kernel();
    return new std::string(
        kernel.empty() ? absl::StrCat("widened to f32 (", OneDnnSummary(), ": no bf16 matmul)")
                       : absl::StrCat("oneDNN matmul, ", kernel, " kernels"));
  }();
  return *summary;
}

bool Bf16Gemm::Native() {
  // The environment is read on each call, as Bf16Matmuls::Choose reads it
  // (a benchmark sets it between plans); the kernels are probed once.
  return !ProbedBf16Kernel().empty() && !WidenedByEnv();
}

struct Bf16Gemm::State {
  struct Shape {
    dnnl::matmul primitive;
    memory::desc scratchpad;
  };
  std::map<Key, Shape> shapes;
  std::unique_ptr<char, FreeDeleter> scratch;
  int64_t scratch_bytes = 0;
  dnnl::stream stream{Engine()};
};

Bf16Gemm::Bf16Gemm() : state_(std::make_unique<State>()) {}
Bf16Gemm::~Bf16Gemm() = default;

absl::Status Bf16Gemm::Run(const GemmCall& g) {
  State& s = *state_;
  const Descs d = DescsOf(g);
  try {
    auto it = s.shapes.find(KeyOf(g));
    if (it == s.shapes.end()) {
      const std::optional<dnnl::matmul::primitive_desc> pd = Bf16Desc(g);
      if (!pd) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cpu: oneDNN has no bf16 kernel for a ", g.batch, " x ", g.m, " x ", g.n, " x ",
            g.k, " product"));
      }
      it = s.shapes.emplace(KeyOf(g), State::Shape{dnnl::matmul(*pd), pd->scratchpad_desc()})
               .first;
    }
    const State::Shape& shape = it->second;
    if (const int64_t bytes = shape.scratchpad.get_size(); bytes > s.scratch_bytes) {
      s.scratch_bytes = (bytes + 63) / 64 * 64;
      s.scratch.reset(static_cast<char*>(std::aligned_alloc(64, s.scratch_bytes)));
      if (s.scratch == nullptr) return absl::ResourceExhaustedError("cpu: bf16 gemm scratchpad");
    }
    shape.primitive.execute(
        s.stream, {{DNNL_ARG_SRC, memory(d.src, Engine(), const_cast<void*>(g.a))},
                   {DNNL_ARG_WEIGHTS, memory(d.weights, Engine(), const_cast<void*>(g.b))},
                   {DNNL_ARG_DST, memory(d.dst, Engine(), g.c)},
                   {DNNL_ARG_SCRATCHPAD, memory(shape.scratchpad, Engine(), s.scratch.get())}});
    s.stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("cpu: oneDNN: ", e.what()));
  }
  return absl::OkStatus();
}

struct Bf16Matmuls::State {
  struct Shape {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;  // created in Bind (JIT code)
  };
  std::map<Key, Shape> shapes;
  std::unordered_map<int, Key> chosen;  // by instruction id
  std::unordered_map<int, std::pair<dnnl::matmul*, std::unordered_map<int, memory>>> bound;
  std::unique_ptr<char, FreeDeleter> scratch;
  int64_t scratch_bytes = 0;
  dnnl::stream stream{Engine()};
};

Bf16Matmuls::Bf16Matmuls() : state_(std::make_unique<State>()) {}
Bf16Matmuls::~Bf16Matmuls() = default;

void Bf16Matmuls::Choose(std::vector<KernelArgs>& kernels) {
  State& s = *state_;
  s.shapes.clear();
  s.chosen.clear();
  s.bound.clear();
  if (WidenedByEnv()) return;
  for (size_t i = 0; i < kernels.size(); ++i) {
    KernelArgs& k = kernels[i];
    if (!IsLinearProduct(k.op)) continue;
    Bf16Operand* a = Bf16Input(k, k.x[0]);
    Bf16Operand* b = Bf16Input(k, k.x[1]);
    if (a == nullptr || b == nullptr) continue;
    const GemmCall g = LinearGemmOf(k);
    const Key key = KeyOf(g);
    if (s.shapes.count(key) == 0) {
      std::optional<dnnl::matmul::primitive_desc> pd = Bf16Desc(g);
      if (!pd) continue;
      s.shapes.emplace(key, State::Shape{*pd, dnnl::matmul()});
    }
    a->native = b->native = true;
    s.chosen[static_cast<int>(i)] = key;
  }
}

absl::Status Bf16Matmuls::Bind(const std::vector<KernelArgs>& kernels) {
  State& s = *state_;
  s.scratch_bytes = 0;
  if (s.chosen.empty()) return absl::OkStatus();
  try {
    for (auto& [key, shape] : s.shapes) {
      s.scratch_bytes =
          std::max<int64_t>(s.scratch_bytes, shape.pd.scratchpad_desc().get_size());
      shape.primitive = dnnl::matmul(shape.pd);
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("cpu: oneDNN: ", e.what()));
  }
  const int64_t rounded = (s.scratch_bytes + 63) / 64 * 64 + 64;
  s.scratch.reset(static_cast<char*>(std::aligned_alloc(64, rounded)));
  if (s.scratch == nullptr) return absl::ResourceExhaustedError("cpu: bf16 matmul scratchpad");
  for (const auto& [id, key] : s.chosen) {
    const GemmCall g = LinearGemmOf(kernels[id]);
    if (KeyOf(g) != key) return absl::InternalError("cpu: bf16 matmul shape changed in staging");
    State::Shape& shape = s.shapes.at(key);
    const Descs d = DescsOf(g);
    try {
      s.bound[id] = {&shape.primitive,
                     {{DNNL_ARG_SRC, memory(d.src, Engine(), const_cast<void*>(g.a))},
                      {DNNL_ARG_WEIGHTS, memory(d.weights, Engine(), const_cast<void*>(g.b))},
                      {DNNL_ARG_DST, memory(d.dst, Engine(), g.c)},
                      {DNNL_ARG_SCRATCHPAD,
                       memory(shape.pd.scratchpad_desc(), Engine(), s.scratch.get())}}};
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("cpu: oneDNN: ", e.what()));
    }
  }
  return absl::OkStatus();
}

bool Bf16Matmuls::Runs(int id) const { return state_->bound.count(id) > 0; }

absl::Status Bf16Matmuls::Run(int id) {
  auto it = state_->bound.find(id);
  if (it == state_->bound.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cpu: instruction ", id, " has no bf16 matmul"));
  }
  try {
    it->second.first->execute(state_->stream, it->second.second);
    state_->stream.wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("cpu: oneDNN: ", e.what()));
  }
  return absl::OkStatus();
}

int64_t Bf16Matmuls::scratch_bytes() const { return state_->scratch_bytes; }

}  // namespace trainc::cpu
