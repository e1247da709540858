// CudaDevice vs CpuDevice (the reference semantics), op by op, on random
// inputs: each test builds a one- or two-instruction Plan, runs it on both
// devices from identical arenas and compares every output buffer.
//
// Without a GPU every GPU test SKIPs with the reason; the factory tests
// still run (they check the no-GPU path itself).
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "compiler/frontend/frontend.h"
#include "compiler/plan/plan.h"
#include "compiler/planner/planner.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/device/bf16.h"

namespace trainc {
namespace {

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    if (CudaDeviceCount() == 0) {                                        \
      GTEST_SKIP() << "no CUDA GPU: CudaDeviceCount() == 0 (no driver " \
                      "or device on this machine)";                      \
    }                                                                    \
  } while (0)

constexpr double kFp32Tol = 1e-5;
constexpr double kTf32Tol = 1e-3;

// A plan under construction: buffers packed at 64-byte offsets.
struct PlanBuilder {
  Plan plan;
  int64_t next = 0;

  int Add(const std::string& name, std::vector<int64_t> shape,
          DType dtype = DType::kF32,
          BufferKind kind = BufferKind::kActivation) {
    Buffer b;
    b.id = static_cast<int>(plan.buffers.size());
    b.name = name;
    b.kind = kind;
    b.dtype = dtype;
    b.shape = std::move(shape);
    int64_t n = 1;
    for (int64_t d : b.shape) n *= d;
    b.bytes = n * 4;
    b.offset = next;
    next += (b.bytes + 63) / 64 * 64;
    plan.buffers.push_back(b);
    plan.arena_bytes = next;
    return b.id;
  }

  void Instr(const std::string& op, std::vector<int> in, std::vector<int> out,
             std::map<std::string, double> attrs = {}) {
    Instruction i;
    i.id = static_cast<int>(plan.instructions.size());
    i.op = op;
    i.inputs = std::move(in);
    i.outputs = std::move(out);
    i.attrs = std::move(attrs);
    i.label = op;
    plan.instructions.push_back(i);
  }
};

// Random arena contents: floats in [-1, 1], i32 labels in [0, classes).
std::vector<char> RandomArena(const Plan& plan, int classes, uint32_t seed) {
  std::vector<char> arena(plan.arena_bytes, 0);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, std::max(classes, 1) - 1);
  // The batch buffers last: they share arena bytes with temporaries
  // (liveness), whose random floats must not overwrite the labels.
  std::vector<const Buffer*> order;
  for (const Buffer& b : plan.buffers) order.push_back(&b);
  std::stable_partition(order.begin(), order.end(), [](const Buffer* b) {
    return b->kind != BufferKind::kInput && b->kind != BufferKind::kLabel;
  });
  for (const Buffer* buffer : order) {
    const Buffer& b = *buffer;
    if (b.dtype == DType::kBF16) {  // precision = bf16: 2-byte values
      for (int64_t i = 0; i < b.bytes / 2; ++i) {
        const uint16_t v = FloatToBf16(uni(rng));
        std::memcpy(arena.data() + b.offset + 2 * i, &v, 2);
      }
      continue;
    }
    for (int64_t i = 0; i < b.bytes / 4; ++i) {
      char* p = arena.data() + b.offset + 4 * i;
      if (b.dtype == DType::kI32) {
        int32_t v = label(rng);
        std::memcpy(p, &v, 4);
      } else {
        float v = uni(rng);
        // Adam's second moment must be non-negative.
        if (b.kind == BufferKind::kStateSpan) v = std::fabs(v);
        std::memcpy(p, &v, 4);
      }
    }
  }
  return arena;
}

absl::Status RunOn(Device& device, const Plan& plan,
                   const std::vector<char>& init, const StepState& state,
                   int steps, std::vector<char>* result) {
  absl::Status s = device.AllocateArena(plan.arena_bytes);
  if (!s.ok()) return s;
  if (!(s = device.Upload(0, init.data(), plan.arena_bytes)).ok()) return s;
  if (!(s = device.Prepare(plan)).ok()) return s;
  for (int step = 0; step < steps; ++step) {
    StepState st = state;
    st.step = state.step + step;
    if (!(s = device.ResetEvents(plan.num_events)).ok()) return s;
    for (const Instruction& instr : plan.instructions) {
      if (!(s = device.RunKernel(plan, instr, st)).ok()) return s;
    }
    if (!(s = device.Synchronize()).ok()) return s;
  }
  result->assign(plan.arena_bytes, 0);
  return device.Download(0, result->data(), plan.arena_bytes);
}

// max |gpu - cpu| / max(max |cpu|, 1e-30) over one buffer.
double RelErr(const Plan& plan, int id, const std::vector<char>& gpu,
              const std::vector<char>& cpu) {
  const Buffer& b = plan.buffers[id];
  const float* g = reinterpret_cast<const float*>(gpu.data() + b.offset);
  const float* c = reinterpret_cast<const float*>(cpu.data() + b.offset);
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < b.bytes / 4; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(g[i]) - c[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(c[i])));
  }
  return diff / scale;
}

// Runs `plan` on both devices from the arena `init` and checks every output
// of every instruction except the buffers in `unchecked` (scratch whose
// contents are each backend's own). The GPU's final arena goes to
// *gpu_arena if given.
void ExpectMatchesCpuFrom(const Plan& plan, const std::vector<char>& init, double tol,
                          const std::set<int>& unchecked,
                          std::vector<char>* gpu_arena = nullptr, StepState state = {},
                          int steps = 1) {
  CpuDevice cpu;
  std::vector<char> want, got;
  absl::Status s = RunOn(cpu, plan, init, state, steps, &want);
  ASSERT_TRUE(s.ok()) << s;
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  s = RunOn(**cuda, plan, init, state, steps, &got);
  ASSERT_TRUE(s.ok()) << s;
  for (const Instruction& instr : plan.instructions) {
    for (int id : instr.outputs) {
      if (unchecked.count(id) != 0) continue;
      EXPECT_LE(RelErr(plan, id, got, want), tol)
          << instr.op << " output " << plan.buffers[id].name;
    }
  }
  if (gpu_arena != nullptr) *gpu_arena = std::move(got);
}

// The same from random arena contents (RandomArena).
void ExpectMatchesCpuExcept(const Plan& plan, double tol, int classes,
                            const std::set<int>& unchecked,
                            std::vector<char>* gpu_arena = nullptr,
                            StepState state = {}, int steps = 1) {
  ExpectMatchesCpuFrom(plan, RandomArena(plan, classes, 1234), tol, unchecked, gpu_arena, state,
                       steps);
}

// Runs `plan` on both devices and checks every output of every instruction.
void ExpectMatchesCpu(const Plan& plan, double tol, int classes = 0,
                      StepState state = {}, int steps = 1) {
  ExpectMatchesCpuExcept(plan, tol, classes, {}, nullptr, state, steps);
}

constexpr int64_t B = 48, IN = 96, OUT = 40;

// Every kernel op of runtime/device/kernel_ops.h has a CUDA kernel. The
// table is data: no GPU needed.
TEST(CudaKernelTableTest, EveryKernelOpHasACudaKernel) {
  if (!cuda::KernelTableBuilt()) GTEST_SKIP() << "built without the CUDA toolkit";
  for (int i = 0; i < kNumKernelOps; ++i) {
    const KernelOp op = static_cast<KernelOp>(i);
    if (op == KernelOp::kNotCompute) continue;
    EXPECT_TRUE(cuda::HasKernel(op)) << InstructionOpOf(op) << " has no CUDA kernel ("
                                     << KernelOpName(op) << ")";
  }
}

TEST(CudaDeviceFactoryTest, CountNeverCrashes) {
  EXPECT_GE(CudaDeviceCount(), 0);
}

TEST(CudaDeviceFactoryTest, UnavailableWithoutGpu) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a GPU is present";
  auto device = CreateCudaDevice(0);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kUnavailable);
}

Plan LinearPlan(bool tf32, bool bias) {
  PlanBuilder p;
  p.plan.tf32 = tf32;
  int x = p.Add("x", {B, IN});
  int w = p.Add("w", {OUT, IN}, DType::kF32, BufferKind::kParameter);
  int b = p.Add("b", {OUT}, DType::kF32, BufferKind::kParameter);
  int y = p.Add("y", {B, OUT});
  if (bias) p.Instr("linear", {x, w, b}, {y});
  else p.Instr("linear", {x, w}, {y});
  return p.plan;
}

TEST(CudaDeviceTest, Linear) {
  SKIP_WITHOUT_GPU();
  ExpectMatchesCpu(LinearPlan(false, true), kFp32Tol);
  ExpectMatchesCpu(LinearPlan(false, false), kFp32Tol);
}

TEST(CudaDeviceTest, LinearTf32) {
  SKIP_WITHOUT_GPU();
  ExpectMatchesCpu(LinearPlan(true, true), kTf32Tol);
}

// The plan's linear activations (compiler/graph/fuse_activation.h):
// linear_relu without pre is one cublasLt GEMM with the RELU(_BIAS)
// epilogue; with pre, and linear_tanh / linear_gelu_erf, the GEMM then the
// activation's kernel (in place without pre); with and without a bias.
TEST(CudaDeviceTest, LinearActivations) {
  SKIP_WITHOUT_GPU();
  for (const char* op : {"linear_relu", "linear_gelu_erf", "linear_tanh"}) {
    for (bool keep_pre : {false, true}) {
      for (bool bias : {true, false}) {
        PlanBuilder p;
        int x = p.Add("x", {B, IN});
        int w = p.Add("w", {OUT, IN});
        int b = p.Add("b", {OUT});
        int y = p.Add("y", {B, OUT});
        int h = p.Add("h", {B, OUT});
        std::vector<int> inputs = {x, w};
        if (bias) inputs.push_back(b);
        p.Instr(op, inputs, keep_pre ? std::vector<int>{y, h} : std::vector<int>{h});
        SCOPED_TRACE(absl::StrCat(op, keep_pre ? " pre" : "", bias ? " bias" : ""));
        ExpectMatchesCpu(p.plan, kFp32Tol);
      }
    }
  }
}

// linear_gelu (the plan's linear-gelu fusion): pre and y from one cublasLt
// GEMM with the GELU_AUX(_BIAS) epilogue when out is a multiple of 8 (40),
// else (37) the GEMM then the gelu_tanh kernel; with and without a bias.
TEST(CudaDeviceTest, LinearGelu) {
  SKIP_WITHOUT_GPU();
  for (int64_t out : {OUT, int64_t{37}}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(absl::StrCat("out ", out, bias ? " bias" : " no bias"));
      PlanBuilder p;
      int x = p.Add("x", {B, IN});
      int w = p.Add("w", {out, IN}, DType::kF32, BufferKind::kParameter);
      int b = p.Add("b", {out}, DType::kF32, BufferKind::kParameter);
      int pre = p.Add("pre", {B, out});
      int y = p.Add("y", {B, out});
      if (bias) p.Instr("linear_gelu", {x, w, b}, {pre, y});
      else p.Instr("linear_gelu", {x, w}, {pre, y});
      ExpectMatchesCpu(p.plan, kFp32Tol);
    }
  }
}

TEST(CudaDeviceTest, LinearGrads) {
  SKIP_WITHOUT_GPU();
  for (double acc : {0.0, 1.0}) {
    PlanBuilder p;
    int dy = p.Add("dy", {B, OUT});
    int x = p.Add("x", {B, IN});
    int w = p.Add("w", {OUT, IN});
    int dx = p.Add("dx", {B, IN});
    int dw = p.Add("dw", {OUT, IN});
    int db = p.Add("db", {OUT});
    p.Instr("linear_grad_input", {dy, w}, {dx}, {{"accumulate", acc}});
    p.Instr("linear_grad_params", {dy, x}, {dw, db}, {{"accumulate", acc}});
    ExpectMatchesCpu(p.plan, kFp32Tol);
  }
}

// Bias gradient over more rows than one reduction chunk (two-pass sum).
TEST(CudaDeviceTest, LinearGradParamsManyRows) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  int dy = p.Add("dy", {1000, 33});
  int x = p.Add("x", {1000, 17});
  int dw = p.Add("dw", {33, 17});
  int db = p.Add("db", {33});
  p.Instr("linear_grad_params", {dy, x}, {dw, db}, {{"accumulate", 1}});
  ExpectMatchesCpu(p.plan, kFp32Tol);
}

TEST(CudaDeviceTest, Activations) {
  SKIP_WITHOUT_GPU();
  for (const char* op : {"relu", "gelu", "tanh", "silu"}) {
    for (double acc : {0.0, 1.0}) {
      PlanBuilder p;
      int x = p.Add("x", {B, OUT});
      int y = p.Add("y", {B, OUT});
      int dy = p.Add("dy", {B, OUT});
      int dx = p.Add("dx", {B, OUT});
      p.Instr(op, {x}, {y});
      // relu/tanh grads take the output, gelu's and silu's the input
      // (op_table.cc).
      const std::string name = op;
      int saved = name == "gelu" || name == "silu" ? x : y;
      p.Instr(absl::StrCat(op, "_grad"), {dy, saved}, {dx},
              {{"accumulate", acc}});
      SCOPED_TRACE(op);
      ExpectMatchesCpu(p.plan, kFp32Tol);
    }
  }
}

// The same Philox masks as the CPU (compiler/ops/philox.h): bit for bit,
// at a later step, on another rank and micro-step, and the identity in
// evaluation.
TEST(CudaDeviceTest, DropoutMatchesCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  for (bool training : {true, false}) {
    for (double acc : {0.0, 1.0}) {
      PlanBuilder p;
      p.plan.world_size = 2;
      p.plan.micro_batch = B;
      p.plan.accumulate = 3;
      p.plan.global_batch = 6 * B;
      p.plan.seed = 1234;
      int x = p.Add("x", {B, OUT});
      int y = p.Add("y", {B, OUT});
      int dy = p.Add("dy", {B, OUT});
      int dx = p.Add("dx", {B, OUT});
      p.Instr("dropout", {x}, {y}, {{"p", 0.3}, {"key", 77}});
      p.Instr("dropout_grad", {dy}, {dx},
              {{"p", 0.3}, {"key", 77}, {"accumulate", acc}});
      for (Instruction& in : p.plan.instructions) in.micro_step = 2;
      StepState state;
      state.step = 5;
      state.rank = 1;
      state.training = training;
      SCOPED_TRACE(training ? "training" : "evaluation");
      ExpectMatchesCpu(p.plan, 0.0, /*classes=*/0, state);
    }
  }
}

TEST(CudaDeviceTest, AddAndCopyGrad) {
  SKIP_WITHOUT_GPU();
  for (double acc : {0.0, 1.0}) {
    PlanBuilder p;
    int a = p.Add("a", {B, OUT});
    int b = p.Add("b", {B, OUT});
    int y = p.Add("y", {B, OUT});
    int dx = p.Add("dx", {B, OUT});
    p.Instr("add", {a, b}, {y});
    p.Instr("copy_grad", {a}, {dx}, {{"accumulate", acc}});
    ExpectMatchesCpu(p.plan, kFp32Tol);
  }
}

TEST(CudaDeviceTest, LayerNorm) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {7, 64, 300}) {
    for (double acc : {0.0, 1.0}) {
      PlanBuilder p;
      const int64_t rows = 300;  // > one column-reduction chunk
      int x = p.Add("x", {rows, d});
      int gamma = p.Add("gamma", {d});
      int beta = p.Add("beta", {d});
      int y = p.Add("y", {rows, d});
      int mean = p.Add("mean", {rows});
      int rstd = p.Add("rstd", {rows});
      int dy = p.Add("dy", {rows, d});
      int dx = p.Add("dx", {rows, d});
      int dgamma = p.Add("dgamma", {d});
      int dbeta = p.Add("dbeta", {d});
      p.Instr("layernorm", {x, gamma, beta}, {y, mean, rstd}, {{"eps", 1e-5}});
      p.Instr("layernorm_grad_input", {dy, x, gamma, mean, rstd}, {dx},
              {{"accumulate", acc}});
      p.Instr("layernorm_grad_params", {dy, x, mean, rstd}, {dgamma, dbeta},
              {{"accumulate", acc}});
      SCOPED_TRACE(absl::StrCat("d=", d, " acc=", acc));
      ExpectMatchesCpu(p.plan, kFp32Tol);
    }
  }
}

// add_layernorm (the plan's residual-layernorm fusion): one warp per row,
// the row in registers (7, 37, 768 wide: 8 and 24 per lane) or, wider than
// 2048, the sum read back (2100); y written over b or not (OpDef::in_place);
// its bits against the add and the layernorm as two instructions:
// runtime/conformance.
TEST(CudaDeviceTest, AddLayerNorm) {
  SKIP_WITHOUT_GPU();
  for (int64_t d : {7, 37, 768, 2100}) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(absl::StrCat("d=", d, in_place ? " y over b" : ""));
      PlanBuilder p;
      const int64_t rows = 70;  // a partial last block of warps
      int a = p.Add("a", {rows, d});
      int b = p.Add("b", {rows, d});
      int gamma = p.Add("gamma", {d});
      int beta = p.Add("beta", {d});
      int sum = p.Add("sum", {rows, d});
      int y = p.Add("y", {rows, d});
      int mean = p.Add("mean", {rows});
      int rstd = p.Add("rstd", {rows});
      p.Instr("add_layernorm", {a, b, gamma, beta}, {sum, y, mean, rstd}, {{"eps", 1e-5}});
      if (in_place) p.plan.buffers[y].offset = p.plan.buffers[b].offset;
      ExpectMatchesCpu(p.plan, kFp32Tol);
    }
  }
}

TEST(CudaDeviceTest, CrossEntropy) {
  SKIP_WITHOUT_GPU();
  for (int64_t classes : {10, 1000}) {
    PlanBuilder p;
    int logits = p.Add("logits", {B, classes});
    int label = p.Add("label", {B}, DType::kI32, BufferKind::kLabel);
    int loss = p.Add("loss", {1}, DType::kF32, BufferKind::kLoss);
    int probs = p.Add("probs", {B, classes});
    int dlogits = p.Add("dlogits", {B, classes});
    p.Instr("cross_entropy", {logits, label}, {loss, probs});
    p.Instr("cross_entropy_grad", {probs, label}, {dlogits},
            {{"scale", 1.0 / 256}, {"accumulate", 1}});
    SCOPED_TRACE(classes);
    ExpectMatchesCpu(p.plan, kFp32Tol, static_cast<int>(classes));
  }
}

TEST(CudaDeviceTest, CrossEntropyBadLabelFailsAtSynchronize) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  int logits = p.Add("logits", {4, 3});
  int label = p.Add("label", {4}, DType::kI32, BufferKind::kLabel);
  int loss = p.Add("loss", {1});
  int probs = p.Add("probs", {4, 3});
  p.Instr("cross_entropy", {logits, label}, {loss, probs});
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  ASSERT_TRUE(d.AllocateArena(p.plan.arena_bytes).ok());
  ASSERT_TRUE(d.Prepare(p.plan).ok());
  const int32_t labels[4] = {0, 1, 3, 2};  // 3 is outside [0, 3)
  ASSERT_TRUE(d.Upload(p.plan.buffers[label].offset, labels, 16).ok());
  ASSERT_TRUE(d.RunKernel(p.plan, p.plan.instructions[0], {}).ok());
  absl::Status s = d.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(CudaDeviceTest, Mse) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  int pred = p.Add("pred", {B, 5});
  int target = p.Add("target", {B, 5});
  int loss = p.Add("loss", {1});
  int dpred = p.Add("dpred", {B, 5});
  p.Instr("mse", {pred, target}, {loss});
  p.Instr("mse_grad", {pred, target}, {dpred}, {{"scale", 1.0 / 64}});
  ExpectMatchesCpu(p.plan, kFp32Tol);
}

// ---- Transformer ops -------------------------------------------------------

TEST(CudaDeviceTest, GeluTanh) {
  SKIP_WITHOUT_GPU();
  for (double acc : {0.0, 1.0}) {
    PlanBuilder p;
    int x = p.Add("x", {B, OUT});
    int y = p.Add("y", {B, OUT});
    int dy = p.Add("dy", {B, OUT});
    int dx = p.Add("dx", {B, OUT});
    p.Instr("gelu_tanh", {x}, {y});
    p.Instr("gelu_tanh_grad", {dy, x}, {dx}, {{"accumulate", acc}});
    SCOPED_TRACE(absl::StrCat("acc=", acc));
    ExpectMatchesCpu(p.plan, kFp32Tol);
  }
}

// Row lengths below, at and well above a warp's width.
TEST(CudaDeviceTest, Softmax) {
  SKIP_WITHOUT_GPU();
  for (int64_t n : {7, 32, 1000}) {
    for (double acc : {0.0, 1.0}) {
      PlanBuilder p;
      int x = p.Add("x", {B, n});
      int y = p.Add("y", {B, n});
      int dy = p.Add("dy", {B, n});
      int dx = p.Add("dx", {B, n});
      p.Instr("softmax", {x}, {y});
      p.Instr("softmax_grad", {dy, y}, {dx}, {{"accumulate", acc}});
      SCOPED_TRACE(absl::StrCat("n=", n, " acc=", acc));
      ExpectMatchesCpu(p.plan, kFp32Tol);
    }
  }
}

// ids i32[rows] in [0, vocab) with rows >> vocab, so every id repeats and
// the gradient adds many rows into one table row.
Plan EmbeddingPlan(int64_t rows, int64_t vocab, int64_t dim, double acc) {
  PlanBuilder p;
  int ids = p.Add("ids", {rows}, DType::kI32, BufferKind::kInput);
  int table = p.Add("table", {vocab, dim}, DType::kF32,
                    BufferKind::kParameter);
  int y = p.Add("y", {rows, dim});
  int dy = p.Add("dy", {rows, dim});
  int dtable = p.Add("dtable", {vocab, dim});
  p.Instr("embedding", {ids, table}, {y});
  p.Instr("embedding_grad", {dy, ids}, {dtable}, {{"accumulate", acc}});
  return p.plan;
}

TEST(CudaDeviceTest, Embedding) {
  SKIP_WITHOUT_GPU();
  for (int64_t dim : {7, 64, 100}) {
    for (double acc : {0.0, 1.0}) {
      constexpr int64_t kVocab = 50;
      SCOPED_TRACE(absl::StrCat("dim=", dim, " acc=", acc));
      ExpectMatchesCpu(EmbeddingPlan(300, kVocab, dim, acc), kFp32Tol,
                       static_cast<int>(kVocab));
    }
  }
}

// No float atomics: two runs give the same bits, with long runs of one id
// (3000 rows over 5 ids) and ids absent from the batch (vocab 64).
TEST(CudaDeviceTest, EmbeddingGradIsBitReproducible) {
  SKIP_WITHOUT_GPU();
  const Plan plan = EmbeddingPlan(3000, 64, 48, 1.0);
  const std::vector<char> init = RandomArena(plan, 5, 99);
  std::vector<char> first, second;
  for (std::vector<char>* out : {&first, &second}) {
    auto cuda = CreateCudaDevice(0);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    absl::Status s = RunOn(**cuda, plan, init, {}, 2, out);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(first, second);
}

TEST(CudaDeviceTest, EmbeddingBadIdFailsAtSynchronize) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  int ids = p.Add("ids", {4}, DType::kI32, BufferKind::kInput);
  int table = p.Add("table", {3, 8});
  int y = p.Add("y", {4, 8});
  p.Instr("embedding", {ids, table}, {y});
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  ASSERT_TRUE(d.AllocateArena(p.plan.arena_bytes).ok());
  absl::Status s = d.Prepare(p.plan);
  ASSERT_TRUE(s.ok()) << s;
  const int32_t bad[4] = {0, 2, -1, 1};  // -1 is outside [0, 3)
  ASSERT_TRUE(d.Upload(p.plan.buffers[ids].offset, bad, 16).ok());
  ASSERT_TRUE(d.RunKernel(p.plan, p.plan.instructions[0], {}).ok());
  s = d.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("token id"), std::string::npos) << s;
}

TEST(CudaDeviceTest, PositionEmbedding) {
  SKIP_WITHOUT_GPU();
  for (double acc : {0.0, 1.0}) {
    constexpr int64_t kBatch = 5, kPositions = 16, kDim = 24;
    PlanBuilder p;
    int table = p.Add("table", {kPositions, kDim}, DType::kF32,
                      BufferKind::kParameter);
    int y = p.Add("y", {kBatch, kPositions, kDim});
    int dy = p.Add("dy", {kBatch, kPositions, kDim});
    int dtable = p.Add("dtable", {kPositions, kDim});
    p.Instr("position_embedding", {table}, {y});
    p.Instr("position_embedding_grad", {dy}, {dtable}, {{"accumulate", acc}});
    SCOPED_TRACE(absl::StrCat("acc=", acc));
    ExpectMatchesCpu(p.plan, kFp32Tol);
  }
}

// Attention's gradient recomputes the scores and chains four products,
// each adding up to T or d terms: a little more rounding than one op.
constexpr double kAttentionTol = 5e-5;

struct AttentionShape {
  int64_t batch, seq, heads, kv_heads, head_dim;
  bool rope;
};

std::string AttentionText(const AttentionShape& a) {
  return absl::StrCat("B=", a.batch, " T=", a.seq, " H=", a.heads, " KV=", a.kv_heads,
                      " d=", a.head_dim, " rope=", a.rope);
}

// The buffers of AttentionPlan.
struct AttentionBuffers {
  int qkv, y, lse, dy, dqkv, delta;
};

// attention(qkv) -> y, lse, then attention_grad(dy, qkv, y, lse) -> dqkv,
// delta.
Plan AttentionPlan(const AttentionShape& a, double acc, AttentionBuffers* ids = nullptr) {
  const int64_t b = a.batch, T = a.seq, H = a.heads;
  const int64_t width = (a.heads + 2 * a.kv_heads) * a.head_dim, out = a.heads * a.head_dim;
  PlanBuilder p;
  AttentionBuffers id;
  id.qkv = p.Add("qkv", {b, T, width});
  id.y = p.Add("y", {b, T, out});
  id.lse = p.Add("lse", {b, H, T});
  id.dy = p.Add("dy", {b, T, out});
  id.dqkv = p.Add("dqkv", {b, T, width});
  id.delta = p.Add("delta", {b, H, T});
  std::map<std::string, double> attrs = {{"heads", static_cast<double>(H)},
                                         {"kv_heads", static_cast<double>(a.kv_heads)}};
  if (a.rope) {
    attrs["rope"] = 1;
    attrs["rope_theta"] = 10000;
  }
  p.Instr("attention", {id.qkv}, {id.y, id.lse}, attrs);
  attrs["accumulate"] = acc;
  p.Instr("attention_grad", {id.dy, id.qkv, id.y, id.lse}, {id.dqkv, id.delta}, attrs);
  if (ids != nullptr) *ids = id;
  return p.plan;
}

// Floats of buffer `id` in `arena` that are NaN or infinite.
int64_t NonFinite(const Plan& plan, int id, const std::vector<char>& arena) {
  const Buffer& b = plan.buffers[id];
  const float* v = reinterpret_cast<const float*>(arena.data() + b.offset);
  int64_t count = 0;
  for (int64_t i = 0; i < b.bytes / 4; ++i) count += !std::isfinite(v[i]);
  return count;
}

// One key or query tile (T <= 32) and several, with a partial last tile
// (T = 70); a single position; head sizes filling the 32-, 64- and
// 128-wide tiles and ones that leave part of them (and, 12, an odd number
// of rotated pairs); one kv head, grouped and as many as heads; rotary
// positions on and off; the gradient stored and accumulated.
TEST(CudaDeviceTest, Attention) {
  SKIP_WITHOUT_GPU();
  for (const AttentionShape& a : {AttentionShape{2, 64, 4, 4, 32, false},
                                  AttentionShape{3, 7, 4, 2, 24, true},
                                  AttentionShape{2, 1, 2, 1, 12, true},
                                  AttentionShape{2, 70, 6, 2, 64, true},
                                  AttentionShape{2, 70, 6, 3, 64, false},
                                  AttentionShape{1, 70, 2, 2, 128, false},
                                  AttentionShape{1, 33, 4, 1, 128, true},
                                  AttentionShape{2, 40, 3, 1, 12, true}}) {
    for (double acc : {0.0, 1.0}) {
      AttentionBuffers id;
      const Plan plan = AttentionPlan(a, acc, &id);
      SCOPED_TRACE(absl::StrCat(AttentionText(a), " acc=", acc));
      std::vector<char> gpu;
      ExpectMatchesCpuExcept(plan, kAttentionTol, 0, {}, &gpu);
      if (gpu.empty()) continue;  // the comparison already failed
      for (int out : {id.y, id.lse, id.dqkv, id.delta}) {
        EXPECT_EQ(NonFinite(plan, out, gpu), 0) << plan.buffers[out].name;
      }
    }
  }
}

// A sequence of 32 tiles: the online softmax over many key tiles, and the
// gradient's loops over many query tiles.
TEST(CudaDeviceTest, AttentionLongSequence) {
  SKIP_WITHOUT_GPU();
  for (bool rope : {false, true}) {
    const AttentionShape a{1, 1024, 4, 2, 64, rope};
    SCOPED_TRACE(AttentionText(a));
    ExpectMatchesCpuExcept(AttentionPlan(a, 1.0), kAttentionTol, 0, {});
  }
}

// Overwriting the gradient never reads what was there: NaNs in dqkv and
// delta beforehand change nothing.
TEST(CudaDeviceTest, AttentionGradOverwritesNaNs) {
  SKIP_WITHOUT_GPU();
  const AttentionShape a{2, 45, 4, 2, 24, true};
  AttentionBuffers id;
  const Plan plan = AttentionPlan(a, 0.0, &id);
  std::vector<char> init = RandomArena(plan, 0, 77);
  for (int out : {id.dqkv, id.delta}) {
    const Buffer& b = plan.buffers[out];
    float* v = reinterpret_cast<float*>(init.data() + b.offset);
    std::fill(v, v + b.bytes / 4, std::numeric_limits<float>::quiet_NaN());
  }
  std::vector<char> gpu;
  ExpectMatchesCpuFrom(plan, init, kAttentionTol, {}, &gpu);
  if (gpu.empty()) return;
  EXPECT_EQ(NonFinite(plan, id.dqkv, gpu), 0);
  EXPECT_EQ(NonFinite(plan, id.delta, gpu), 0);
}

// No atomics: two devices running the same steps give the same bits (the
// gradient accumulates, so the second step adds onto the first's).
TEST(CudaDeviceTest, AttentionIsBitReproducible) {
  SKIP_WITHOUT_GPU();
  const Plan plan = AttentionPlan({2, 200, 8, 2, 64, true}, 1.0);
  const std::vector<char> init = RandomArena(plan, 0, 5);
  std::vector<char> first, second;
  for (std::vector<char>* out : {&first, &second}) {
    auto cuda = CreateCudaDevice(0);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    absl::Status s = RunOn(**cuda, plan, init, {}, 2, out);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(first, second);
}

// The attention kernels are hand-written f32: a tf32 plan changes nothing.
TEST(CudaDeviceTest, AttentionIgnoresTf32) {
  SKIP_WITHOUT_GPU();
  Plan plan = AttentionPlan({2, 16, 4, 2, 32, true}, 1.0);
  plan.tf32 = true;
  ExpectMatchesCpuExcept(plan, kAttentionTol, 0, {});
}

// A head wider than the kernels' largest tile is refused when the plan is
// prepared, naming the instruction.
TEST(CudaDeviceTest, AttentionRefusesHeadsAbove128) {
  SKIP_WITHOUT_GPU();
  const Plan plan = AttentionPlan({1, 8, 2, 2, 160, false}, 0.0);
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  ASSERT_TRUE(d.AllocateArena(plan.arena_bytes).ok());
  const absl::Status s = d.Prepare(plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("instruction 0 (attention"), std::string::npos) << s;
  EXPECT_NE(s.message().find("head size 160"), std::string::npos) << s;
}

// The new ops in a captured graph (cub's sort and the gradient's memset,
// attention's kernels with their dynamic shared memory): three replays give
// the bits of three eager steps. The attention gradient accumulates, so
// each step changes the arena.
TEST(CudaDeviceTest, TransformerOpsCaptureMatchesEager) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  constexpr int64_t kRows = 200, kVocab = 30, kDim = 16;
  int ids = p.Add("ids", {kRows}, DType::kI32, BufferKind::kInput);
  int table = p.Add("table", {kVocab, kDim});
  int emb = p.Add("emb", {kRows, kDim});
  int demb = p.Add("demb", {kRows, kDim});
  int dtable = p.Add("dtable", {kVocab, kDim});
  p.Instr("embedding", {ids, table}, {emb});
  p.Instr("embedding_grad", {demb, ids}, {dtable}, {{"accumulate", 0}});
  const int64_t kB = 2, kT = 40, kH = 4, kKv = 2, kD = 8;
  int qkv = p.Add("qkv", {kB, kT, (kH + 2 * kKv) * kD});
  int y = p.Add("y", {kB, kT, kH * kD});
  int lse = p.Add("lse", {kB, kH, kT});
  int dy = p.Add("dy", {kB, kT, kH * kD});
  int dqkv = p.Add("dqkv", {kB, kT, (kH + 2 * kKv) * kD});
  int delta = p.Add("delta", {kB, kH, kT});
  std::map<std::string, double> attrs = {{"heads", kH}, {"kv_heads", kKv}, {"rope", 1}};
  p.Instr("attention", {qkv}, {y, lse}, attrs);
  attrs["accumulate"] = 1;
  p.Instr("attention_grad", {dy, qkv, y, lse}, {dqkv, delta}, attrs);
  const Plan& plan = p.plan;
  const std::vector<char> init = RandomArena(plan, kVocab, 21);
  auto run = [&](bool graph, std::vector<char>* out) -> absl::Status {
    auto made = CreateCudaDevice(0);
    if (!made.ok()) return made.status();
    Device& d = **made;
    absl::Status s;
    if (!(s = d.AllocateArena(plan.arena_bytes)).ok()) return s;
    if (!(s = d.Upload(0, init.data(), plan.arena_bytes)).ok()) return s;
    if (!(s = d.Prepare(plan)).ok()) return s;
    for (int step = 1; step <= 3; ++step) {
      if (!graph || step == 1) {
        if (graph && !(s = d.BeginCapture()).ok()) return s;
        if (!(s = d.ResetEvents(0)).ok()) return s;
        for (const Instruction& instr : plan.instructions) {
          if (!(s = d.RunKernel(plan, instr, {})).ok()) return s;
        }
        if (graph && !(s = d.EndCapture()).ok()) return s;
      }
      if (graph && !(s = d.Replay({})).ok()) return s;
      if (!(s = d.Synchronize()).ok()) return s;
    }
    out->assign(plan.arena_bytes, 0);
    return d.Download(0, out->data(), plan.arena_bytes);
  };
  std::vector<char> eager, graph;
  absl::Status s = run(false, &eager);
  ASSERT_TRUE(s.ok()) << s;
  s = run(true, &graph);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(eager, graph) << "replayed steps differ from eager ones";
}

// One bucket of 1000 parameters, stepped three times (bias corrections and
// the SGD momentum buffer's first step).
Plan OptimizerPlan(const OptimizerConfig& config) {
  PlanBuilder p;
  p.plan.optimizer = config;
  Bucket bucket;
  bucket.param_span = p.Add("params", {1000}, DType::kF32,
                            BufferKind::kParameterSpan);
  bucket.grad_buffer = p.Add("grads", {1000}, DType::kF32, BufferKind::kBucket);
  bucket.bytes = 4000;
  const int states = config.kind == OptimizerKind::kAdamW ? 2 : config.momentum != 0 ? 1 : 0;
  for (int s = 0; s < states; ++s) {
    bucket.state_spans.push_back(p.Add(absl::StrCat("state", s), {1000},
                                       DType::kF32,
                                       BufferKind::kStateSpan));
  }
  p.plan.buckets.push_back(bucket);
  // The planner's operands: params, grads, state spans -> params, state spans.
  std::vector<int> ins = {bucket.param_span, bucket.grad_buffer};
  std::vector<int> outs = {bucket.param_span};
  for (int s : bucket.state_spans) ins.push_back(s), outs.push_back(s);
  p.Instr("optimizer", ins, outs, {{"bucket", 0}});
  return p.plan;
}

TEST(CudaDeviceTest, AdamW) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 1e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0.01;
  Plan plan = OptimizerPlan(o);
  // State starts random (not zero) so m and v are exercised from step 1.
  StepState state{1, 1e-3};
  ExpectMatchesCpu(plan, kFp32Tol, 0, state, 3);
}

// ZeRO-1: a 3-rank bucket of 1,008 floats in shards of 336; rank 2's
// optimizer (with the clipping norm's sum of squares over its shard).
Plan ShardedOptimizerPlan(const OptimizerConfig& config) {
  constexpr int64_t kShard = 336, kWorld = 3;
  PlanBuilder p;
  p.plan.optimizer = config;
  p.plan.world_size = kWorld;
  p.plan.zero = 1;
  Bucket bucket;
  bucket.param_span = p.Add("params", {kShard * kWorld}, DType::kF32,
                            BufferKind::kParameterSpan);
  bucket.grad_buffer =
      p.Add("grads", {kShard * kWorld}, DType::kF32, BufferKind::kBucket);
  bucket.bytes = kShard * kWorld * 4;
  bucket.shard_elems = kShard;
  const int states = config.kind == OptimizerKind::kAdamW ? 2 : config.momentum != 0 ? 1 : 0;
  for (int s = 0; s < states; ++s) {
    bucket.state_spans.push_back(p.Add(absl::StrCat("state", s), {kShard},
                                       DType::kF32, BufferKind::kStateSpan));
  }
  p.plan.buckets.push_back(bucket);
  const int grad_sq =
      p.Add("grad_sq", {1}, DType::kF32, BufferKind::kStepScalar);
  p.Instr("sum_squares", {bucket.grad_buffer}, {grad_sq},
          {{"bucket", 0}, {"accumulate", 0}, {"shard", 1}});
  std::vector<int> outs = {bucket.param_span};
  for (int s : bucket.state_spans) outs.push_back(s);
  std::vector<int> ins = outs;
  ins.insert(ins.begin() + 1, bucket.grad_buffer);
  ins.push_back(grad_sq);
  p.Instr("optimizer", ins, outs, {{"bucket", 0}, {"clip", 0.5}, {"shard", 1}});
  return p.plan;
}

TEST(CudaDeviceTest, OptimizerOnItsZeroShardOnly) {
  SKIP_WITHOUT_GPU();
  OptimizerConfig adamw;
  adamw.kind = OptimizerKind::kAdamW;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.eps = 1e-8;
  adamw.weight_decay = 0.01;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.momentum = 0.9;
  for (const OptimizerConfig& o : {adamw, sgd}) {
    SCOPED_TRACE(EnumName(o.kind));
    const Plan plan = ShardedOptimizerPlan(o);
    StepState state{1, 1e-3};
    state.rank = 2;
    std::vector<char> gpu;
    ExpectMatchesCpuExcept(plan, kFp32Tol, 0, {}, &gpu, state, 2);
    // Outside rank 2's shard the parameters are as they started.
    const std::vector<char> init = RandomArena(plan, 0, 1234);
    const Buffer& params = plan.buffers[plan.buckets[0].param_span];
    const int64_t mine = 2 * plan.buckets[0].shard_elems * 4;
    EXPECT_EQ(0, std::memcmp(gpu.data() + params.offset,
                             init.data() + params.offset, mine));
    EXPECT_NE(0, std::memcmp(gpu.data() + params.offset + mine,
                             init.data() + params.offset + mine, 16));
  }
}

TEST(CudaDeviceTest, Sgd) {
  SKIP_WITHOUT_GPU();
  for (bool nesterov : {false, true}) {
    for (double momentum : {0.0, 0.9}) {
      if (nesterov && momentum == 0) continue;
      OptimizerConfig o;
      o.kind = OptimizerKind::kSgd;
      o.momentum = momentum;
      o.weight_decay = 0.01;
      o.nesterov = nesterov;
      SCOPED_TRACE(absl::StrCat("momentum ", momentum, " nesterov ", nesterov));
      ExpectMatchesCpu(OptimizerPlan(o), kFp32Tol, 0, StepState{1, 0.05}, 3);
    }
  }
}

TEST(CudaDeviceTest, OrderedSumIsBitExact) {
  SKIP_WITHOUT_GPU();
  const int64_t slots = 5, count = 3001;
  std::vector<float> host(slots * count);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (float& v : host) v = uni(rng);
  std::vector<float> want(count);
  for (int64_t i = 0; i < count; ++i) {
    float s = host[i];
    for (int64_t k = 1; k < slots; ++k) s += host[k * count + i];
    want[i] = s;
  }
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  ASSERT_TRUE(d.AllocateArena(host.size() * 4).ok());
  ASSERT_TRUE(d.Upload(0, host.data(), host.size() * 4).ok());
  float* base = reinterpret_cast<float*>(d.arena());
  // On compute, where the upload is ordered (the comm stream would need an
  // event first).
  ASSERT_TRUE(d.OrderedSum(Stream::kCompute, base, slots, count, base).ok());
  ASSERT_TRUE(d.Synchronize().ok());
  std::vector<float> got(count);
  ASSERT_TRUE(d.Download(0, got.data(), count * 4).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), count * 4));
}

// Events order the two streams: a comm-stream sum waits for a compute-stream
// upload, and Download (compute) waits for the sum.
TEST(CudaDeviceTest, EventsOrderStreams) {
  SKIP_WITHOUT_GPU();
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  const int64_t n = 1 << 20;
  ASSERT_TRUE(d.AllocateArena(2 * n * 4).ok());
  ASSERT_TRUE(d.ResetEvents(2).ok());
  std::vector<float> ones(2 * n, 1.0f);
  ASSERT_TRUE(d.Upload(0, ones.data(), 2 * n * 4).ok());
  ASSERT_TRUE(d.RecordEvent(Stream::kCompute, 0).ok());
  ASSERT_TRUE(d.WaitEvent(Stream::kComm, 0).ok());
  float* base = reinterpret_cast<float*>(d.arena());
  ASSERT_TRUE(d.OrderedSum(Stream::kComm, base, 2, n, base).ok());
  ASSERT_TRUE(d.RecordEvent(Stream::kComm, 1).ok());
  ASSERT_TRUE(d.WaitEvent(Stream::kCompute, 1).ok());
  std::vector<float> got(n);
  ASSERT_TRUE(d.Download(0, got.data(), n * 4).ok());
  EXPECT_EQ(got[0], 2.0f);
  EXPECT_EQ(got[n - 1], 2.0f);
  // A wait before its record is a usage error, not a silent race.
  ASSERT_TRUE(d.ResetEvents(2).ok());
  EXPECT_FALSE(d.WaitEvent(Stream::kCompute, 0).ok());
}

// A captured step replayed with new inputs and a new step number matches
// eager execution of the same steps; also with each replay's inputs fed
// while the replay before it still runs (the two sets of input slots, the
// copy stream), and an eager upload while they are held.
TEST(CudaDeviceTest, GraphCaptureMatchesEager) {
  SKIP_WITHOUT_GPU();
  PlanBuilder p;
  OptimizerConfig o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0.9;
  p.plan.optimizer = o;
  int x = p.Add("x", {B, IN}, DType::kF32, BufferKind::kInput);
  Bucket bucket;
  bucket.param_span = p.Add("w", {OUT, IN}, DType::kF32,
                            BufferKind::kParameterSpan);
  bucket.grad_buffer = p.Add("dw", {OUT, IN}, DType::kF32,
                             BufferKind::kBucket);
  bucket.bytes = OUT * IN * 4;
  bucket.state_spans = {p.Add("buf", {OUT, IN}, DType::kF32,
                              BufferKind::kStateSpan)};
  p.plan.buckets.push_back(bucket);
  int y = p.Add("y", {B, OUT});
  p.Instr("linear", {x, bucket.param_span}, {y});
  p.Instr("linear_grad_params", {y, x}, {bucket.grad_buffer});
  p.Instr("optimizer", {bucket.param_span, bucket.grad_buffer, bucket.state_spans[0]},
          {bucket.param_span, bucket.state_spans[0]}, {{"bucket", 0}});
  const Plan& plan = p.plan;
  const Buffer& xb = plan.buffers[x];
  const std::vector<char> init = RandomArena(plan, 0, 11);
  constexpr int kSteps = 7;
  std::vector<std::vector<float>> batches(kSteps, std::vector<float>(B * IN));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uni(-1, 1);
  for (auto& batch : batches) for (float& v : batch) v = uni(rng);

  auto run = [&](bool graph, bool ahead, std::vector<char>* out) -> absl::Status {
    auto made = CreateCudaDevice(0);
    if (!made.ok()) return made.status();
    Device& d = **made;
    absl::Status s;
    if (!(s = d.AllocateArena(plan.arena_bytes)).ok()) return s;
    if (!(s = d.Upload(0, init.data(), plan.arena_bytes)).ok()) return s;
    if (!(s = d.Prepare(plan)).ok()) return s;
    for (int step = 1; step <= kSteps; ++step) {
      StepState st{step, 0.01 / step};
      const bool replay = graph && step >= 3;
      if (graph && step == 2 && !(s = d.BeginCapture()).ok()) return s;
      if (replay && !ahead && !(s = d.BeginReplayInputs()).ok()) return s;
      if (!(replay && ahead) &&
          !(s = d.Upload(xb.offset, batches[step - 1].data(), xb.bytes)).ok())
        return s;
      if (!replay) {
        if (!(s = d.ResetEvents(0)).ok()) return s;
        for (const Instruction& instr : plan.instructions) {
          if (!(s = d.RunKernel(plan, instr, st)).ok()) return s;
        }
      }
      if (graph && step == 2 && !(s = d.EndCapture()).ok()) return s;
      if (graph && step >= 2 && !(s = d.Replay(st)).ok()) return s;
      if (graph && ahead && step >= 2 && step < kSteps) {
        // The next step's batch, while this replay runs.
        if (!(s = d.BeginReplayInputs()).ok()) return s;
        if (!(s = d.Upload(xb.offset, batches[step].data(), xb.bytes)).ok()) return s;
        if (!(s = d.EndReplayInputs()).ok()) return s;
      }
      if (!(s = d.Synchronize()).ok()) return s;
      if (step == 3) {
        // Eager work between replays (an evaluation): uploads outside a
        // BeginReplayInputs window go straight to the arena.
        std::vector<float> probe(B * IN, 0.5f), back(B * IN);
        if (!(s = d.Upload(xb.offset, probe.data(), xb.bytes)).ok()) return s;
        if (!(s = d.Download(xb.offset, back.data(), xb.bytes)).ok()) return s;
        if (back != probe) return absl::InternalError("eager upload lost");
      }
    }
    out->assign(plan.arena_bytes, 0);
    return d.Download(0, out->data(), plan.arena_bytes);
  };
  std::vector<char> eager;
  absl::Status s = run(false, false, &eager);
  ASSERT_TRUE(s.ok()) << s;
  const Buffer& w = plan.buffers[bucket.param_span];
  for (bool ahead : {false, true}) {
    std::vector<char> graph;
    s = run(true, ahead, &graph);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(0, std::memcmp(eager.data() + w.offset, graph.data() + w.offset, w.bytes))
        << "replayed parameters differ from eager ones" << (ahead ? " (fed ahead)" : "");
  }
}


// --- Convolution and pooling (cuDNN) on plans the real compiler makes ---

// Every window op both ways: a biased and a bias-free convolution, strides,
// padding, overlapping max-pooling windows whose padding must never win
// (c2 is about half negative), average pooling counting its padding, a
// global average, two convolutions reading p1 (dx accumulates), three
// pools reading c2 (their gradients accumulate) and a convolution's relu
// (c3: conv2d_relu, the plan's fusion). No ReLU comes right
// before a max pool: a window of tied zeros may send its gradient to a
// different (equally valid) element on each backend. With 8 and 16
// channels the CPU keeps some images channel-blocked (8-wide blocks; 16
// with AVX-512), which the comparison turns back to NCHW.
constexpr char kCnnModel[] = R"(
  input  x: f32[3, 10, 10]
  label  y: i32[4]
  c1     = conv2d(x, 8, kernel = 3, padding = 1)
  p1     = relu(max_pool2d(c1, 3, stride = 1, padding = 1))
  c2a    = conv2d(p1, 16, kernel = 2, stride = 2, bias = false)
  c2b    = conv2d(p1, 16, kernel = 4, stride = 2, padding = 1)
  c2     = c2a + c2b
  p2     = max_pool2d(c2, 3, stride = 2, padding = 1)
  a2     = avg_pool2d(c2, 3, stride = 1, padding = 1)
  c3     = relu(conv2d(a2, 5, kernel = 3, stride = 2, padding = 1))
  g      = linear(global_avg_pool(c2), 4)
  h      = linear(flatten(p2), 4)
  logits = linear(flatten(c3), 4) + g + h
  loss   = cross_entropy(logits, y)
)";
constexpr int kCnnClasses = 4;

absl::StatusOr<Plan> CompileCnn(int accumulate, bool tf32,
                                const PlanOptions& options,
                                const char* precision = "fp32") {
  const std::string source = absl::StrCat(
      "model cnn {\n", kCnnModel, "\n}\n",
      "data { train = idx(\"/dev/null\", \"/dev/null\") }\n",
      "train {\n  gpus = 1  micro_batch = 3  accumulate = ", accumulate,
      "  steps = 1", tf32 ? "  tf32 = true" : "", "  precision = ", precision,
      "\n  optimizer = sgd(lr = 0.1, momentum = 0.9)\n}\n");
  const FrontendResult r = CompileSource(source, "cnn.train");
  if (!r.spec) {
    return absl::InvalidArgumentError(
        FormatDiagnostics(r.diagnostics, r.source));
  }
  return BuildPlan(*r.spec, options);
}

// Workspace for both backends, so that one plan runs on each.
PlanOptions CpuAndCudaWorkspace() {
  PlanOptions options;
  options.workspace = [](const Plan& plan,
                         const Instruction& instr) -> absl::StatusOr<int64_t> {
    absl::StatusOr<int64_t> cpu_bytes = cpu::WorkspaceBytes(plan, instr);
    if (!cpu_bytes.ok()) return cpu_bytes.status();
    absl::StatusOr<int64_t> cuda_bytes = CudaWorkspaceBytes(plan, instr);
    if (!cuda_bytes.ok()) return cuda_bytes.status();
    return std::max(*cpu_bytes, *cuda_bytes);
  };
  return options;
}

PlanOptions CpuWorkspace() {
  PlanOptions options;
  options.workspace = cpu::WorkspaceBytes;
  return options;
}

// Uniform floats in [-1, 1], or labels in [0, kCnnClasses) for i32.
std::vector<char> RandomBytes(const Buffer& b, std::mt19937& rng) {
  std::vector<char> bytes(b.bytes);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int64_t i = 0; i < b.bytes / 4; ++i) {
    if (b.dtype == DType::kI32) {
      const int32_t v = static_cast<int32_t>(rng() % kCnnClasses);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    } else {
      const float v = uni(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  }
  return bytes;
}

// A buffer's values as floats (bf16 ones widened).
std::vector<float> AsFloats(const Buffer& b, const char* raw) {
  std::vector<float> out(b.bytes / DTypeBytes(b.dtype));
  if (b.dtype == DType::kBF16) {
    std::vector<uint16_t> half(out.size());
    std::memcpy(half.data(), raw, b.bytes);
    WidenBf16(half.data(), static_cast<int64_t>(half.size()), out.data());
  } else {
    std::memcpy(out.data(), raw, b.bytes);
  }
  return out;
}

// A [N, C, H, W] buffer of the CPU backend's channel-blocked layout
// (cpu::BlockedBuffers documents it) as NCHW floats.
std::vector<float> Unblocked(const Buffer& b, const char* raw, int64_t block) {
  const float* in = reinterpret_cast<const float*>(raw);
  std::vector<float> out(b.bytes / 4);
  const int64_t C = b.shape[1], HW = b.shape[2] * b.shape[3];
  for (int64_t n = 0; n < b.shape[0]; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t hw = 0; hw < HW; ++hw) {
        out[(n * C + c) * HW + hw] =
            in[((n * (C / block) + c / block) * HW + hw) * block + c % block];
      }
    }
  }
  return out;
}

// max over channels c of sum |x[n, c, h, w]| (x NCHW in `arena`).
double LargestChannelAbsSum(const Buffer& x, const std::vector<char>& arena) {
  const int64_t n = x.shape[0], c = x.shape[1];
  const int64_t hw = x.bytes / 4 / (n * c);
  const float* v = reinterpret_cast<const float*>(arena.data() + x.offset);
  double largest = 0;
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < hw; ++j) sum += std::fabs(v[(i * c + ch) * hw + j]);
    }
    largest = std::max(largest, sum);
  }
  return largest;
}

// Runs the step of `plan` on the CPU (the reference) and on `gpu` side by
// side, one instruction at a time, each from the same values: random
// parameters and batches to begin with, then before every instruction the
// CPU's arena copied into the GPU's, the operands the CPU keeps
// channel-blocked turned to NCHW on the way. So each kernel is checked
// alone, on identical inputs (no drift from earlier instructions; a max
// pool's window never has a different winner on each side), right after
// it ran (the planner reuses memory). Every output within `tol` relative
// to the buffer's largest magnitude (a convolution's bias gradient: to its
// largest channel's sum of |dy|), except workspaces and max pooling's
// argmax (each backend's own); every other byte of the GPU's arena
// unchanged. all_reduce over one rank is the identity and is skipped; the
// optimizer runs. Returns how many outputs were compared.
int ExpectSameStep(const Plan& plan, CpuDevice& cpu, Device& gpu, double tol) {
  const std::vector<bool> blocked = cpu::BlockedBuffers(plan);
  const int64_t block = cpu::ChannelBlock();
  std::mt19937 rng(2024);
  std::vector<char> arena = RandomArena(plan, kCnnClasses, 99);  // the CPU's
  const StepState step{1, 0.1};
  for (Device* d : {static_cast<Device*>(&cpu), &gpu}) {
    absl::Status s = d->AllocateArena(plan.arena_bytes);
    if (s.ok()) s = d->Prepare(plan);
    if (s.ok()) s = d->ResetEvents(plan.num_events);
    EXPECT_TRUE(s.ok()) << d->name() << ": " << s;
    if (!s.ok()) return 0;
  }
  const int64_t n = plan.arena_bytes;
  std::vector<char> before(n), after(n);  // the GPU's
  int compared = 0;
  for (const Instruction& instr : plan.instructions) {
    if (instr.op == "all_reduce") continue;
    if (instr.op == "load_batch") {
      for (int id : instr.outputs) {
        const Buffer& b = plan.buffers[id];
        const std::vector<char> batch = RandomBytes(b, rng);
        std::memcpy(arena.data() + b.offset, batch.data(), b.bytes);
      }
      continue;
    }
    const std::string what =
        absl::StrCat("instruction ", instr.id, " \"", instr.label,
                     "\" (micro-step ", instr.micro_step, ")");
    const std::vector<int>& written = instr.outputs;
    before = arena;
    std::vector<int> operands = instr.inputs;
    operands.insert(operands.end(), written.begin(), written.end());
    for (int id : operands) {
      if (!blocked[id]) continue;
      const Buffer& b = plan.buffers[id];
      const std::vector<float> nchw =
          Unblocked(b, arena.data() + b.offset, block);
      std::memcpy(before.data() + b.offset, nchw.data(), b.bytes);
    }
    absl::Status s = cpu.Upload(0, arena.data(), n);
    if (s.ok()) s = cpu.RunKernel(plan, instr, step);
    if (s.ok()) s = cpu.Synchronize();
    if (s.ok()) s = cpu.Download(0, arena.data(), n);
    EXPECT_TRUE(s.ok()) << "cpu: " << what << ": " << s;
    if (!s.ok()) return compared;
    s = gpu.Upload(0, before.data(), n);
    if (s.ok()) s = gpu.RunKernel(plan, instr, step);
    if (s.ok()) s = gpu.Synchronize();
    if (s.ok()) s = gpu.Download(0, after.data(), n);
    EXPECT_TRUE(s.ok()) << gpu.name() << ": " << what << ": " << s;
    if (!s.ok()) return compared;
    std::vector<char> is_output(n, 0);
    for (int id : written) {
      const Buffer& b = plan.buffers[id];
      std::fill(is_output.begin() + b.offset,
                is_output.begin() + b.offset + b.bytes, 1);
      if (b.kind == BufferKind::kWorkspace || b.dtype == DType::kI32) continue;
      const char* raw = arena.data() + b.offset;
      const std::vector<float> want =
          blocked[id] ? Unblocked(b, raw, block) : AsFloats(b, raw);
      const std::vector<float> got_values = AsFloats(b, after.data() + b.offset);
      const float* got = got_values.data();
      double diff = 0, scale = 1e-30;
      for (size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
      }
      if (instr.op == "conv2d_grad_params" && id == instr.outputs[1]) {
        // db[c] sums dy over (n, h, w), and random dy cancels in that sum:
        // its rounding is relative to the sum of |terms|, not to |db|.
        scale = std::max(scale, LargestChannelAbsSum(
                                    plan.buffers[instr.inputs[0]], before));
      }
      EXPECT_LE(diff / scale, tol)
          << gpu.name() << ": " << what << " -> " << b.name << ": max |diff| "
          << diff << ", max |cpu| " << scale;
      ++compared;
    }
    for (int64_t i = 0; i < n; ++i) {
      if (is_output[i] || before[i] == after[i]) continue;
      std::string holders;
      for (const Buffer& b : plan.buffers) {
        if (b.offset <= i && i < b.offset + b.bytes) {
          absl::StrAppend(&holders, " ", b.name);
        }
      }
      ADD_FAILURE() << gpu.name() << ": " << what << " changed arena byte "
                    << i << " outside its outputs (buffers there:" << holders
                    << ")";
      break;
    }
  }
  return compared;
}

void ExpectCnnMatchesCpu(int accumulate, bool tf32, double tol,
                         const char* precision = "fp32") {
  absl::StatusOr<Plan> plan =
      CompileCnn(accumulate, tf32, CpuAndCudaWorkspace(), precision);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Every instruction's outputs are compared (conv2d_relu's: the relu).
  CpuDevice cpu;
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const int compared = ExpectSameStep(*plan, cpu, **cuda, tol);
  EXPECT_GT(compared, 30 * accumulate);
}

// The model covers what the GPU tests below mean to check (needs no GPU).
TEST(CudaCnnTest, ModelCoversEveryWindowOpAndAccumulation) {
  absl::StatusOr<Plan> plan = CompileCnn(2, false, CpuWorkspace());
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::map<std::string, int> accumulated, seen;
  for (const Instruction& in : plan->instructions) {
    ++seen[in.op];
    auto acc = in.attrs.find("accumulate");
    if (acc != in.attrs.end() && acc->second == 1) ++accumulated[in.op];
  }
  for (const char* op :
       {"conv2d", "conv2d_relu", "conv2d_grad_input", "conv2d_grad_params", "max_pool2d",
        "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad", "reshape"}) {
    EXPECT_GT(seen[op], 0) << op;
  }
  // Gradient accumulation over micro-steps (parameters) and within one
  // (an image read twice).
  for (const char* op :
       {"conv2d_grad_input", "conv2d_grad_params", "avg_pool2d_grad"}) {
    EXPECT_GT(accumulated[op], 0) << op << " never accumulates";
  }
}

// Outside convolution and pooling there is no workspace, and nothing asks
// the GPU; for a convolution, without a GPU, the answer says why.
TEST(CudaCnnTest, WorkspaceBytesWithoutCudnnOps) {
  absl::StatusOr<Plan> plan = CompileCnn(1, false, CpuWorkspace());
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const Instruction& in : plan->instructions) {
    absl::StatusOr<int64_t> bytes = CudaWorkspaceBytes(*plan, in);
    if (!bytes.ok() &&
        bytes.status().code() == absl::StatusCode::kUnavailable &&
        CudaDeviceCount() == 0) {
      // No GPU to ask (or built without the toolkit, which says so for
      // every op): only convolution and pooling need one in a CUDA build.
      continue;
    }
    ASSERT_TRUE(bytes.ok()) << in.label << ": " << bytes.status();
    if (in.op == "relu" || in.op == "linear" || in.op == "reshape") {
      EXPECT_EQ(*bytes, 0) << in.label;
    }
  }
}

TEST(CudaCnnTest, MatchesCpuForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  ExpectCnnMatchesCpu(/*accumulate=*/1, /*tf32=*/false, kFp32Tol);
}

// Micro-step 1 adds its parameter gradients to micro-step 0's (cuDNN's
// beta = 1).
TEST(CudaCnnTest, AccumulatesOverMicroSteps) {
  SKIP_WITHOUT_GPU();
  ExpectCnnMatchesCpu(/*accumulate=*/2, /*tf32=*/false, kFp32Tol);
}

// TF32 rounds every convolution's and linear's operands to 10 mantissa
// bits, and the error compounds through the layers: this checks that the
// tensor-op path runs and stays close, not its precision.
TEST(CudaCnnTest, Tf32StaysClose) {
  SKIP_WITHOUT_GPU();
  ExpectCnnMatchesCpu(/*accumulate=*/1, /*tf32=*/true, 1e-2);
}

// precision = bf16, each kernel from the same bf16 and f32 operands: the
// CPU widens, computes in f32 and rounds; CUDA does the same around its
// kernels and multiplies bf16 operands with bf16 GEMMs (f32 accumulation).
// Sums in another order may round a bf16 result to its neighbour: one
// bf16 ulp (2^-8 relative) is the tolerance.
constexpr double kBf16Tol = 1.0 / 256;

TEST(CudaCnnTest, Bf16MatchesCpu) {
  SKIP_WITHOUT_GPU();
  ExpectCnnMatchesCpu(/*accumulate=*/2, /*tf32=*/false, kBf16Tol, "bf16");
}

// A two-layer GPT (embeddings, layernorm, attention, gelu_tanh, a tied
// output) in bf16: the transformer ops' staging, bf16 GEMMs and attention
// on bf16 tensors. `grouped`: one kv head for the two query heads, with
// rotary positions (q|k|v is then 2 * width wide).
struct GptSizes {
  int vocab = 16, ctx = 8, width = 16, heads = 2, layers = 2, micro_batch = 2;
};
absl::StatusOr<Plan> CompileBf16Gpt(bool grouped = false, GptSizes n = {}) {
  // The data only has to exist: the plan never reads it.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string text = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/bf16_gpt.txt");
  std::FILE* f = std::fopen(text.c_str(), "w");
  if (f == nullptr) return absl::InternalError("cannot write " + text);
  std::fputs("hello, bf16\n", f);
  std::fclose(f);
  const char* qkv_width = grouped ? "2 * width" : "3 * width";
  const char* attention_args = grouped ? "heads, kv_heads = 1, rope = true" : "heads";
  const std::string source = absl::StrCat(R"(
model gpt {
  const vocab = )", n.vocab, ", ctx = ", n.ctx, ", width = ", n.width, ", heads = ", n.heads, R"(
  input  tokens: i32[ctx]
  label  next:   i32[ctx]
  block layer(x) {
    ln_1   = layernorm(x)
    c_attn = linear(ln_1, )", qkv_width, R"()
    y      = causal_attention(c_attn, )", attention_args, R"()
    proj   = linear(y, width)
    r      = x + proj
    ln_2   = layernorm(r)
    c_fc   = linear(ln_2, 4 * width)
    c_out  = linear(gelu(c_fc, approximate = "tanh"), width)
    return r + c_out
  }
  wte    = embedding(tokens, vocab, width)
  wpe    = position_embedding(ctx, width)
  h      = repeat(layer, )", n.layers, R"(, wte + wpe)
  ln_f   = layernorm(h)
  logits = linear(ln_f, vocab, weight = wte.weight, bias = false)
  loss   = cross_entropy(logits, next)
}
data { train = text(")", text, R"(") }
train {
  gpus = 1  micro_batch = )", n.micro_batch, R"(  accumulate = 2  steps = 1  precision = bf16
  optimizer = adamw(lr = 1e-3)
}
)");
  const FrontendResult r = CompileSource(source, "gpt.train");
  if (!r.spec) {
    return absl::InvalidArgumentError(FormatDiagnostics(r.diagnostics, r.source));
  }
  return BuildPlan(*r.spec, CpuWorkspace());  // no convolution or pooling
}

// The bf16 models above compile into plans with bf16 buffers and casts
// (needs no GPU).
TEST(CudaBf16Test, ModelsCompileWithBf16Buffers) {
  for (absl::StatusOr<Plan> plan : {CompileCnn(2, false, CpuWorkspace(), "bf16"),
                                    CompileBf16Gpt(), CompileBf16Gpt(/*grouped=*/true)}) {
    ASSERT_TRUE(plan.ok()) << plan.status();
    int bf16 = 0, casts = 0;
    for (const Buffer& b : plan->buffers) bf16 += b.dtype == DType::kBF16;
    for (const Instruction& in : plan->instructions) casts += in.op == "cast";
    EXPECT_GT(bf16, 10) << plan->model;
    EXPECT_GT(casts, 4) << plan->model;
  }
}

// The bf16 operands the CUDA kernels read and write themselves get no f32
// staging: every operand of the matrix products, attention, the fused
// classifier, add_layernorm and the pointwise ops. On GPT-2 small's shapes
// (micro-batch 16) nothing is left to stage. Host-side rules: no GPU.
TEST(CudaBf16Test, NativeKernelsNeedNoStaging) {
  if (!cuda::KernelTableBuilt()) GTEST_SKIP() << "built without the CUDA toolkit";
  GptSizes gpt2;
  gpt2.vocab = 50257, gpt2.ctx = 1024, gpt2.width = 768, gpt2.heads = 12, gpt2.layers = 12;
  gpt2.micro_batch = 16;
  for (const GptSizes& sizes : {GptSizes{}, gpt2}) {
    absl::StatusOr<Plan> plan = CompileBf16Gpt(false, sizes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Pointers only: nothing reads the arena (a GPT-2 one is 9 GiB).
    char* const fake_arena = reinterpret_cast<char*>(uintptr_t{1} << 40);
    absl::StatusOr<std::vector<KernelArgs>> kernels =
        ResolveKernels(*plan, fake_arena, plan->arena_bytes, "cuda");
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    const std::set<std::string> native_ops = {
        "linear", "linear_gelu", "linear_grad_input", "linear_grad_input_gelu",
        "linear_grad_params", "attention",
        "attention_grad", "cross_entropy_fused", "gelu_tanh_grad", "add", "copy_grad",
        "add_layernorm"};
    int64_t all_staged = 0, cuda_staged = 0, checked = 0;
    for (KernelArgs& k : *kernels) {
      const Instruction& instr = plan->instructions[&k - kernels->data()];
      all_staged = std::max(all_staged, Bf16StagingBytes(k));
      const std::vector<bool> native = cuda::NativeBf16Operands(k);
      ASSERT_EQ(static_cast<int>(native.size()), k.num_bf16);
      for (int i = 0; i < k.num_bf16; ++i) {
        k.bf16[i].native = native[i];
        if (native_ops.count(instr.op)) {
          ++checked;
          EXPECT_TRUE(native[i]) << instr.op << " \"" << instr.label << "\": bf16 operand " << i
                                 << " is staged";
        }
      }
      cuda_staged = std::max(cuda_staged, Bf16StagingBytes(k));
    }
    EXPECT_GT(checked, 20);
    // What the planner asks for plans that run on GPUs (PlanOptions).
    absl::StatusOr<int64_t> planned = CudaBf16StagingBytes(*plan);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_EQ(*planned, cuda_staged);
    std::printf("width %d, vocab %d: bf16 staging %.1f MiB when every operand is staged, "
                "%.1f MiB on CUDA\n",
                sizes.width, sizes.vocab, all_staged / 1048576.0, cuda_staged / 1048576.0);
    EXPECT_EQ(cuda_staged, 0) << "all staged: " << all_staged;
    if (sizes.vocab == gpt2.vocab) {
      EXPECT_GT(all_staged, int64_t{3} << 30);
    }
  }
}

// In a bf16 CNN only cuDNN's convolution and pooling keep f32 staging;
// the rest (reshape, dropout, linear, the pointwise ops, the classifier)
// read and write bf16. Host-side rules: no GPU.
TEST(CudaBf16Test, CnnStagesOnlyWindowOps) {
  if (!cuda::KernelTableBuilt()) GTEST_SKIP() << "built without the CUDA toolkit";
  // fashion_cnn's shape at toy sizes: convolution, pooling, a dropout.
  const FrontendResult r = CompileSource(R"(
model cnn {
  input  x: f32[1, 8, 8]
  label  y: i32[4]
  c      = relu(conv2d(x, 4, kernel = 3, padding = 1))
  p      = max_pool2d(c, 2)
  h      = dropout(relu(linear(flatten(p), 16)), p = 0.3)
  logits = linear(h, 4)
  loss   = cross_entropy(logits, y)
}
data { train = idx("/dev/null", "/dev/null") }
train { gpus = 1  micro_batch = 3  steps = 1  precision = bf16 }
)",
                                         "cnn.train");
  ASSERT_TRUE(r.spec) << FormatDiagnostics(r.diagnostics, r.source);
  absl::StatusOr<Plan> plan = BuildPlan(*r.spec, CpuWorkspace());
  ASSERT_TRUE(plan.ok()) << plan.status();
  char* const fake_arena = reinterpret_cast<char*>(uintptr_t{1} << 40);
  absl::StatusOr<std::vector<KernelArgs>> kernels =
      ResolveKernels(*plan, fake_arena, plan->arena_bytes, "cuda");
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  std::set<std::string> staged_ops, native_ops;
  for (const KernelArgs& k : *kernels) {
    const std::string& op = plan->instructions[&k - kernels->data()].op;
    const std::vector<bool> native = cuda::NativeBf16Operands(k);
    for (int i = 0; i < k.num_bf16; ++i) (native[i] ? native_ops : staged_ops).insert(op);
  }
  for (const std::string& op : staged_ops) {
    EXPECT_TRUE(absl::StrContains(op, "conv2d") || absl::StrContains(op, "pool2d"))
        << op << " keeps f32 staging";
  }
  for (const char* op : {"reshape", "dropout", "dropout_grad", "linear"}) {
    EXPECT_TRUE(native_ops.count(op)) << op << ": " << absl::StrJoin(native_ops, " ");
  }
  EXPECT_TRUE(staged_ops.count("conv2d")) << absl::StrJoin(staged_ops, " ");
}

TEST(CudaBf16Test, GptMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(absl::StrCat("grouped=", grouped));
    absl::StatusOr<Plan> plan = CompileBf16Gpt(grouped);
    ASSERT_TRUE(plan.ok()) << plan.status();
    CpuDevice cpu;
    auto cuda = CreateCudaDevice(0);
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_GT(ExpectSameStep(*plan, cpu, **cuda, kBf16Tol), 50);
  }
}

// A plan compiled without cuDNN's workspace sizes is refused at Prepare,
// naming the instruction and the fix, when cuDNN needs any workspace.
TEST(CudaCnnTest, RefusesAPlanWithTooLittleWorkspace) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<Plan> plan = CompileCnn(1, false, PlanOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t needed = 0;
  for (const Instruction& in : plan->instructions) {
    absl::StatusOr<int64_t> bytes = CudaWorkspaceBytes(*plan, in);
    ASSERT_TRUE(bytes.ok()) << in.label << ": " << bytes.status();
    needed = std::max(needed, *bytes);
  }
  auto cuda = CreateCudaDevice(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  Device& d = **cuda;
  ASSERT_TRUE(d.AllocateArena(plan->arena_bytes).ok());
  absl::Status s = d.Prepare(*plan);
  if (needed == 0) {
    EXPECT_TRUE(s.ok()) << s;
    GTEST_SKIP() << "cuDNN needs no workspace for this model on this GPU";
  }
  ASSERT_FALSE(s.ok());
  const std::string message(s.message());
  EXPECT_NE(message.find("bytes of workspace, the plan reserves 0"),
            std::string::npos)
      << s;
  EXPECT_NE(message.find("compile it with --device cuda"), std::string::npos)
      << s;
}

// Two runs give the same bits, and a captured step replays them (cuDNN on
// the compute stream, no allocation in the step): three steps eager, and
// one captured then replayed three times.
TEST(CudaCnnTest, CaptureMatchesEagerBitForBit) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<Plan> compiled = CompileCnn(2, false, CpuAndCudaWorkspace());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const Plan& plan = *compiled;
  const std::vector<char> init = RandomArena(plan, kCnnClasses, 5);
  auto run = [&](bool graph, std::vector<char>* out) -> absl::Status {
    auto made = CreateCudaDevice(0);
    if (!made.ok()) return made.status();
    Device& d = **made;
    absl::Status s;
    if (!(s = d.AllocateArena(plan.arena_bytes)).ok()) return s;
    if (!(s = d.Upload(0, init.data(), plan.arena_bytes)).ok()) return s;
    if (!(s = d.Prepare(plan)).ok()) return s;
    // Each load_batch uploads the batch `init` holds, as the executor's
    // BatchSource does: the batch buffers share the arena with temporaries
    // (liveness), so a later micro-step or step cannot reuse what is left
    // there. A replay takes the same uploads, in order, into its slots.
    auto load = [&](const Instruction& instr) -> absl::Status {
      for (int id : instr.outputs) {
        const Buffer& b = plan.buffers[id];
        absl::Status u = d.Upload(b.offset, init.data() + b.offset, b.bytes);
        if (!u.ok()) return u;
      }
      return absl::OkStatus();
    };
    const StepState state{1, 0.05};
    for (int step = 1; step <= 3; ++step) {
      if (!graph || step == 1) {
        if (graph && !(s = d.BeginCapture()).ok()) return s;
        if (!(s = d.ResetEvents(0)).ok()) return s;  // no events recorded
        for (const Instruction& instr : plan.instructions) {
          if (instr.op == "all_reduce") continue;  // one rank
          s = instr.op == "load_batch" ? load(instr)
                                       : d.RunKernel(plan, instr, state);
          if (!s.ok()) return s;
        }
        if (graph && !(s = d.EndCapture()).ok()) return s;
      } else {
        if (!(s = d.BeginReplayInputs()).ok()) return s;
        for (const Instruction& instr : plan.instructions) {
          if (instr.op == "load_batch" && !(s = load(instr)).ok()) return s;
        }
      }
      if (graph && !(s = d.Replay(state)).ok()) return s;
      if (!(s = d.Synchronize()).ok()) return s;
    }
    out->assign(plan.arena_bytes, 0);
    return d.Download(0, out->data(), plan.arena_bytes);
  };
  std::vector<char> eager, graph;
  absl::Status s = run(false, &eager);
  ASSERT_TRUE(s.ok()) << s;
  s = run(true, &graph);
  ASSERT_TRUE(s.ok()) << s;
  int parameters = 0;
  for (const Buffer& b : plan.buffers) {
    if (b.kind != BufferKind::kParameter) continue;
    ++parameters;
    EXPECT_EQ(0, std::memcmp(eager.data() + b.offset, graph.data() + b.offset,
                             b.bytes))
        << b.name << " differs between eager and replayed steps";
  }
  EXPECT_GT(parameters, 0);
}

// ---- attention on tensor cores (attention_mma.cu) -------------------------
// Last in this file, so that a fault in the new kernels (CUDA errors are
// sticky for the process) cannot fail the tests above.

// TRAINC_CUDA_ATTENTION set to `choice` (null: unset) while it lives.
class ScopedAttentionChoice {
 public:
  explicit ScopedAttentionChoice(const char* choice) {
    if (choice != nullptr) {
      setenv("TRAINC_CUDA_ATTENTION", choice, 1);
    } else {
      unsetenv("TRAINC_CUDA_ATTENTION");
    }
  }
  ~ScopedAttentionChoice() { unsetenv("TRAINC_CUDA_ATTENTION"); }
};

// AttentionPlan with q|k|v, y, dy and dqkv in bf16 (precision = bf16; lse
// and delta stay f32). The buffers keep their offsets, now half full.
Plan Bf16AttentionPlan(const AttentionShape& a, double acc, AttentionBuffers* id) {
  Plan plan = AttentionPlan(a, acc, id);
  plan.precision = Precision::kBf16;
  for (int b : {id->qkv, id->y, id->dy, id->dqkv}) {
    plan.buffers[b].dtype = DType::kBF16;
    plan.buffers[b].bytes /= 2;
  }
  return plan;
}

attention::Geometry GeometryOf(const AttentionShape& a) {
  attention::Geometry g;
  g.batch = a.batch, g.seq = a.seq, g.heads = a.heads, g.kv_heads = a.kv_heads;
  g.head_dim = a.head_dim, g.rope = a.rope;
  return g;
}

// max |got - want| / max |want| over one buffer (bf16 ones widened).
double RelErrWidened(const Plan& plan, int id, const std::vector<char>& got,
                     const std::vector<char>& want) {
  const Buffer& b = plan.buffers[id];
  const std::vector<float> g = AsFloats(b, got.data() + b.offset);
  const std::vector<float> w = AsFloats(b, want.data() + b.offset);
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < g.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(g[i]) - w[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(w[i])));
  }
  return diff / scale;
}

// The final arena of `plan` on a CUDA device (`steps` steps from `init`)
// with TRAINC_CUDA_ATTENTION = `choice`.
absl::Status RunCudaAttention(const Plan& plan, const std::vector<char>& init, const char* choice,
                              int steps, std::vector<char>* out) {
  ScopedAttentionChoice scoped(choice);
  absl::StatusOr<std::unique_ptr<Device>> cuda = CreateCudaDevice(0);
  if (!cuda.ok()) return cuda.status();
  return RunOn(**cuda, plan, init, {}, steps, out);
}

// Four bf16 ulps: the tensor-core path rounds P and dS to bf16 before their
// products (as FlashAttention does), and rotated q and k with rope, besides
// the outputs' own rounding. A float64 emulation of that rounding on these
// shapes differs from the exact result by 0.002 to 0.004 of the largest
// value.
constexpr double kMmaAttentionTol = 4.0 / 256;

// bf16 operands of head size 64 and 128, T within one tile, across a
// partial last tile and over many (70, 257, 1024 against tiles of 64 and
// steps of 32); one kv head, grouped, as many as heads; rope on and off;
// the gradient stored and accumulated. Against the CPU (f32 arithmetic on
// the bf16 values), beside the f32 kernel's own difference.
TEST(CudaAttentionMmaTest, MatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const AttentionShape& a :
       {AttentionShape{2, 70, 4, 2, 64, true}, AttentionShape{2, 70, 4, 4, 64, false},
        AttentionShape{1, 100, 4, 1, 128, true}, AttentionShape{2, 64, 2, 2, 128, false},
        AttentionShape{2, 1, 2, 1, 64, true}, AttentionShape{1, 257, 6, 2, 64, true},
        AttentionShape{1, 1024, 4, 2, 64, false}, AttentionShape{1, 300, 4, 2, 128, true}}) {
    for (double acc : {0.0, 1.0}) {
      SCOPED_TRACE(absl::StrCat(AttentionText(a), " acc=", acc));
      AttentionBuffers id;
      const Plan plan = Bf16AttentionPlan(a, acc, &id);
      {
        ScopedAttentionChoice mma("mma");
        ASSERT_TRUE(cuda::AttentionUsesMma(GeometryOf(a), true));
      }
      const std::vector<char> init = RandomArena(plan, 0, 99);
      std::vector<char> cpu, f32, mma;
      CpuDevice cpu_device;
      absl::Status s = RunOn(cpu_device, plan, init, {}, 1, &cpu);
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_TRUE((s = RunCudaAttention(plan, init, nullptr, 1, &f32)).ok()) << s;
      ASSERT_TRUE((s = RunCudaAttention(plan, init, "mma", 1, &mma)).ok()) << s;
      for (int out : {id.y, id.lse, id.dqkv, id.delta}) {
        const double err = RelErrWidened(plan, out, mma, cpu);
        EXPECT_LE(err, kMmaAttentionTol) << plan.buffers[out].name << ": the f32 kernel's is "
                                         << RelErrWidened(plan, out, f32, cpu);
        const Buffer& b = plan.buffers[out];
        const std::vector<float> v = AsFloats(b, mma.data() + b.offset);
        EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }))
            << plan.buffers[out].name;
      }
      // P rounded to bf16 moves some bit: the tensor cores did run.
      if (a.seq > 1) {
        EXPECT_NE(mma, f32) << "the f32 kernels' bits: no tensor-core path ran";
      }
    }
  }
}

// No atomics: two devices running the same steps give the same bits (the
// gradient accumulates, so the second step adds onto the first's).
TEST(CudaAttentionMmaTest, IsBitReproducible) {
  SKIP_WITHOUT_GPU();
  AttentionBuffers id;
  const Plan plan = Bf16AttentionPlan({2, 200, 8, 2, 64, true}, 1.0, &id);
  const std::vector<char> init = RandomArena(plan, 0, 5);
  std::vector<char> first, second;
  absl::Status s = RunCudaAttention(plan, init, "mma", 2, &first);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE((s = RunCudaAttention(plan, init, "mma", 2, &second)).ok()) << s;
  EXPECT_EQ(first, second);
}

// Which path runs (host-side rules: no GPU needed): the f32 kernels unless
// TRAINC_CUDA_ATTENTION=mma, and then only bf16 heads of 64 or 128.
TEST(CudaAttentionMmaTest, ChosenOnlyWhenAskedForAndSupported) {
  if (!cuda::KernelTableBuilt()) GTEST_SKIP() << "built without the CUDA toolkit";
  const attention::Geometry d64 = GeometryOf({1, 8, 2, 2, 64, false});
  {
    ScopedAttentionChoice unset(nullptr);
    EXPECT_FALSE(cuda::AttentionUsesMma(d64, true));
  }
  ScopedAttentionChoice mma("mma");
  EXPECT_TRUE(cuda::AttentionUsesMma(d64, true));
  EXPECT_TRUE(cuda::AttentionUsesMma(GeometryOf({1, 8, 4, 1, 128, true}), true));
  EXPECT_FALSE(cuda::AttentionUsesMma(d64, false));
  for (int64_t d : {32, 96, 24}) {
    EXPECT_FALSE(cuda::AttentionUsesMma(GeometryOf({1, 8, 2, 2, d, false}), true)) << d;
  }
  ScopedAttentionChoice other("f32");
  EXPECT_FALSE(cuda::AttentionUsesMma(d64, true));
}

}  // namespace
}  // namespace trainc
