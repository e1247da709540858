#include "runtime/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cublasLt.h>
#include <cublas_v2.h>
// cuda_runtime.h (not _api.h) for the typed cudaMalloc<T> overloads.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/cudnn_ops.h"
#include "runtime/device/kernel_args.h"
#include "runtime/cuda/kernels.h"

namespace trainc {
namespace {

using cuda::OptimizerStepScalars;

// cuBLAS/cublasLt share one workspace: they run on the compute stream only,
// so their uses never overlap. A fixed workspace (instead of cuBLAS's own
// allocations) is also what CUDA-graph capture requires.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;
// Pinned staging buffers for Upload: a ring, so that up to this many
// chunks can be in flight before the host waits for the oldest. Uploads are
// cut into chunks of at most kStagingChunkBytes, which bounds the pinned
// memory (a checkpoint load does not pin copies of the whole model).
constexpr int kStagingSlots = 8;
constexpr int64_t kStagingChunkBytes = 8 << 20;

// OK, or `err` as a Status (CUDA_RETURN_IF_ERROR where returning at once
// is not what the caller wants).
absl::Status CudaOk(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return cuda::CudaErrorToStatus(err, what, __FILE__, __LINE__);
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Instructions resolved once by Prepare (runtime/device/kernel_args.h).
using Op = KernelOp;

// A forward linear as one cublasLt call: y = x w^T + b (D = op(A) B + bias
// in cuBLAS's column-major view, see Prepare), optionally with ReLU.
struct LtMatmul {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool usable = false;  // false: fall back to cublasGemmEx + bias kernel

  void Destroy() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
    *this = LtMatmul();
  }
};

// A resolved instruction plus what only this backend needs.
struct Kernel : KernelArgs {
  Kernel() = default;
  explicit Kernel(const KernelArgs& args) : KernelArgs(args) {}
  bool relu_in_gemm = false;  // linear: ReLU epilogue writes act_out, y dead
  int lt = -1;                // linear: index into lt_matmuls_
  // precision = bf16, the linear ops: x[0] and x[1] as the bf16 tensors
  // they are staged from, multiplied by a bf16 GEMM with f32 accumulation
  // and an f32 result (null: an f32 GEMM on x).
  const void* gemm_bf16[2] = {nullptr, nullptr};
};

class CudaDeviceImpl final : public CudaDevice {
 public:
  explicit CudaDeviceImpl(int ordinal) : ordinal_(ordinal) {}
  ~CudaDeviceImpl() override;

  absl::Status Init();

  std::string name() const override { return name_; }
  int ordinal() const override { return ordinal_; }

  absl::Status AllocateArena(int64_t bytes) override;
  char* arena() override { return arena_; }
  absl::Status Upload(int64_t offset, const void* src, int64_t bytes) override;
  absl::Status Download(int64_t offset, void* dst, int64_t bytes) override;

  absl::Status Prepare(const Plan& plan) override;
  absl::Status RunKernel(const Plan& plan, const Instruction& instr,
                         const StepState& state) override;
  absl::Status OrderedSum(Stream stream, const float* src, int64_t n,
                          int64_t count, float* dst) override;
  absl::StatusOr<char*> AllocateScratch(int64_t bytes) override;

  absl::Status Submit(Stream stream,
                      std::function<absl::Status()> work) override;
  absl::Status SubmitTimed(Stream stream, std::function<absl::Status()> work,
                           TimedCallback on_timed) override;
  absl::Status RecordEvent(Stream stream, int event) override;
  absl::Status WaitEvent(Stream stream, int event) override;
  absl::Status ResetEvents(int num_events) override;
  absl::Status Synchronize() override;
  void* NativeStream(Stream stream) override { return StreamOf(stream); }
  absl::Status Copy(Stream stream, const void* src, void* dst,
                    int64_t bytes) override;
  absl::Status CopyToHost(const void* src, void* dst, int64_t bytes) override;
  absl::Status CopyFromHost(const void* src, void* dst,
                            int64_t bytes) override;

  bool SupportsCapture() const override { return true; }
  absl::Status BeginCapture() override;
  absl::Status EndCapture() override;
  absl::Status BeginReplayInputs() override;
  absl::Status Replay(const StepState& state) override;
  absl::Status DropCapture() override;

 private:
  struct Staging {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    cudaEvent_t done = nullptr;  // the copy out of `host` has finished
  };
  struct TimedWork {
    cudaEvent_t begin, end;
    TimedCallback on_timed;
  };
  // One Upload of the captured step: the graph copies `device` -> arena.
  struct InputSlot {
    int64_t offset = 0;
    int64_t bytes = 0;
    char* device = nullptr;
    std::vector<char> pending;  // the capture-time data, uploaded at EndCapture
  };

  cudaStream_t StreamOf(Stream s) const {
    return s == Stream::kComm ? comm_ : compute_;
  }
  absl::Status Fail(absl::Status status) {
    if (sticky_.ok()) sticky_ = status;
    return status;
  }
  absl::Status CheckRange(const char* what, int64_t offset,
                          int64_t bytes) const;
  absl::Status Zero(void* p, size_t bytes);
  // Host -> device through the pinned ring, ordered on the compute stream.
  absl::Status StagedCopy(void* device_dst, const void* src, int64_t bytes);
  absl::Status UploadStepScalars(const Plan& plan, const StepState& state);
  absl::Status EnsureKernelScratch(int64_t floats);
  absl::Status BuildLtMatmul(const Kernel& k, bool tf32, int* index);
  absl::Status RunLinear(const Kernel& k);
  // RunKernel's kernel proper, on f32 operands (bf16 ones staged).
  absl::Status RunF32Kernel(const Plan& plan, const Instruction& instr,
                            const StepState& step);
  // C (f32) = A B (+ beta C); A and B f32, or bf16 when `ab` says so.
  absl::Status Gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                    int64_t n, int64_t k, const void* a, int64_t lda,
                    const void* b, int64_t ldb, float beta, float* c,
                    int64_t ldc, cudaDataType_t ab = CUDA_R_32F);
  // The two operands of a linear op's GEMM: bf16 when gemm_bf16 is set.
  static const void* GemmOperand(const Kernel& k, int i) {
    return k.gemm_bf16[i] != nullptr ? k.gemm_bf16[i] : k.x[i];
  }
  static cudaDataType_t GemmType(const Kernel& k) {
    return k.gemm_bf16[0] != nullptr ? CUDA_R_16BF : CUDA_R_32F;
  }
  // One product per (batch, head) of an attention instruction, as
  // strided-batched cuBLAS calls (see HeadGemms).
  struct HeadStrides {
    int64_t batch;  // elements from batch element b to b + 1
    int64_t head;   // elements from head h to h + 1
  };
  absl::Status HeadGemms(const Kernel& k, cublasOperation_t ta,
                         cublasOperation_t tb, int64_t m, int64_t n,
                         int64_t depth, const float* a, int64_t lda,
                         HeadStrides sa, const float* b, int64_t ldb,
                         HeadStrides sb, float beta, float* c, int64_t ldc,
                         HeadStrides sc);
  absl::Status RunAttention(const Kernel& k);
  absl::Status RunAttentionGrad(const Kernel& k);
  absl::StatusOr<cudaEvent_t> TimingEvent();
  // Reports (report) or drops the timed work of the step, and returns its
  // events to the pool either way.
  absl::Status ResolveTimings(bool report);
  void ReleaseLtMatmuls();

  const int ordinal_;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* blas_workspace_ = nullptr;
  // Convolution and pooling; its handle runs on compute_, like cuBLAS's.
  std::unique_ptr<cuda::CudnnOps> cudnn_;

  char* arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  std::vector<void*> scratch_;  // AllocateScratch blocks
  float* kernel_scratch_ = nullptr;  // reductions' partial sums
  char* bf16_staging_ = nullptr;     // f32 views of bf16 operands
  int64_t bf16_staging_bytes_ = 0;
  int64_t kernel_scratch_floats_ = 0;
  int* device_error_ = nullptr;  // kernels' error bits (kernels.h)
  // [0]: with weight decay; [1]: without (buckets of vectors).
  OptimizerStepScalars* device_scalars_ = nullptr;
  bool scalars_valid_ = false;
  StepState scalars_state_;

  Staging staging_[kStagingSlots];
  int next_staging_ = 0;

  std::vector<cudaEvent_t> events_;  // the plan's events (ordering only)
  std::vector<char> recorded_;       // host-side: recorded this step
  cudaEvent_t fork_event_ = nullptr;  // compute -> comm at BeginCapture
  cudaEvent_t join_event_ = nullptr;  // comm -> compute at EndCapture

  std::vector<cudaEvent_t> timing_pool_;
  std::vector<TimedWork> timed_;
  cudaEvent_t anchor_ = nullptr;  // recorded when the host read anchor_ns_
  int64_t anchor_ns_ = 0;

  const Plan* prepared_plan_ = nullptr;
  std::vector<Kernel> kernels_;
  std::vector<LtMatmul> lt_matmuls_;
  bool tf32_ = false;

  bool capturing_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::vector<InputSlot> input_slots_;
  // Slots holding the next replay's data: all of them after EndCapture,
  // refilled from 0 after BeginReplayInputs, none after a Replay.
  size_t next_input_slot_ = 0;
  bool feeding_ = false;  // BeginReplayInputs .. Replay: uploads -> slots

  absl::Status sticky_;  // first error of submitted work
};

CudaDeviceImpl::~CudaDeviceImpl() {
  // Best effort: a destructor cannot report, and the streams must be idle
  // before their memory goes.
  cudaSetDevice(ordinal_);
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_) cudaStreamSynchronize(comm_);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  for (InputSlot& slot : input_slots_) cudaFree(slot.device);
  ReleaseLtMatmuls();
  cudnn_.reset();  // its handle is bound to compute_, destroyed below
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  for (cudaEvent_t e : timing_pool_) cudaEventDestroy(e);
  for (TimedWork& t : timed_) {
    cudaEventDestroy(t.begin);
    cudaEventDestroy(t.end);
  }
  if (anchor_) cudaEventDestroy(anchor_);
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  for (Staging& s : staging_) {
    if (s.host) cudaFreeHost(s.host);
    if (s.done) cudaEventDestroy(s.done);
  }
  for (void* p : scratch_) cudaFree(p);
  if (kernel_scratch_) cudaFree(kernel_scratch_);
  if (bf16_staging_) cudaFree(bf16_staging_);
  if (device_scalars_) cudaFree(device_scalars_);
  if (device_error_) cudaFree(device_error_);
  if (arena_) cudaFree(arena_);
  if (blas_workspace_) cudaFree(blas_workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (blas_) cublasDestroy(blas_);
  if (comm_) cudaStreamDestroy(comm_);
  if (compute_) cudaStreamDestroy(compute_);
}

absl::Status CudaDeviceImpl::Init() {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  cudaDeviceProp prop;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal_));
  name_ = absl::StrCat("cuda:", ordinal_, " (", prop.name, ", sm_",
                       prop.major, prop.minor, ")");
  // Non-blocking: the plan's streams must not serialise with the legacy
  // default stream that libraries or other code may use.
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas_));
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_, compute_));
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes));
  CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
  // cuDNN's scratch is each instruction's workspace in the arena, so the
  // handle needs nothing but the stream.
  cudnn_ = std::make_unique<cuda::CudnnOps>();
  RETURN_IF_ERROR(cudnn_->Init(compute_));
  CUDA_RETURN_IF_ERROR(cudaMalloc(&device_error_, sizeof(int)));
  RETURN_IF_ERROR(Zero(device_error_, sizeof(int)));
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(&device_scalars_, 2 * sizeof(OptimizerStepScalars)));
  for (Staging& s : staging_) {
    CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&anchor_));
  CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, compute_));
  CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
  anchor_ns_ = SteadyNowNs();
  return absl::OkStatus();
}

// cudaMemset runs on the legacy default stream, which the plan's
// non-blocking streams do not wait for: zero on compute_ and wait, so that
// both streams see the zeros (allocation time only).
absl::Status CudaDeviceImpl::Zero(void* p, size_t bytes) {
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::CheckRange(const char* what, int64_t offset,
                                        int64_t bytes) const {
  if (offset < 0 || bytes < 0 || offset + bytes > arena_bytes_) {
    return absl::OutOfRangeError(
        absl::StrCat(name_, ": ", what, " [", offset, ", +", bytes,
                     ") outside the arena of ", arena_bytes_, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::AllocateArena(int64_t bytes) {
  if (arena_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": arena already allocated");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative arena size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  // One allocation for the whole plan: cudaMalloc aligns to 256 bytes, more
  // than the plan's 64-byte offsets need for coalesced and vector access.
  const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 256);
  CUDA_RETURN_IF_ERROR(cudaMalloc(&arena_, size));
  RETURN_IF_ERROR(Zero(arena_, size));
  arena_bytes_ = bytes;
  return absl::OkStatus();
}

absl::StatusOr<char*> CudaDeviceImpl::AllocateScratch(int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": AllocateScratch in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative scratch size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  void* p = nullptr;
  const size_t size = static_cast<size_t>(bytes > 0 ? bytes : 256);
  CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size));
  scratch_.push_back(p);
  RETURN_IF_ERROR(Zero(p, size));
  return static_cast<char*>(p);
}

absl::Status CudaDeviceImpl::StagedCopy(void* device_dst, const void* src,
                                        int64_t bytes) {
  for (int64_t done = 0; done < bytes; done += kStagingChunkBytes) {
    const size_t n =
        static_cast<size_t>(std::min(kStagingChunkBytes, bytes - done));
    Staging& s = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % kStagingSlots;
    // Back-pressure only: blocks when the GPU is kStagingSlots chunks behind.
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.done));
    if (s.capacity < n) {
      if (s.host) CUDA_RETURN_IF_ERROR(cudaFreeHost(s.host));
      s.host = nullptr;
      s.capacity = 0;
      // Grow geometrically (up to a chunk) so the ring settles at once.
      const size_t size =
          std::min(2 * n, static_cast<size_t>(kStagingChunkBytes));
      CUDA_RETURN_IF_ERROR(cudaMallocHost(&s.host, size));
      s.capacity = size;
    }
    std::memcpy(s.host, static_cast<const char*>(src) + done, n);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(device_dst) + done,
                                         s.host, n, cudaMemcpyHostToDevice,
                                         compute_));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(s.done, compute_));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Upload(int64_t offset, const void* src,
                                    int64_t bytes) {
  RETURN_IF_ERROR(CheckRange("upload", offset, bytes));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  if (capturing_) {
    // The graph copies from a device slot of its own; the data of this
    // (captured, not yet run) step goes into the slot at EndCapture.
    InputSlot slot;
    slot.offset = offset;
    slot.bytes = bytes;
    CUDA_RETURN_IF_ERROR(
        cudaMalloc(&slot.device, static_cast<size_t>(bytes > 0 ? bytes : 1)));
    slot.pending.assign(static_cast<const char*>(src),
                        static_cast<const char*>(src) + bytes);
    input_slots_.push_back(std::move(slot));
    const InputSlot& s = input_slots_.back();
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(arena_ + offset, s.device,
                                         static_cast<size_t>(bytes),
                                         cudaMemcpyDeviceToDevice, compute_));
    return absl::OkStatus();
  }
  if (feeding_) {
    if (next_input_slot_ >= input_slots_.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, ": the captured step has ", input_slots_.size(),
          " uploads and all are filled; call Replay"));
    }
    const InputSlot& slot = input_slots_[next_input_slot_];
    if (slot.offset != offset || slot.bytes != bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, ": upload ", next_input_slot_, " of the captured step was [",
          slot.offset, ", +", slot.bytes, "), now [", offset, ", +", bytes,
          ")"));
    }
    ++next_input_slot_;
    return StagedCopy(slot.device, src, bytes);
  }
  return StagedCopy(arena_ + offset, src, bytes);
}

absl::Status CudaDeviceImpl::Download(int64_t offset, void* dst,
                                      int64_t bytes) {
  RETURN_IF_ERROR(CheckRange("download", offset, bytes));
  return CopyToHost(arena_ + offset, dst, bytes);
}

absl::Status CudaDeviceImpl::CopyToHost(const void* src, void* dst,
                                        int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": a read in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                       cudaMemcpyDeviceToHost, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::CopyFromHost(const void* src, void* dst,
                                          int64_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": CopyFromHost in capture");
  }
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  return StagedCopy(dst, src, bytes);
}

absl::Status CudaDeviceImpl::Copy(Stream stream, const void* src, void* dst,
                                  int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("negative copy size");
  if (!sticky_.ok()) return sticky_;
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                       cudaMemcpyDeviceToDevice,
                                       StreamOf(stream)));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::EnsureKernelScratch(int64_t floats) {
  if (floats <= kernel_scratch_floats_) return absl::OkStatus();
  if (kernel_scratch_) {
    // Prepare-time only: the old scratch may still be in use by queued work.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
    CUDA_RETURN_IF_ERROR(cudaFree(kernel_scratch_));
    kernel_scratch_ = nullptr;
    kernel_scratch_floats_ = 0;
  }
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(&kernel_scratch_, static_cast<size_t>(floats) * 4));
  kernel_scratch_floats_ = floats;
  return absl::OkStatus();
}

void CudaDeviceImpl::ReleaseLtMatmuls() {
  for (LtMatmul& m : lt_matmuls_) m.Destroy();
  lt_matmuls_.clear();
}

// Row-major y[B,out] = x[B,in] w[out,in]^T is, in cuBLAS's column-major
// view, Y'[out,B] = W'^T X' with W' = w as [in,out] (ld in) and X' = x as
// [in,B] (ld in): transa = T, transb = N, m = out, n = B, k = in. The bias
// epilogue adds bias[m] down each column, i.e. b[out] to every row of y.
// With bf16 operands (Kernel::gemm_bf16) A and B are bf16, the product
// accumulates in f32, and the f32 bias is added to the f32 result before
// the one rounding to bf16 that follows, as on the CPU.
absl::Status CudaDeviceImpl::BuildLtMatmul(const Kernel& k, bool tf32,
                                           int* index) {
  const int64_t rows = k.rows, in = k.in, out = k.out;
  const bool bias = k.x[2] != nullptr, relu = k.relu_in_gemm;
  LtMatmul m;
  auto fail = [&](absl::Status s) {
    m.Destroy();
    return s;
  };
  auto lt_ok = [&](cublasStatus_t st, const char* what) -> absl::Status {
    if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    return fail(cuda::CublasErrorToStatus(st, what, __FILE__, __LINE__));
  };
  const cudaDataType_t ab = GemmType(k);
  // bf16 products are exact in f32: TF32 changes nothing there.
  const cublasComputeType_t compute =
      tf32 && ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RETURN_IF_ERROR(lt_ok(cublasLtMatmulDescCreate(&m.desc, compute, CUDA_R_32F),
                        "cublasLtMatmulDescCreate"));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RETURN_IF_ERROR(lt_ok(
      cublasLtMatmulDescSetAttribute(m.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                     sizeof(ta)),
      "TRANSA"));
  RETURN_IF_ERROR(lt_ok(
      cublasLtMatmulDescSetAttribute(m.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                     sizeof(tb)),
      "TRANSB"));
  cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  RETURN_IF_ERROR(lt_ok(
      cublasLtMatmulDescSetAttribute(m.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                     &epilogue, sizeof(epilogue)),
      "EPILOGUE"));
  if (bias) {
    // f32 (D's type, the default, said outright for bf16 A and B). The
    // pointer is fixed by Prepare; set now, the heuristic sees its
    // alignment (64 bytes) rather than assuming a null one's.
    const cudaDataType_t bias_type = CUDA_R_32F;
    RETURN_IF_ERROR(lt_ok(
        cublasLtMatmulDescSetAttribute(m.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                       &bias_type, sizeof(bias_type)),
        "BIAS_DATA_TYPE"));
    RETURN_IF_ERROR(lt_ok(
        cublasLtMatmulDescSetAttribute(m.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &k.x[2],
                                       sizeof(k.x[2])),
        "BIAS_POINTER"));
  }
  RETURN_IF_ERROR(lt_ok(cublasLtMatrixLayoutCreate(&m.a, ab, in, out, in), "layout A"));
  RETURN_IF_ERROR(lt_ok(cublasLtMatrixLayoutCreate(&m.b, ab, in, rows, in), "layout B"));
  RETURN_IF_ERROR(lt_ok(
      cublasLtMatrixLayoutCreate(&m.d, CUDA_R_32F, out, rows, out),
      "layout D"));
  cublasLtMatmulPreference_t pref = nullptr;
  RETURN_IF_ERROR(lt_ok(cublasLtMatmulPreferenceCreate(&pref),
                        "cublasLtMatmulPreferenceCreate"));
  size_t ws = kBlasWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  // The heuristic assumes 256-byte aligned operands unless told otherwise;
  // plan offsets are only 64-byte aligned, so say what these pointers are.
  const float* d = relu ? k.y[1] : k.y[0];
  const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*>
      alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, GemmOperand(k, 1)},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, GemmOperand(k, 0)},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d}};
  for (const auto& [attr, ptr] : alignments) {
    if (st != CUBLAS_STATUS_SUCCESS) break;
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    uint32_t align = 256;
    while (align > 4 && address % align != 0) align /= 2;
    st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align,
                                              sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(lt_, m.desc, m.a, m.b, m.d, m.d, pref,
                                        1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    m.algo = result.algo;
    m.usable = true;
  }
  // No algorithm (or an unsupported epilogue) is not an error: RunLinear
  // falls back to cublasGemmEx plus the bias kernel.
  lt_matmuls_.push_back(m);
  *index = static_cast<int>(lt_matmuls_.size()) - 1;
  return absl::OkStatus();
}

// precision = bf16: a linear op whose two GEMM operands are both bf16
// reads them as they are (Kernel::gemm_bf16). An operand staged only for
// the GEMM is then not widened; the bias gradient's column sum still reads
// dy's f32 staging.
void UseBf16Gemm(Kernel& k) {
  if (k.op != Op::kLinear && k.op != Op::kLinearGradInput && k.op != Op::kLinearGradParams) {
    return;
  }
  Bf16Operand* operand[2] = {nullptr, nullptr};
  for (int i = 0; i < k.num_bf16; ++i) {
    Bf16Operand& o = k.bf16[i];
    for (int j = 0; j < 2; ++j) {
      if (!o.output && k.x[j] == o.f32 && operand[j] == nullptr) operand[j] = &o;
    }
  }
  if (operand[0] == nullptr || operand[1] == nullptr) return;
  for (int j = 0; j < 2; ++j) {
    k.gemm_bf16[j] = operand[j]->bf16;
    const bool column_sum = k.op == Op::kLinearGradParams && j == 0 && k.y[1] != nullptr;
    operand[j]->native = !column_sum;
  }
}

absl::Status CudaDeviceImpl::Gemm(cublasOperation_t ta, cublasOperation_t tb,
                                  int64_t m, int64_t n, int64_t k,
                                  const void* a, int64_t lda, const void* b,
                                  int64_t ldb, float beta, float* c,
                                  int64_t ldc, cudaDataType_t ab) {
  const float alpha = 1.0f;
  // bf16 products are exact in f32: TF32 changes nothing there.
  const cublasComputeType_t compute =
      tf32_ && ab == CUDA_R_32F ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
      blas_, ta, tb, static_cast<int>(m), static_cast<int>(n),
      static_cast<int>(k), &alpha, a, ab, static_cast<int>(lda), b,
      ab, static_cast<int>(ldb), &beta, c, CUDA_R_32F,
      static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RunLinear(const Kernel& k) {
  LtMatmul& m = lt_matmuls_[k.lt];
  float* d = k.relu_in_gemm ? k.y[1] : k.y[0];
  // bf16 operands: a bf16 GEMM into the f32 staging of y, the bias added
  // in f32, and the one rounding after both (RunKernel), as on the CPU.
  if (m.usable) {
    // The bias pointer is in the descriptor since BuildLtMatmul.
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st =
        cublasLtMatmul(lt_, m.desc, &alpha, GemmOperand(k, 1), m.a, GemmOperand(k, 0), m.b,
                       &beta, d, m.d, d, m.d, &m.algo, blas_workspace_,
                       kBlasWorkspaceBytes, compute_);
    // An algorithm the heuristic offered but the call rejects (nothing was
    // enqueued) is not fatal: this linear uses cublasGemmEx from now on.
    if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
        st == CUBLAS_STATUS_INVALID_VALUE) {
      m.usable = false;
    } else if (st != CUBLAS_STATUS_SUCCESS) {
      return cuda::CublasErrorToStatus(st, "cublasLtMatmul", __FILE__,
                                       __LINE__);
    }
  }
  if (!m.usable) {
    RETURN_IF_ERROR(Gemm(CUBLAS_OP_T, CUBLAS_OP_N, k.out, k.rows, k.in, GemmOperand(k, 1),
                         k.in, GemmOperand(k, 0), k.in, 0.0f, k.y[0], k.out, GemmType(k)));
    if (k.x[2] != nullptr) {
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchBiasAdd(k.y[0], k.x[2], k.rows, k.out, compute_));
    }
    if (k.relu_in_gemm) {
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kRelu, k.y[0], nullptr, k.y[1], k.rows * k.out,
                                false, compute_));
    }
  }
  const int64_t n = k.rows * k.out;
  switch (k.act) {
    case Activation::kNone:
      break;
    case Activation::kRelu:
      if (!k.relu_in_gemm) {
        CUDA_RETURN_IF_ERROR(
            cuda::LaunchPointwise(KernelOp::kRelu, k.y[0], nullptr, k.y[1], n, false, compute_));
      }
      break;
    case Activation::kGelu:
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kGelu, k.y[0], nullptr, k.y[1], n, false, compute_));
      break;
    case Activation::kTanh:
      CUDA_RETURN_IF_ERROR(
          cuda::LaunchPointwise(KernelOp::kTanh, k.y[0], nullptr, k.y[1], n, false, compute_));
      break;
  }
  return absl::OkStatus();
}

// The (b, h) products of attention, B x H of them, as min(B, H)
// strided-batched calls: with B <= H one call per batch element batched
// over its heads, else one per head batched over the batch. Either way
// every operand of (b, h) lies at base + b * batch + h * head elements,
// affine in the batched index, so no pointer arrays are needed (and the
// calls are capturable). Heads of one call interleave in qkv and y (head
// stride hs with leading dimension 3C or C) but never overlap.
absl::Status CudaDeviceImpl::HeadGemms(const Kernel& k, cublasOperation_t ta,
                                       cublasOperation_t tb, int64_t m,
                                       int64_t n, int64_t depth,
                                       const float* a, int64_t lda,
                                       HeadStrides sa, const float* b,
                                       int64_t ldb, HeadStrides sb, float beta,
                                       float* c, int64_t ldc, HeadStrides sc) {
  const bool per_batch = k.rows <= k.heads;
  const int64_t calls = per_batch ? k.rows : k.heads;
  const int count = static_cast<int>(per_batch ? k.heads : k.rows);
  auto call_step = [&](HeadStrides s) { return per_batch ? s.batch : s.head; };
  auto batch_stride = [&](HeadStrides s) {
    return static_cast<long long>(per_batch ? s.head : s.batch);
  };
  const float alpha = 1.0f;
  const cublasComputeType_t compute =
      tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  for (int64_t i = 0; i < calls; ++i) {
    CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
        blas_, ta, tb, static_cast<int>(m), static_cast<int>(n),
        static_cast<int>(depth), &alpha, a + i * call_step(sa), CUDA_R_32F,
        static_cast<int>(lda), batch_stride(sa), b + i * call_step(sb),
        CUDA_R_32F, static_cast<int>(ldb), batch_stride(sb), &beta,
        c + i * call_step(sc), CUDA_R_32F, static_cast<int>(ldc),
        batch_stride(sc), count, compute, CUBLAS_GEMM_DEFAULT));
  }
  return absl::OkStatus();
}

// 1 / sqrt(hs), formed in double and rounded once (as the CPU does).
float AttentionScale(int64_t head_size) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
}

// Causal self-attention (cpu/kernels.h) with B = rows, T = in, C = out,
// H = heads, hs = C / H. Per (b, h), row-major Q, K, V [T, hs] are columns
// of qkv[b] (ld 3C), i.e. column-major Q', K', V' [hs, T]; a row-major
// [T, T] matrix M is the column-major M' = M^T (ld T). Hence
//   S = Q K^T  is  S' = K'^T Q'     P = causal_softmax(S / sqrt(hs))
//   Y = P V    is  Y' = V' P'       (Y' [hs, T] inside y[b], ld C)
absl::Status CudaDeviceImpl::RunAttention(const Kernel& k) {
  const int64_t B = k.rows, T = k.in, C = k.out, H = k.heads, hs = C / H;
  const HeadStrides qkv{T * 3 * C, hs}, yv{T * C, hs}, att{H * T * T, T * T};
  const float* q = k.x[0];
  const float* key = q + C;
  const float* v = q + 2 * C;
  float* y = k.y[0];
  float* probs = k.y[1];
  RETURN_IF_ERROR(HeadGemms(k, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, key, 3 * C,
                            qkv, q, 3 * C, qkv, 0.0f, probs, T, att));
  const float scale = AttentionScale(hs);
  CUDA_RETURN_IF_ERROR(
      cuda::LaunchCausalSoftmax(probs, B * H * T, T, scale, compute_));
  return HeadGemms(k, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, v, 3 * C, qkv, probs,
                   T, att, 0.0f, y, C, yv);
}

// The gradient, in the layout of RunAttention, with dS in the scratch:
//   dP = dY V^T   is  dP' = V'^T dY'
//   dV = P^T dY   is  dV' = dY' P'^T
//   dS = P * (dP - rowsum(dP * P)) / sqrt(hs)   (in place over dP)
//   dQ = dS K     is  dQ' = K' dS'
//   dK = dS^T Q   is  dK' = Q' dS'^T
// dq, dk, dv are the three column blocks of dqkv: beta = 1 accumulates.
absl::Status CudaDeviceImpl::RunAttentionGrad(const Kernel& k) {
  const int64_t B = k.rows, T = k.in, C = k.out, H = k.heads, hs = C / H;
  const HeadStrides qkv{T * 3 * C, hs}, yv{T * C, hs}, att{H * T * T, T * T};
  const float* dy = k.x[0];
  const float* q = k.x[1];
  const float* key = q + C;
  const float* v = q + 2 * C;
  const float* probs = k.x[2];
  float* dq = k.y[0];
  float* dk = dq + C;
  float* dv = dq + 2 * C;
  float* ds = k.y[1];
  const float beta = k.accumulate ? 1.0f : 0.0f;
  RETURN_IF_ERROR(HeadGemms(k, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, v, 3 * C,
                            qkv, dy, C, yv, 0.0f, ds, T, att));
  RETURN_IF_ERROR(HeadGemms(k, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, dy, C, yv,
                            probs, T, att, beta, dv, 3 * C, qkv));
  const float scale = AttentionScale(hs);
  CUDA_RETURN_IF_ERROR(
      cuda::LaunchCausalSoftmaxGrad(probs, ds, B * H * T, T, scale, compute_));
  RETURN_IF_ERROR(HeadGemms(k, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, key, 3 * C,
                            qkv, ds, T, att, beta, dq, 3 * C, qkv));
  return HeadGemms(k, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, q, 3 * C, qkv, ds, T,
                   att, beta, dk, 3 * C, qkv);
}

absl::Status CudaDeviceImpl::Prepare(const Plan& plan) {
  if (arena_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": Prepare before AllocateArena");
  }
  if (capturing_ || graph_exec_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": Prepare while a capture is held");
  }
  if (plan.arena_bytes > arena_bytes_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": plan needs an arena of ", plan.arena_bytes,
                     " bytes, have ", arena_bytes_));
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  ASSIGN_OR_RETURN(std::vector<KernelArgs> resolved,
                   ResolveKernels(plan, arena_, arena_bytes_, name_));
  // Old matmul descriptors may still be referenced by queued work.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  // precision = bf16: f32 staging for the bf16 operands (kernel_args.h),
  // grown here only, so no step allocates.
  const int64_t staging = Bf16StagingBytes(resolved);
  if (staging > bf16_staging_bytes_) {
    prepared_plan_ = nullptr;  // its kernels may point at the old staging
    if (bf16_staging_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(bf16_staging_));
    bf16_staging_ = nullptr;
    bf16_staging_bytes_ = 0;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&bf16_staging_, static_cast<size_t>(staging)));
    bf16_staging_bytes_ = staging;
  }
  AssignBf16Staging(resolved, bf16_staging_);
  // A plan cuDNN refuses (too little workspace: compiled for another
  // device) leaves the previous preparation as it was.
  RETURN_IF_ERROR(cudnn_->Prepare(plan, resolved, name_));
  // From here a failure leaves no plan prepared (the old one's matmul
  // descriptors are gone).
  prepared_plan_ = nullptr;
  ReleaseLtMatmuls();
  tf32_ = plan.tf32;
  std::vector<Kernel> kernels(resolved.begin(), resolved.end());
  int64_t scratch_floats = 1;
  for (size_t i = 0; i < kernels.size(); ++i) {
    Kernel& k = kernels[i];
    const Instruction& instr = plan.instructions[i];
    switch (k.op) {
      case Op::kLinear:
      case Op::kLinearGradInput:
      case Op::kLinearGradParams:
        if (k.rows > INT32_MAX || k.in > INT32_MAX || k.out > INT32_MAX) {
          return absl::InvalidArgumentError(absl::StrCat(
              name_, ": instruction ", i, " (", instr.op, " \"", instr.label,
              "\"): matrix dimension beyond cuBLAS's int range"));
        }
        if (k.op == Op::kLinearGradParams) {
          scratch_floats = std::max(
              scratch_floats, cuda::ColumnSumScratchFloats(k.rows, k.out));
        }
        break;
      case Op::kLayerNormGradParams:
        scratch_floats = std::max(
            scratch_floats, 2 * cuda::ColumnSumScratchFloats(k.rows, k.in));
        break;
      case Op::kCrossEntropy:
      case Op::kMse:
        scratch_floats = std::max(scratch_floats, k.rows);
        break;
      case Op::kEmbeddingGrad: {
        // cub's radix sort counts items (and the sort keys hold ids) in int.
        if (k.rows > INT32_MAX || k.in > INT32_MAX - 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              name_, ": instruction ", i, " (", instr.op, " \"", instr.label,
              "\"): more ids or a larger vocabulary than int32 holds"));
        }
        size_t bytes = 0;
        CUDA_RETURN_IF_ERROR(
            cuda::EmbeddingGradScratchBytes(k.rows, k.in, &bytes));
        scratch_floats = std::max(
            scratch_floats, static_cast<int64_t>((bytes + 3) / 4));
        break;
      }
      case Op::kAttention:
      case Op::kAttentionGrad:
        if (k.heads <= 0 || k.out % k.heads != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              name_, ": instruction ", i, " (", instr.op, " \"", instr.label,
              "\"): width ", k.out, " is not a multiple of heads ", k.heads));
        }
        if (k.in > INT32_MAX || 3 * k.out > INT32_MAX ||
            std::max(k.rows, k.heads) > INT32_MAX) {
          return absl::InvalidArgumentError(absl::StrCat(
              name_, ": instruction ", i, " (", instr.op, " \"", instr.label,
              "\"): matrix dimension beyond cuBLAS's int range"));
        }
        break;
      default:
        break;
    }
    // ReLU fused into a linear (kernel_args.h): if no other instruction ever
    // reads y, cublasLt's RELU_BIAS epilogue writes h directly and y is
    // never materialised; otherwise the activation kernel follows the GEMM
    // in the same RunKernel call.
    if (k.op == Op::kLinear && k.act == Activation::kRelu) {
      const int y = instr.outputs[0];
      const int h = plan.instructions[i + 1].id;
      bool y_read_elsewhere = false;
      for (const Instruction& other : plan.instructions) {
        if (other.id == h) continue;
        for (int id : other.inputs) {
          if (id == y) y_read_elsewhere = true;
        }
      }
      k.relu_in_gemm = !y_read_elsewhere;
    }
  }
  for (Kernel& k : kernels) UseBf16Gemm(k);
  for (Kernel& k : kernels) {
    if (k.op != Op::kLinear) continue;
    RETURN_IF_ERROR(BuildLtMatmul(k, plan.tf32, &k.lt));
  }
  RETURN_IF_ERROR(EnsureKernelScratch(scratch_floats));
  kernels_ = std::move(kernels);
  prepared_plan_ = &plan;
  scalars_valid_ = false;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::UploadStepScalars(const Plan& plan,
                                               const StepState& state) {
  if (scalars_valid_ && scalars_state_.step == state.step &&
      scalars_state_.lr == state.lr) {
    return absl::OkStatus();
  }
  // In double, rounded once: torch computes these in Python floats, and
  // the CPU reference (cpu/kernels.cc) the same way.
  const OptimizerConfig& o = plan.optimizer;
  const double t = static_cast<double>(state.step);
  OptimizerStepScalars s;
  s.lr = static_cast<float>(state.lr);
  s.adamw_decay = static_cast<float>(1.0 - state.lr * o.weight_decay);
  s.adamw_neg_step_size =
      static_cast<float>(-(state.lr / (1.0 - std::pow(o.beta1, t))));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, t)));
  s.first_step = state.step <= 1 ? 1 : 0;
  s.step = state.step;
  OptimizerStepScalars both[2] = {s, s};
  both[1].adamw_decay = 1.0f;  // 1 - lr * 0
  RETURN_IF_ERROR(StagedCopy(device_scalars_, both, sizeof(both)));
  scalars_valid_ = true;
  scalars_state_ = state;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RunKernel(const Plan& plan,
                                       const Instruction& instr,
                                       const StepState& step) {
  if (&plan != prepared_plan_ || instr.id < 0 ||
      instr.id >= static_cast<int>(kernels_.size())) {
    return absl::FailedPreconditionError(
        name_ + ": RunKernel for a plan that was not Prepare()d");
  }
  if (!sticky_.ok()) return sticky_;
  // precision = bf16: the kernel computes in f32 on staging, widened from
  // the bf16 tensors before and rounded to nearest even into them after,
  // all on the compute stream (and so inside a captured step).
  const Kernel& k = kernels_[instr.id];
  auto check = [&](cudaError_t err) {
    return err == cudaSuccess
               ? absl::OkStatus()
               : Fail(cuda::CudaErrorToStatus(err, instr.op.c_str(), __FILE__, __LINE__));
  };
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.native || (o.output && !k.accumulate)) continue;
    RETURN_IF_ERROR(check(cuda::LaunchFromBf16(o.bf16, o.f32, o.elems, compute_)));
  }
  RETURN_IF_ERROR(RunF32Kernel(plan, instr, step));
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output) RETURN_IF_ERROR(check(cuda::LaunchToBf16(o.f32, o.bf16, o.elems, compute_)));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RunF32Kernel(const Plan& plan, const Instruction& instr,
                                          const StepState& step) {
  const Kernel& k = kernels_[instr.id];
  cudaStream_t s = compute_;
  cudaError_t err = cudaSuccess;
  switch (k.op) {
    case Op::kNotCompute:
      return absl::InvalidArgumentError(name_ + ": " + instr.op +
                                        " is not a compute kernel");
    case Op::kFused:
      break;
    case Op::kLinear: {
      absl::Status status = RunLinear(k);
      if (!status.ok()) return Fail(status);
      break;
    }
    case Op::kLinearGradInput: {
      // dx[B,in] = dy[B,out] w[out,in]: DX'[in,B] = W'[in,out] DY'[out,B].
      absl::Status status =
          Gemm(CUBLAS_OP_N, CUBLAS_OP_N, k.in, k.rows, k.out, GemmOperand(k, 1), k.in,
               GemmOperand(k, 0), k.out, k.accumulate ? 1.0f : 0.0f, k.y[0], k.in,
               GemmType(k));
      if (!status.ok()) return Fail(status);
      break;
    }
    case Op::kLinearGradParams: {
      // dw[out,in] = dy^T x: DW'[in,out] = X'[in,B] DY'[out,B]^T.
      absl::Status status =
          Gemm(CUBLAS_OP_N, CUBLAS_OP_T, k.in, k.out, k.rows, GemmOperand(k, 1), k.in,
               GemmOperand(k, 0), k.out, k.accumulate ? 1.0f : 0.0f, k.y[0], k.in,
               GemmType(k));
      if (!status.ok()) return Fail(status);
      if (k.y[1] != nullptr) {
        err = cuda::LaunchColumnSum(k.x[0], k.rows, k.out, k.y[1],
                                    k.accumulate, kernel_scratch_, s);
      }
      break;
    }
#define TRAINC_CUDA_POINTWISE_CASE(name, Name, arity) case Op::k##Name:
    TRAINC_POINTWISE_OPS(TRAINC_CUDA_POINTWISE_CASE)
#undef TRAINC_CUDA_POINTWISE_CASE
      err = cuda::LaunchPointwise(k.op, k.x[0], k.x[1], k.y[0], k.rows, k.accumulate, s);
      break;
    case Op::kDropout:
    case Op::kDropoutGrad: {
      // The step comes from device memory (uploaded here when eager, by
      // Replay in a captured graph); the rest is fixed for this rank.
      if (!capturing_) {
        absl::Status status = UploadStepScalars(plan, step);
        if (!status.ok()) return Fail(status);
      }
      const int64_t position =
          (static_cast<int64_t>(step.rank) * plan.accumulate + k.dropout.micro) *
          plan.micro_batch;
      err = cuda::LaunchDropout(k.x[0], k.y[0], k.rows, k.in,
                                step.training ? k.dropout.p : 0.0f,
                                static_cast<uint64_t>(plan.seed), k.dropout.key,
                                device_scalars_, plan.global_batch, position,
                                k.accumulate, s);
      break;
    }
    case Op::kLayerNorm:
      err = cuda::LaunchLayerNorm(k.x[0], k.x[1], k.x[2], k.y[0], k.y[1],
                                  k.y[2], k.rows, k.in, k.eps, s);
      break;
    case Op::kLayerNormGradInput:
      err = cuda::LaunchLayerNormGradInput(k.x[0], k.x[1], k.x[2], k.x[3],
                                           k.x[4], k.y[0], k.rows, k.in,
                                           k.accumulate, s);
      break;
    case Op::kLayerNormGradParams:
      err = cuda::LaunchLayerNormGradParams(k.x[0], k.x[1], k.x[2], k.x[3],
                                            k.y[0], k.y[1], k.rows, k.in,
                                            k.accumulate, kernel_scratch_, s);
      break;
    case Op::kCrossEntropy:
      err = cuda::LaunchCrossEntropy(k.x[0], k.labels, k.rows, k.in, k.y[0],
                                     k.y[1], kernel_scratch_, device_error_,
                                     s);
      break;
    case Op::kCrossEntropyGrad:
      err = cuda::LaunchCrossEntropyGrad(k.x[0], k.labels, k.rows, k.in,
                                         k.loss_scale, k.y[0], k.accumulate,
                                         device_error_, s);
      break;
    case Op::kMse:
      err = cuda::LaunchMse(k.x[0], k.x[1], k.rows, k.in, k.y[0],
                            kernel_scratch_, s);
      break;
    case Op::kMseGrad:
      err = cuda::LaunchMseGrad(k.x[0], k.x[1], k.rows, k.in, k.loss_scale,
                                k.y[0], k.accumulate, s);
      break;
    case Op::kSoftmax:
      err = cuda::LaunchSoftmax(k.x[0], k.y[0], k.rows, k.in, s);
      break;
    case Op::kSoftmaxGrad:
      err = cuda::LaunchSoftmaxGrad(k.x[0], k.x[1], k.y[0], k.rows, k.in,
                                    k.accumulate, s);
      break;
    case Op::kEmbedding:
      err = cuda::LaunchEmbedding(k.ids, k.x[1], k.y[0], k.rows, k.in,
                                  k.out, device_error_, s);
      break;
    case Op::kEmbeddingGrad:
      err = cuda::LaunchEmbeddingGrad(
          k.x[0], k.ids, k.y[0], k.rows, k.in, k.out, k.accumulate,
          kernel_scratch_, static_cast<size_t>(kernel_scratch_floats_) * 4, s);
      break;
    case Op::kPositionEmbedding:
      err = cuda::LaunchPositionEmbedding(k.x[0], k.y[0], k.rows, k.in, k.out,
                                          s);
      break;
    case Op::kPositionEmbeddingGrad:
      err = cuda::LaunchPositionEmbeddingGrad(k.x[0], k.y[0], k.rows, k.in,
                                              k.out, k.accumulate, s);
      break;
    case Op::kAttention:
    case Op::kAttentionGrad: {
      absl::Status status =
          k.op == Op::kAttention ? RunAttention(k) : RunAttentionGrad(k);
      if (!status.ok()) return Fail(status);
      break;
    }
    case Op::kAdamW:
    case Op::kSgd: {
      // In a capture the scalars are uploaded by ReplayCapture instead, so
      // every replay sees its own step's learning rate.
      if (!capturing_) {
        absl::Status status = UploadStepScalars(plan, step);
        if (!status.ok()) return Fail(status);
      }
      const OptimizerConfig& o = plan.optimizer;
      const ShardRange sh = ShardOf(k, step.rank);
      if (k.op == Op::kAdamW) {
        err = cuda::LaunchAdamW(k.y[0] + sh.begin, k.x[0] + sh.begin, k.optimizer.state[0],
                                k.optimizer.state[1], sh.count,
                                device_scalars_ + (k.optimizer.weight_decay ? 0 : 1),
                                o.beta1, o.beta2, o.eps, k.optimizer.grad_sq,
                                k.optimizer.clip_norm,
                                s);
      } else {
        err = cuda::LaunchSgd(k.y[0] + sh.begin, k.x[0] + sh.begin, k.optimizer.state[0],
                              sh.count,
                              device_scalars_, static_cast<float>(o.momentum),
                              k.optimizer.weight_decay ? static_cast<float>(o.weight_decay) : 0.0f,
                              o.nesterov, k.optimizer.grad_sq, k.optimizer.clip_norm, s);
      }
      break;
    }
    case Op::kSumSquares: {
      const ShardRange sh = ShardOf(k, step.rank);
      err = cuda::LaunchSumSquares(k.x[0] + sh.begin, sh.count, k.y[0],
                                   k.accumulate, s);
      break;
    }
    case Op::kConv2d:
    case Op::kConv2dGradInput:
    case Op::kConv2dGradParams:
    case Op::kMaxPool2d:
    case Op::kMaxPool2dGrad:
    case Op::kAvgPool2d:
    case Op::kAvgPool2dGrad: {
      absl::Status status = cudnn_->Run(instr.id);
      if (!status.ok()) return Fail(status);
      break;
    }
    case Op::kReshape:
      if (k.y[0] != k.x[0]) {
        err = cudaMemcpyAsync(k.y[0], k.x[0], static_cast<size_t>(k.rows) * 4,
                              cudaMemcpyDeviceToDevice, s);
      }
      break;
    case Op::kCastToBf16:
      err = cuda::LaunchToBf16(k.x[0], k.y[0], k.rows, s);
      break;
    case Op::kCastToF32:
      err = cuda::LaunchFromBf16(k.x[0], k.y[0], k.rows, s);
      break;
  }
  if (err != cudaSuccess) {
    return Fail(cuda::CudaErrorToStatus(err, instr.op.c_str(), __FILE__,
                                        __LINE__));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::OrderedSum(Stream stream, const float* src,
                                        int64_t n, int64_t count, float* dst) {
  const cudaError_t err =
      cuda::LaunchOrderedSum(src, n, count, dst, StreamOf(stream));
  if (err != cudaSuccess) {
    return Fail(cuda::CudaErrorToStatus(err, "OrderedSum", __FILE__, __LINE__));
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Submit(Stream /*stream*/,
                                    std::function<absl::Status()> work) {
  if (!sticky_.ok()) return sticky_;
  // The work enqueues on NativeStream(stream) itself (e.g. an NCCL call):
  // running it now, in program order, is what orders it on that stream.
  absl::Status status = work();
  if (!status.ok()) return Fail(status);
  return absl::OkStatus();
}

absl::StatusOr<cudaEvent_t> CudaDeviceImpl::TimingEvent() {
  if (!timing_pool_.empty()) {
    cudaEvent_t e = timing_pool_.back();
    timing_pool_.pop_back();
    return e;
  }
  cudaEvent_t e;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));  // with timing
  return e;
}

absl::Status CudaDeviceImpl::SubmitTimed(Stream stream,
                                         std::function<absl::Status()> work,
                                         TimedCallback on_timed) {
  // A graph is replayed as one unit: no per-instruction times inside it.
  if (capturing_) return Submit(stream, std::move(work));
  ASSIGN_OR_RETURN(cudaEvent_t begin, TimingEvent());
  ASSIGN_OR_RETURN(cudaEvent_t end, TimingEvent());
  absl::Status status =
      CudaOk(cudaEventRecord(begin, StreamOf(stream)), "cudaEventRecord");
  if (status.ok()) status = Submit(stream, std::move(work));
  if (status.ok()) {
    status = CudaOk(cudaEventRecord(end, StreamOf(stream)), "cudaEventRecord");
  }
  if (!status.ok()) {
    // Not timed: the events go back unrecorded (ResolveTimings would read
    // an unrecorded `end`).
    timing_pool_.push_back(begin);
    timing_pool_.push_back(end);
    return status;
  }
  timed_.push_back({begin, end, std::move(on_timed)});
  return absl::OkStatus();
}

// Device times are offsets from anchor_, an event the host saw complete at
// anchor_ns_ (steady clock); the anchor is renewed at every Synchronize so
// clock drift never accumulates beyond one step.
absl::Status CudaDeviceImpl::ResolveTimings(bool report) {
  std::vector<TimedWork> timed;
  timed.swap(timed_);
  absl::Status status;
  for (TimedWork& t : timed) {
    float begin_ms = 0, end_ms = 0;
    if (report && status.ok()) {
      status = CudaOk(cudaEventElapsedTime(&begin_ms, anchor_, t.begin),
                      "cudaEventElapsedTime");
      if (status.ok()) {
        status = CudaOk(cudaEventElapsedTime(&end_ms, anchor_, t.end),
                        "cudaEventElapsedTime");
      }
      if (status.ok()) {
        t.on_timed(anchor_ns_ + static_cast<int64_t>(begin_ms * 1e6),
                   anchor_ns_ + static_cast<int64_t>(end_ms * 1e6));
      }
    }
    timing_pool_.push_back(t.begin);
    timing_pool_.push_back(t.end);
  }
  RETURN_IF_ERROR(status);
  if (report && !timed.empty()) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(anchor_, compute_));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(anchor_));
    anchor_ns_ = SteadyNowNs();
  }
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::RecordEvent(Stream stream, int event) {
  if (event < 0 || event >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": event ", event, " out of range (ResetEvents(",
        events_.size(), "))"));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(events_[event], StreamOf(stream)));
  recorded_[event] = 1;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::WaitEvent(Stream stream, int event) {
  if (event < 0 || event >= static_cast<int>(events_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": event ", event, " out of range (ResetEvents(",
        events_.size(), "))"));
  }
  // CUDA treats a wait on a never-recorded event as satisfied, and on a
  // re-recorded one as a wait for its latest record. The plan's "a wait is
  // satisfied only by this step's record" therefore needs the record to be
  // issued first; say so instead of silently racing.
  if (!recorded_[event]) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": WaitEvent(", event,
        ") before its RecordEvent in this step (the host must issue a record "
        "before any wait on it)"));
  }
  CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(StreamOf(stream), events_[event], 0));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::ResetEvents(int num_events) {
  if (num_events < 0) return absl::InvalidArgumentError("negative events");
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  while (static_cast<int>(events_.size()) < num_events) {
    cudaEvent_t e;
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  recorded_.assign(events_.size(), 0);
  return sticky_;
}

absl::Status CudaDeviceImpl::Synchronize() {
  if (capturing_) {
    return absl::FailedPreconditionError(name_ + ": Synchronize in capture");
  }
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(comm_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  int error_bits = 0;
  CUDA_RETURN_IF_ERROR(cudaMemcpy(&error_bits, device_error_, sizeof(int),
                                  cudaMemcpyDeviceToHost));
  if (error_bits != 0) {
    // Ordered before the next step's kernels, which run on compute_ too.
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(device_error_, 0, sizeof(int), compute_));
    if (error_bits & cuda::kErrorLabelOutOfRange) {
      (void)Fail(absl::InvalidArgumentError(
          name_ + ": cross_entropy: a label is outside [0, classes)"));
    }
    if (error_bits & cuda::kErrorTokenOutOfRange) {
      (void)Fail(absl::InvalidArgumentError(
          name_ + ": embedding: a token id is outside [0, vocab)"));
    }
  }
  // After a failed step its times are meaningless (and some work may never
  // have been enqueued): the error is what the caller needs.
  RETURN_IF_ERROR(ResolveTimings(/*report=*/sticky_.ok()));
  return sticky_;
}

absl::Status CudaDeviceImpl::BeginCapture() {
  if (prepared_plan_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": BeginCapture before Prepare");
  }
  if (capturing_ || graph_exec_ != nullptr) {
    return absl::FailedPreconditionError(name_ + ": a capture is already held");
  }
  RETURN_IF_ERROR(Synchronize());
  // Relaxed: Upload allocates its input slots while capturing.
  CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(compute_, cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  // The comm stream joins the capture at once. A step may open with
  // collectives (zero_gather = next_forward's all-gathers) before any
  // compute event it would otherwise join through: they would run now,
  // outside the graph, and the compute stream's wait on them would cross
  // the capture's boundary.
  CUDA_RETURN_IF_ERROR(cudaEventRecord(fork_event_, compute_));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_, fork_event_, 0));
  input_slots_.clear();
  next_input_slot_ = 0;
  feeding_ = false;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::EndCapture() {
  if (!capturing_) {
    return absl::FailedPreconditionError(name_ + ": EndCapture without Begin");
  }
  // The comm stream joined the capture at BeginCapture; it must join back
  // into the origin stream before the capture can end. (An error
  // before the end leaves the capture open for DropCapture to abandon.)
  cudaStreamCaptureStatus comm_status = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(comm_, &comm_status));
  if (comm_status == cudaStreamCaptureStatusActive) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(join_event_, comm_));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, join_event_, 0));
  }
  const cudaError_t ended = cudaStreamEndCapture(compute_, &graph_);
  capturing_ = false;
  CUDA_RETURN_IF_ERROR(ended);
  CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&graph_exec_, graph_, 0));
  CUDA_RETURN_IF_ERROR(cudaGraphUpload(graph_exec_, compute_));
  // The captured step has not run: its inputs go into the slots now, and
  // its first Replay consumes them.
  for (InputSlot& slot : input_slots_) {
    RETURN_IF_ERROR(StagedCopy(slot.device, slot.pending.data(), slot.bytes));
    slot.pending.clear();
    slot.pending.shrink_to_fit();
  }
  next_input_slot_ = input_slots_.size();
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::BeginReplayInputs() {
  if (graph_exec_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": no captured step");
  }
  feeding_ = true;
  next_input_slot_ = 0;
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::Replay(const StepState& state) {
  const size_t fed = next_input_slot_;
  // Whatever happens, the input window closes: later uploads (evaluation)
  // go to the arena.
  feeding_ = false;
  next_input_slot_ = 0;
  if (graph_exec_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": no captured step");
  }
  if (fed != input_slots_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the captured step needs ", input_slots_.size(),
        " uploads (after BeginReplayInputs) before each replay, got ", fed));
  }
  if (!sticky_.ok()) return sticky_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  // The scalars are read by the graph's optimizer kernels: stream order puts
  // this copy before them.
  RETURN_IF_ERROR(UploadStepScalars(*prepared_plan_, state));
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph_exec_, compute_));
  return absl::OkStatus();
}

absl::Status CudaDeviceImpl::DropCapture() {
  if (capturing_) {
    // Abandon, best effort: join the comm stream back (a capture cannot end
    // with it still forked), end, and throw the partial graph away.
    cudaStreamCaptureStatus comm_status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(comm_, &comm_status) == cudaSuccess &&
        comm_status == cudaStreamCaptureStatusActive) {
      cudaEventRecord(join_event_, comm_);
      cudaStreamWaitEvent(compute_, join_event_, 0);
    }
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(compute_, &partial);
    if (partial) cudaGraphDestroy(partial);
    capturing_ = false;
    // Nothing of the capture ran (BeginCapture started from a clean,
    // synchronised device), so its errors say only that the step could not
    // be captured: the caller may still run it eagerly.
    sticky_ = absl::OkStatus();
  }
  cudaGetLastError();  // a failed capture or instantiation leaves its error
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  if (graph_exec_) CUDA_RETURN_IF_ERROR(cudaGraphExecDestroy(graph_exec_));
  if (graph_) CUDA_RETURN_IF_ERROR(cudaGraphDestroy(graph_));
  graph_exec_ = nullptr;
  graph_ = nullptr;
  for (InputSlot& slot : input_slots_) CUDA_RETURN_IF_ERROR(cudaFree(slot.device));
  input_slots_.clear();
  next_input_slot_ = 0;
  feeding_ = false;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CudaWorkspaceBytes(const Plan& plan, const Instruction& instr) {
  return cuda::CudnnWorkspaceBytes(plan, instr);
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver / no GPU: not an error for a caller choosing a backend.
    // Clear the sticky runtime error so later calls start clean.
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int local_rank) {
  const int count = CudaDeviceCount();
  if (count == 0) {
    return absl::UnavailableError(
        "cuda: no CUDA GPU visible (no driver, no device, or "
        "CUDA_VISIBLE_DEVICES is empty)");
  }
  if (local_rank < 0 || local_rank >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda: local rank ", local_rank, " but only ", count, " GPU(s)"));
  }
  auto device = std::make_unique<CudaDeviceImpl>(local_rank);
  RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace trainc
