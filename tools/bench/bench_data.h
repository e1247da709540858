// What every benchmark feeds a plan: the same random batch each step (they
// measure compute, not the data pipeline) and seeded initial weights.
#ifndef TRAINC_TOOLS_BENCH_BENCH_DATA_H_
#define TRAINC_TOOLS_BENCH_BENCH_DATA_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "compiler/plan/plan.h"
#include "runtime/device/device.h"
#include "runtime/exec/batch_source.h"

namespace trainc::bench {

// The same random batch every micro-step: i32 buffers (class indices,
// token ids) get ids in [0, id_range); f32 buffers (features) pixel-like
// values in [0, 1).
class FixedBatch : public BatchSource {
 public:
  FixedBatch(const Plan& plan, int64_t id_range, int seed);
  absl::Status Fill(int micro_step, const Plan& plan, Device& device) override;

 private:
  std::vector<std::vector<char>> data_;
};

// Parameters drawn as their Buffer::init says (uniform, normal, ones,
// zeros) from one fixed seed, the same on every rank, as a real run has;
// under ZeRO-3 rank `rank` keeps its shard.
absl::Status InitParameters(const Plan& plan, Device& device, int rank);

}  // namespace trainc::bench

#endif  // TRAINC_TOOLS_BENCH_BENCH_DATA_H_
