// A rank's device and communicators, made from --device and --comm: a
// private part of runtime/train (trainer.cc's).
//
//   RankDevices devices;
//   RETURN_IF_ERROR(CreateRankDevices(plan, rank, options, log, &devices));
//   Executor executor(plan, devices.device.get(), &devices.grad_comm(), ...);
#ifndef TRAINC_RUNTIME_TRAIN_RANK_DEVICES_H_
#define TRAINC_RUNTIME_TRAIN_RANK_DEVICES_H_

#include <cstdint>
#include <memory>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/plan/plan.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/train/trainer.h"

namespace trainc {

// Declared in the order they are made, so that they are released in
// reverse (the communicators closed last). Not movable once made:
// `sharding` points into it.
struct RankDevices {
  DeviceKind kind = DeviceKind::kCpu;  // kCpu or kCuda
  // The host communicator: host-side sums, barriers, NCCL's bootstrap.
  std::unique_ptr<Communicator> host_comm;
  std::unique_ptr<Communicator> nccl;  // CUDA: the gradients' communicator
  std::unique_ptr<Device> device;
  // ZeRO-1 checkpoints: every rank's optimizer state shard, over the host
  // communicator (the device is idle then).
  Sharding zero_sharding;
  const Sharding* sharding = nullptr;  // &zero_sharding under ZeRO-1

  // What carries the gradients: NCCL on CUDA, else the host communicator.
  Communicator& grad_comm() { return nccl ? *nccl : *host_comm; }
  // What the communicators' cached collectives hold in host memory.
  int64_t CommHostBytes() const;
};

// kCpu or kCuda for --device `requested`: kAuto is CUDA when a GPU is seen;
// kCuda without one fails, saying why.
absl::StatusOr<DeviceKind> ResolveDevice(DeviceKind requested, int world_size);

// Checks that the plan is for this job's ranks, then makes `devices`: the
// device (--device resolved, one GPU per local rank; options.wrap_device
// applied), the host communicator (rank.comm) and, on CUDA, NCCL. Notes
// about the CPU backend's threads go to `log`.
absl::Status CreateRankDevices(const Plan& plan, const RankContext& rank,
                               const TrainOptions& options, std::ostream& log,
                               RankDevices* devices);

}  // namespace trainc

#endif  // TRAINC_RUNTIME_TRAIN_RANK_DEVICES_H_
