// CudaDeviceImpl, the CUDA backend behind cuda_device.h, and what its
// files share. Internal to runtime/cuda (the plugin and the backend's
// tests): programs include cuda_device.h, never this.
//
// One class, one file per job: cuda_device.cc (set-up, Prepare, RunKernel,
// the factory), cuda_kernels.cc (the kernel table: each op's launch),
// cuda_memory.cc (arena, scratch, staged copies),
// cuda_streams.cc (streams, events, Synchronize), cuda_timing.cc
// (SubmitTimed), cuda_graph.cc (step capture and replay),
// cuda_replay_inputs.cc (a replay's double-buffered inputs). The families
// prepared per plan run programs of their own classes, which the device
// owns and the kernel table dispatches to: CublasLinear (cublas_linear.h:
// linear on cuBLAS and cublasLt) and CudnnOps (cudnn_ops.h: convolution
// and pooling on cuDNN); Kernel is prepared.h's.
#ifndef TRAINC_RUNTIME_CUDA_CUDA_DEVICE_IMPL_H_
#define TRAINC_RUNTIME_CUDA_CUDA_DEVICE_IMPL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

// cuda_runtime.h (not _api.h) for the typed cudaMalloc<T> overloads.
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/cuda/cublas_linear.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cudnn_ops.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/prepared.h"
#include "runtime/device/kernel_args.h"

namespace trainc {
namespace cuda_internal {

using cuda::OptimizerStepScalars;

// Pinned staging buffers for Upload: a ring, so that up to this many
// chunks can be in flight before the host waits for the oldest. Uploads are
// cut into chunks of at most kStagingChunkBytes, which bounds the pinned
// memory (a checkpoint load does not pin copies of the whole model).
constexpr int kStagingSlots = 8;
constexpr int64_t kStagingChunkBytes = 8 << 20;

// The host's steady clock in ns, the time base of SubmitTimed's reports
// (cuda_timing.cc).
int64_t SteadyNowNs();

// The rules below run before the staging is assigned (kernel_args.h): an
// operand they mark native gets none, and its x / y slot keeps the bf16
// tensor's address.
//
// precision = bf16: cross_entropy_fused with bf16 logits and dlogits
// reads and writes them itself. (cuda_kernels.cc)
void UseBf16Classifier(Kernel& k);

// precision = bf16: add_layernorm whose b alone is bf16 reads it as
// such. (cuda_kernels.cc)
void UseBf16AddLayerNorm(Kernel& k);

// precision = bf16: reshape copies a bf16 tensor as it is.
// (cuda_kernels.cc)
void UseBf16Reshape(Kernel& k);

// precision = bf16: dropout and its gradient read and write bf16 x and y.
// (cuda_kernels.cc)
void UseBf16Dropout(Kernel& k);

// precision = bf16: swiglu and swiglu_grad whose operands are all bf16
// read and write them themselves. (cuda_kernels.cc)
void UseBf16SwiGlu(Kernel& k);

// Every bf16 rule: those above, below (pointwise, attention) and the
// linear family's (cublas_linear.h's UseBf16Gemm). (cuda_kernels.cc)
void UseBf16(Kernel& k);

// Every resolved instruction as a Kernel with the rules applied, and in
// *staging the f32 staging its other bf16 operands then need (the largest
// instruction's): what Prepare allocates and CudaBf16StagingBytes reports.
// (cuda_kernels.cc)
std::vector<Kernel> WithNativeBf16(const std::vector<KernelArgs>& resolved, int64_t* staging);

// precision = bf16: a pointwise op reads and writes its bf16 operands
// itself, all or some of them (widened on load, rounded to nearest even on
// store, as the staging would: the same bits) in one pass instead of three.
// (cuda_kernels.cc)
void UseBf16Pointwise(Kernel& k);

// precision = bf16: attention and its gradient read and write their bf16
// tensors directly (widened on load, f32 arithmetic, rounded on store: the
// staged path's bits), lse and delta staying f32. (cuda_kernels.cc)
void UseBf16Attention(Kernel& k);

// Fails for the first instruction whose op the kernel table
// (cuda_kernels.cc) lacks.
absl::Status CheckKernelTable(const Plan& plan, const std::vector<Kernel>& kernels,
                              const std::string& device_name);

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
  absl::Status EndReplayInputs() override;
  void* UploadBuffer(int64_t bytes) override;
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
  // One Upload of the captured step: the graph's copy node `node` copies
  // device[s] -> arena, s the set the replay reads (cuda_replay_inputs.cc).
  struct InputSlot {
    int64_t offset = 0;
    int64_t bytes = 0;
    char* device[2] = {nullptr, nullptr};
    void* pinned[2] = {nullptr, nullptr};  // host side of each set, on first feed
    cudaGraphNode_t node = nullptr;
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
  // The replay inputs (cuda_replay_inputs.cc): an upload while capturing
  // (a new slot), one in the input window (into the set being filled), the
  // slots' copy nodes found after EndCapture, the launch of a replay on
  // the set filled last, and the slots freed.
  absl::Status CaptureInput(int64_t offset, const void* src, int64_t bytes);
  absl::Status FeedInput(int64_t offset, const void* src, int64_t bytes);
  absl::Status FindInputNodes();
  absl::Status LaunchWithInputs();
  absl::Status FreeInputSlots();
  absl::Status EnsureKernelScratch(int64_t floats);
  // Checks `k` (of `instr`) against the limits of its family's CUDA
  // kernels, adds what they need to *needs and builds a family's programs
  // prepared per plan: the family's preparation in the kernel table
  // (cuda_kernels.cc); nothing for a family without one.
  absl::Status PrepareKernel(Kernel& k, const Instruction& instr, KernelNeeds* needs);
  // The families prepared per plan (compiler/ops/unit_family.h), one
  // overload each on its Args: PreparePrograms checks instruction `instr`
  // (resolved as `k`) against the libraries' limits, adds the scratch it
  // needs to *needs and builds its programs, once per plan; RunPrograms
  // enqueues them. Each hands the instruction to its family's programs
  // (cuda_kernels.cc): linear to linear_ (cuBLAS and cublasLt), window to
  // cudnn_ (cuDNN).
  absl::Status PreparePrograms(const ops::LinearFamily::Args& l, Kernel& k,
                               const Instruction& instr, KernelNeeds* needs);
  absl::Status RunPrograms(const ops::LinearFamily::Args& l, const Kernel& k, int id);
  absl::Status PreparePrograms(const WindowGeometry& g, Kernel& k, const Instruction& instr,
                               KernelNeeds* needs);
  absl::Status RunPrograms(const WindowGeometry& g, const Kernel& k, int id);
  // RunKernel's kernel proper, on f32 operands (bf16 ones staged): the
  // kernel table's entry (cuda_kernels.cc).
  absl::Status RunF32Kernel(const Plan& plan, const Instruction& instr,
                            const StepState& step);
  friend struct CudaKernels;
  absl::StatusOr<cudaEvent_t> TimingEvent();
  // Reports (report) or drops the timed work of the step, and returns its
  // events to the pool either way.
  absl::Status ResolveTimings(bool report);

  const int ordinal_;
  std::string name_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaStream_t copy_ = nullptr;  // replay inputs, host -> device
  // The linear family's programs and cuBLAS handles, on compute_.
  std::unique_ptr<CublasLinear> linear_;
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
  bool tf32_ = false;

  bool capturing_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::vector<InputSlot> input_slots_;
  // Slots holding the next replay's data: all of them after EndCapture,
  // refilled from 0 after BeginReplayInputs, none after a Replay.
  size_t next_input_slot_ = 0;
  bool feeding_ = false;  // BeginReplayInputs .. End/Replay: uploads -> slots
  // Which set of the slots' buffers: the graph's copy nodes read, the
  // window fills (the next replay reads), the last replay read. One set
  // only where a slot's copy node was not found.
  int graph_set_ = 0, fill_set_ = 0, last_set_ = 0;
  bool double_buffered_ = false;
  cudaEvent_t landed_[2] = {nullptr, nullptr};    // copy_: a set's inputs are in
  cudaEvent_t consumed_[2] = {nullptr, nullptr};  // compute_: a replay read them

  absl::Status sticky_;  // first error of submitted work
};

}  // namespace cuda_internal
}  // namespace trainc

#endif  // TRAINC_RUNTIME_CUDA_CUDA_DEVICE_IMPL_H_
