#include "runtime/cuda/cudnn_ops.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <climits>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/kernels.h"

namespace trainc::cuda {
namespace {

// The fixed algorithms (cuDNN's documentation: every forward algorithm is
// deterministic; backward data ALGO_1 and backward filter ALGO_1 are, where
// ALGO_0 and filter ALGO_3 sum with atomics and are not).
constexpr cudnnConvolutionFwdAlgo_t kForwardAlgo =
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
constexpr cudnnConvolutionBwdDataAlgo_t kBackwardDataAlgo =
    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
constexpr cudnnConvolutionBwdFilterAlgo_t kBackwardFilterAlgo =
    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

bool IsConv(KernelOp op) {
  return op == KernelOp::kConv2d || op == KernelOp::kConv2dRelu ||
         op == KernelOp::kConv2dGradInput ||
         op == KernelOp::kConv2dGradParams;
}

bool IsMaxPool(KernelOp op) {
  return op == KernelOp::kMaxPool2d || op == KernelOp::kMaxPool2dGrad;
}

// The descriptors of one instruction, in the roles of WindowGeometry.
struct Descriptors {
  cudnnTensorDescriptor_t image = nullptr;   // x or dx [n, c, h, w]
  cudnnTensorDescriptor_t other = nullptr;   // y or dy [n, o, oh, ow]
  cudnnTensorDescriptor_t bias = nullptr;    // b or db [1, o, 1, 1]
  cudnnFilterDescriptor_t filter = nullptr;  // w or dw [o, c, kh, kw]
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;

  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (pool) cudnnDestroyPoolingDescriptor(pool);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (filter) cudnnDestroyFilterDescriptor(filter);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (other) cudnnDestroyTensorDescriptor(other);
    if (image) cudnnDestroyTensorDescriptor(image);
  }
};

// The legacy API takes int dimensions and tensors of fewer than 2^31
// elements.
absl::Status CheckIntRange(const WindowGeometry& g) {
  const int64_t dims[] = {g.n,  g.c,  g.h,  g.w,      g.o,      g.oh,
                          g.ow, g.kh, g.kw, g.stride, g.padding};
  for (int64_t d : dims) {
    if (d < 0 || d > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("a dimension (", d, ") beyond cuDNN's int range"));
    }
  }
  const int64_t image = g.n * g.c * g.h * g.w, other = g.n * g.o * g.oh * g.ow;
  const int64_t filter = g.o * g.c * g.kh * g.kw;
  if (image > INT_MAX || other > INT_MAX || filter > INT_MAX) {
    return absl::InvalidArgumentError(
        "a tensor of 2^31 elements or more (cuDNN's legacy API refuses "
        "them): use a smaller micro_batch");
  }
  return absl::OkStatus();
}

// Describes `k` (its geometry only: no pointers are read).
absl::Status Describe(const KernelArgs& k, bool tf32, Descriptors& d) {
  const WindowGeometry& g = k.window;
  RETURN_IF_ERROR(CheckIntRange(g));
  auto i = [](int64_t v) { return static_cast<int>(v); };
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.image));
  CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.image, CUDNN_TENSOR_NCHW,
                                                   CUDNN_DATA_FLOAT, i(g.n),
                                                   i(g.c), i(g.h), i(g.w)));
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.other));
  CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(d.other, CUDNN_TENSOR_NCHW,
                                                   CUDNN_DATA_FLOAT, i(g.n),
                                                   i(g.o), i(g.oh), i(g.ow)));
  if (IsConv(k.op)) {
    CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&d.filter));
    CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        d.filter, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(g.o), i(g.c), i(g.kh),
        i(g.kw)));
    CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&d.conv));
    // PyTorch's conv2d is a cross-correlation (the kernel is not flipped).
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
        d.conv, i(g.padding), i(g.padding), i(g.stride), i(g.stride),
        /*dilation_h=*/1, /*dilation_w=*/1, CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    // FMA math keeps FP32 products exact to FP32 (no tensor cores, which
    // would round the operands to TF32); tensor-op math allows TF32, as
    // cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32 does for the linears.
    CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
        d.conv, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    if (g.has_bias) {
      CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d.bias));
      CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
          d.bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(g.o), 1, 1));
    }
  } else {
    // Max: padding is -inf to cuDNN (never the max, as PyTorch), and NaN
    // propagates as in PyTorch (a diverging run shows in its loss).
    // Average: padding counts as zeros (PyTorch's count_include_pad).
    CUDNN_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(&d.pool));
    CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
        d.pool,
        IsMaxPool(k.op) ? CUDNN_POOLING_MAX_DETERMINISTIC
                        : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_PROPAGATE_NAN, i(g.kh), i(g.kw), i(g.padding), i(g.padding),
        i(g.stride), i(g.stride)));
  }
  return absl::OkStatus();
}

// The bytes of workspace cuDNN's algorithm for `k` needs.
absl::StatusOr<int64_t> WorkspaceOf(cudnnHandle_t handle, const KernelArgs& k,
                                    const Descriptors& d) {
  size_t bytes = 0;
  switch (k.op) {
    case KernelOp::kConv2d:
    case KernelOp::kConv2dRelu:
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
          handle, d.image, d.filter, d.conv, d.other, kForwardAlgo, &bytes));
      break;
    case KernelOp::kConv2dGradInput:
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, d.filter, d.other, d.conv, d.image, kBackwardDataAlgo,
          &bytes));
      break;
    case KernelOp::kConv2dGradParams:
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, d.image, d.other, d.conv, d.filter, kBackwardFilterAlgo,
          &bytes));
      break;
    default:  // pooling needs none
      break;
  }
  return static_cast<int64_t>(bytes);
}

// A handle per GPU for sizing workspaces before any device exists (the
// planner's PlanOptions::workspace), made on first use and kept for the
// process: cudnnCreate is slow, and the planner asks once per instruction.
// Sizing only reads descriptors, so the handle needs no stream.
std::mutex& SizingMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

absl::StatusOr<cudnnHandle_t> SizingHandleLocked() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no driver or no device: not sticky
    return absl::UnavailableError(
        "cuda: no CUDA GPU visible to size cuDNN's workspaces; compile the "
        "plan on a machine with the GPU, or for --device cpu");
  }
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  static auto* handles = new std::map<int, cudnnHandle_t>();
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t status = cudnnCreate(&handle);
  if (status != CUDNN_STATUS_SUCCESS) {
    return absl::UnavailableError(
        absl::StrCat("cuda: cannot create a cuDNN handle on GPU ", device,
                     ": ", cudnnGetErrorString(status)));
  }
  handles->emplace(device, handle);
  return handle;
}

}  // namespace

bool IsCudnnOp(KernelOp op) { return IsWindowOp(op); }

absl::StatusOr<int64_t> CudnnWorkspaceBytes(const Plan& plan,
                                            const Instruction& instr) {
  ASSIGN_OR_RETURN(KernelArgs k, DescribeKernel(plan, instr, "cuda"));
  if (!IsCudnnOp(k.op)) return 0;
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda: instruction ", instr.id, " (", instr.op, " \"",
                     instr.label, "\"): ", why));
  };
  std::lock_guard<std::mutex> lock(SizingMutex());
  ASSIGN_OR_RETURN(cudnnHandle_t handle, SizingHandleLocked());
  Descriptors d;
  if (absl::Status s = Describe(k, plan.tf32, d); !s.ok()) {
    return fail(s.message());
  }
  absl::StatusOr<int64_t> bytes = WorkspaceOf(handle, k, d);
  if (!bytes.ok()) return fail(bytes.status().message());
  return *bytes;
}

// One prepared instruction.
struct Program {
  KernelArgs k;
  Descriptors d;
  int64_t workspace_bytes = 0;  // what cuDNN needs (<= the plan's)
};

struct CudnnOps::State {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;  // the handle's
  // By instruction id; null for instructions that are not cuDNN's.
  std::vector<std::unique_ptr<Program>> programs;

  ~State() {
    programs.clear();  // descriptors before the handle
    if (handle) cudnnDestroy(handle);
  }
};

CudnnOps::CudnnOps() : state_(std::make_unique<State>()) {}
CudnnOps::~CudnnOps() = default;

absl::Status CudnnOps::Init(cudaStream_t stream) {
  if (state_->handle != nullptr) {
    return absl::FailedPreconditionError("cuDNN: Init called twice");
  }
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&state_->handle));
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(state_->handle, stream));
  state_->stream = stream;
  return absl::OkStatus();
}

void CudnnOps::Clear() { state_->programs.clear(); }

absl::Status CudnnOps::Add(const Instruction& instr, const KernelArgs& k, bool tf32,
                           const std::string& device_name) {
  if (state_->handle == nullptr) {
    return absl::FailedPreconditionError("cuDNN: Add before Init");
  }
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(device_name, ": instruction ", instr.id,
                                                   " (", instr.op, " \"", instr.label,
                                                   "\"): ", why));
  };
  if (!IsCudnnOp(k.op)) return fail("not a cuDNN op");
  auto program = std::make_unique<Program>();
  program->k = k;
  if (absl::Status s = Describe(k, tf32, program->d); !s.ok()) {
    return fail(s.message());
  }
  absl::StatusOr<int64_t> need = WorkspaceOf(state_->handle, k, program->d);
  if (!need.ok()) return fail(need.status().message());
  if (*need > k.workspace_bytes) {
    return fail(absl::StrCat(
        "cuDNN needs ", *need, " bytes of workspace, the plan reserves ",
        k.workspace_bytes,
        " (a plan compiled for another device? compile it with --device "
        "cuda)"));
  }
  program->workspace_bytes = *need;
  if (instr.id >= static_cast<int>(state_->programs.size())) {
    state_->programs.resize(instr.id + 1);
  }
  state_->programs[instr.id] = std::move(program);
  return absl::OkStatus();
}

absl::Status CudnnOps::Run(int id) {
  if (id < 0 || id >= static_cast<int>(state_->programs.size()) ||
      state_->programs[id] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda: instruction ", id,
                     " has no cuDNN descriptors (not Prepare()d)"));
  }
  const Program& p = *state_->programs[id];
  const KernelArgs& k = p.k;
  const Descriptors& d = p.d;
  cudnnHandle_t h = state_->handle;
  const float one = 1.0f, zero = 0.0f;
  // out = v, or out += v for the gradients that accumulate.
  const float* beta = k.accumulate ? &one : &zero;
  void* workspace = p.workspace_bytes > 0 ? k.workspace : nullptr;
  const size_t workspace_bytes = static_cast<size_t>(p.workspace_bytes);
  switch (k.op) {
    case KernelOp::kConv2d:
    case KernelOp::kConv2dRelu:
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionForward(
          h, &one, d.image, k.x[0], d.filter, k.x[1], d.conv, kForwardAlgo,
          workspace, workspace_bytes, beta, d.other, k.y[0]));
      if (k.window.has_bias) {
        // y += b, broadcast over n, h, w.
        CUDNN_RETURN_IF_ERROR(
            cudnnAddTensor(h, &one, d.bias, k.x[2], &one, d.other, k.y[0]));
      }
      if (k.op == KernelOp::kConv2dRelu) {
        // conv2d_relu: the relu over y in place, the relu op's own kernel.
        const int64_t n = k.window.n * k.window.o * k.window.oh * k.window.ow;
        CUDA_RETURN_IF_ERROR(
            LaunchPointwise(KernelOp::kRelu, k.y[0], nullptr, k.y[0], n, false, state_->stream));
      }
      break;
    case KernelOp::kConv2dGradInput:
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
          h, &one, d.filter, k.x[1], d.other, k.x[0], d.conv,
          kBackwardDataAlgo, workspace, workspace_bytes, beta, d.image,
          k.y[0]));
      break;
    case KernelOp::kConv2dGradParams:
      CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
          h, &one, d.image, k.x[1], d.other, k.x[0], d.conv,
          kBackwardFilterAlgo, workspace, workspace_bytes, beta, d.filter,
          k.y[0]));
      if (k.window.has_bias) {
        CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(
            h, &one, d.other, k.x[0], beta, d.bias, k.y[1]));
      }
      break;
    case KernelOp::kMaxPool2d:
    case KernelOp::kAvgPool2d:
      // y[1] of max pooling (the argmax) is the CPU backend's; unused here.
      CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(h, d.pool, &one, d.image,
                                                k.x[0], beta, d.other, k.y[0]));
      break;
    case KernelOp::kMaxPool2dGrad:
      // dx (+)= the gradient of the maxima, found again from x and y.
      CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(
          h, d.pool, &one, d.other, k.x[2], d.other, k.x[0], d.image, k.x[1],
          beta, d.image, k.y[0]));
      break;
    case KernelOp::kAvgPool2dGrad:
      // The average's gradient depends on dy only; cuDNN's signature still
      // takes y and x, which it does not read in average mode: dy and dx
      // (valid pointers of those shapes) stand in for them.
      CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(
          h, d.pool, &one, d.other, k.x[0], d.other, k.x[0], d.image, k.y[0],
          beta, d.image, k.y[0]));
      break;
    default:
      return absl::InternalError("cuda: not a cuDNN op");
  }
  return absl::OkStatus();
}

}  // namespace trainc::cuda
