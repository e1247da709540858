// Communicator: the collectives a plan needs, over every rank of a job.
//
// One interface for Gloo (CPU tensors, TCP) and NCCL (GPU tensors). Calls
// are made from the device's comm stream: on the CPU from its worker thread
// (blocking until done), on CUDA they enqueue on `stream` (a cudaStream_t)
// and return.
#ifndef TRAINC_RUNTIME_COMM_COMMUNICATOR_H_
#define TRAINC_RUNTIME_COMM_COMMUNICATOR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace trainc {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // In place: data[i] = sum over ranks of data[i].
  virtual absl::Status AllReduceSum(float* data, int64_t count,
                                    void* stream) = 0;
  // In place: `data` holds world_size * count floats. On return, this
  // rank's segment data[rank * count, (rank + 1) * count) is the sum over
  // ranks of that segment; the other segments are undefined.
  virtual absl::Status ReduceScatterSum(float* data, int64_t count,
                                        void* stream) = 0;
  // The same two with bf16 on the wire (grad_comm = bf16, as DDP's
  // bf16_compress_hook): `data` is rounded to bf16 (nearest even), summed
  // over ranks (each partial sum formed in fp32 and rounded to bf16, as a
  // library's bf16 reduction does), and widened back into `data`.
  virtual absl::Status AllReduceSumBf16(float* data, int64_t count,
                                        void* stream);
  virtual absl::Status ReduceScatterSumBf16(float* data, int64_t count,
                                            void* stream);
  // out[r * count + i] = rank r's in[i]; `out` holds world_size * count.
  // In place when in == out + rank * count.
  virtual absl::Status AllGather(const float* in, float* out, int64_t count,
                                 void* stream) = 0;
  // Every rank gets root's data.
  virtual absl::Status Broadcast(float* data, int64_t count, int root,
                                 void* stream) = 0;
  // Returns once every rank has called it (host-side).
  virtual absl::Status Barrier() = 0;

  // Whether collectives enqueued on a stream that is being captured into a
  // CUDA graph are captured with it, and replay correctly.
  virtual bool SupportsCapture() const { return false; }

  // The work just enqueued on `stream` holds this communicator's
  // collectives without their host calls (a replayed CUDA graph): it must
  // finish within the bound the communicator keeps on its collectives, or
  // the communicator is aborted (NCCL's watchdog). Health() then says so.
  virtual absl::Status WatchStream(void* stream) { return absl::OkStatus(); }
  // A failure found since the last host call (an asynchronous error, a
  // collective past its bound), which only a call would otherwise report.
  virtual absl::Status Health() { return absl::OkStatus(); }

  // Bytes of host memory its cached collectives hold (Gloo's algorithms
  // keep buffers per bucket; counted from the library's own sizes), for the
  // run summary's account of resident memory. 0 where there are none.
  virtual int64_t HostBytes() const { return 0; }
};

}  // namespace trainc

#endif  // TRAINC_RUNTIME_COMM_COMMUNICATOR_H_
