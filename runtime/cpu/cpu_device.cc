#include "runtime/cpu/cpu_device.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "compiler/util/status_macros.h"
#include "runtime/cpu/bf16_matmul.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/blas_info.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/dnnl_ops.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/device/bf16.h"
#include "runtime/device/kernel_args.h"

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

}  // namespace

absl::StatusOr<int64_t> CpuBf16StagingBytes(const Plan& plan) {
  // Pointers only, as Prepare derives them: nothing reads the arena.
  char* const unread_arena = reinterpret_cast<char*>(uintptr_t{1} << 40);
  ASSIGN_OR_RETURN(std::vector<KernelArgs> kernels,
                   ResolveKernels(plan, unread_arena, plan.arena_bytes, "cpu"));
  // Native operands as Prepare marks them (no oneDNN stream made here).
  cpu::Bf16Matmuls matmuls;
  cpu::ChooseNative(matmuls, kernels);
  return Bf16StagingBytes(kernels);
}

struct CpuDevice::State {
  CpuDeviceOptions options;

  AlignedBytes arena;
  int64_t arena_bytes = 0;
  std::vector<AlignedBytes> scratch;
  int64_t host_bytes = 0;  // arena, scratch and staging, as allocated

  const Plan* prepared_plan = nullptr;
  std::vector<KernelArgs> kernels;  // by instruction id
  AlignedBytes bf16_staging;    // f32 views of bf16 operands (kernel_args.h)
  cpu::DnnlOps dnnl;            // convolution and pooling
  cpu::Bf16Matmuls matmuls;     // bf16 linear products (bf16_matmul.h)

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
    // What the worker would do at once is done here, without waking it (a
    // one-rank step's collectives are no-ops between event pairs, and each
    // wake-up is a thread switch): a wait on an event already recorded
    // (events stay recorded until ResetEvents, which needs an idle stream),
    // and a record with nothing queued or running ahead of it.
    if (item.kind == Item::kWait && recorded[item.event] != 0) return absl::OkStatus();
    if (item.kind == Item::kRecord && pending == 0) {
      recorded[item.event] = 1;
      return absl::OkStatus();
    }
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
  if (options.blas_threads > 0) {
    cpu::SetBlasThreads(options.blas_threads);
    cpu::SetDnnlThreads(options.blas_threads);
  }
  // A bad TRAINC_BLAS is the caller's to report (train does); here it is auto.
  const cpu::BlasChoice blas = cpu::WithBlasEnv(options.blas).value_or(options.blas);
  cpu::SetGemmLibrary(cpu::ResolveBlas(blas, cpu::DescribeBlas()));
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
  state_->host_bytes += bytes;
  return absl::OkStatus();
}

char* CpuDevice::arena() { return state_->arena.get(); }

int64_t CpuDevice::HostBytes() const { return state_->host_bytes; }

absl::StatusOr<char*> CpuDevice::AllocateScratch(int64_t bytes) {
  ASSIGN_OR_RETURN(AlignedBytes block, AllocateZeroed(bytes));
  state_->scratch.push_back(std::move(block));
  state_->host_bytes += bytes;
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

absl::Status CpuDevice::Copy(Stream stream, const void* src, void* dst,
                             int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("cpu: negative copy size");
  return Submit(stream, [=] {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  });
}

// The compute stream is this thread: both directions are plain copies.
absl::Status CpuDevice::CopyToHost(const void* src, void* dst,
                                   int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("cpu: negative copy size");
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CpuDevice::CopyFromHost(const void* src, void* dst,
                                     int64_t bytes) {
  return CopyToHost(src, dst, bytes);
}

absl::Status CpuDevice::Prepare(const Plan& plan) {
  if (state_->arena == nullptr) {
    return absl::FailedPreconditionError("cpu: Prepare before AllocateArena");
  }
  ASSIGN_OR_RETURN(state_->kernels,
                   ResolveKernels(plan, state_->arena.get(),
                                  state_->arena_bytes, "cpu"));
  // What the kernels decide once per plan (prepared.h), around the staging.
  cpu::ChooseNative(state_->matmuls, state_->kernels);  // operands read natively: no staging
  if (const int64_t staging = Bf16StagingBytes(state_->kernels); staging > 0) {
    ASSIGN_OR_RETURN(state_->bf16_staging, AllocateZeroed(staging));
    state_->host_bytes += staging;
    AssignBf16Staging(state_->kernels, state_->bf16_staging.get());
  }
  cpu::PlanPrograms programs{state_->dnnl, state_->matmuls};
  RETURN_IF_ERROR(programs.Build(plan, state_->kernels, &state_->host_bytes));
  RETURN_IF_ERROR(CheckKernels(plan, state_->kernels, "cpu", [&](KernelOp op, int) {
    return cpu::CpuKernels()[op] != nullptr;
  }));
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
  // precision = bf16: the kernel computes in f32 on staging, widened from
  // the bf16 tensors before and rounded to nearest even into them after
  // (a native operand, read by the kernel as bf16, has none).
  const KernelArgs& k = state_->kernels[instr.id];
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.native) continue;
    if (!o.output || k.accumulate) {
      cpu::WidenStaged(static_cast<const uint16_t*>(o.bf16), o.elems, o.f32);
    }
  }
  RETURN_IF_ERROR(RunF32Kernel(plan, instr, step));
  for (int i = 0; i < k.num_bf16; ++i) {
    const Bf16Operand& o = k.bf16[i];
    if (o.output && !o.native) cpu::NarrowStaged(o.f32, o.elems, static_cast<uint16_t*>(o.bf16));
  }
  return absl::OkStatus();
}

absl::Status CpuDevice::RunF32Kernel(const Plan& plan, const Instruction& instr,
                                     const StepState& step) {
  // A copy that changes a buffer's layout is oneDNN's reorder; the rest
  // the kernel table's.
  if (state_->dnnl.Converts(instr.id)) return state_->dnnl.Run(instr.id);
  const KernelArgs& k = state_->kernels[instr.id];
  const cpu::CpuKernel kernel = cpu::CpuKernels()[k.op];
  if (kernel == nullptr) {
    return absl::InvalidArgumentError("cpu: " + instr.op + " is not a compute kernel");
  }
  return kernel({plan, instr, k, step, state_->dnnl, state_->matmuls});
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
