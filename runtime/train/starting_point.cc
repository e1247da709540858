#include "runtime/train/starting_point.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/data/sampler.h"

namespace trainc {
namespace {

// --resume: a checkpoint file, or a folder of them: the newest that loads.
// One that cannot be used (no training state, another seed, non-finite
// values) is skipped with a warning; one of another model stops the search:
// the folder holds another run's checkpoints (or this run's options are not
// its own), and resuming from an older one would silently drop that run's
// newer steps and then overwrite its checkpoints.
absl::StatusOr<std::string> ResumeFrom(const std::string& path, const Plan& plan,
                                       Device& device, int rank, TrainingState* state,
                                       std::ostream& log) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error) || IsHfFolder(path)) {
    // (LoadCheckpoint says that a Hugging Face folder has no training state.)
    RETURN_IF_ERROR(
        LoadCheckpoint(path, plan, device, state, /*weights_only=*/false, rank));
    return path;
  }
  ASSIGN_OR_RETURN(std::vector<std::string> candidates, CheckpointsNewestFirst(path));
  for (const std::string& candidate : candidates) {
    absl::Status loaded =
        LoadCheckpoint(candidate, plan, device, state, /*weights_only=*/false, rank);
    if (loaded.ok()) return candidate;
    if (IsCheckpointOfAnotherModel(loaded)) {
      return absl::Status(
          loaded.code(),
          absl::StrCat("--resume ", path, ": ", loaded.message(),
                       "; the older checkpoints in ", path,
                       " are not tried in its place (resume with that run's .train file and "
                       "options, or name an older checkpoint file)"));
    }
    log << "warning: skipping " << candidate << ": " << loaded.message() << "\n";
  }
  return absl::NotFoundError(absl::StrCat(
      "--resume ", path, ": no checkpoint (step-<N>.safetensors) in this folder",
      candidates.empty() ? "" : " loads"));
}

// Parameters are initialised like PyTorch's modules (see Buffer::init) from
// one portable generator seeded by the plan, so every rank and every
// platform starts from the same weights.
absl::Status InitializeParameters(const Plan& plan, Device& device, int rank) {
  SplitMix64 rng(static_cast<uint64_t>(plan.seed) * 0x9E3779B97F4A7C15ull +
                 0x5EEDull);
  std::vector<float> host;
  for (size_t i = 0; i < plan.parameter_buffers.size(); ++i) {
    const Buffer& b = plan.buffers[plan.parameter_buffers[i]];
    host.assign(b.bytes / sizeof(float), 0.0f);
    switch (b.init) {
      case ParamInit::kNone:  // not expected of a parameter: zeros
      case ParamInit::kZeros:
        break;
      case ParamInit::kOnes:
        std::fill(host.begin(), host.end(), 1.0f);
        break;
      case ParamInit::kUniform:
        for (float& v : host) {
          // 24 random bits -> [0, 1), exactly representable in float.
          const double u = static_cast<double>(rng.Next() >> 40) / (1 << 24);
          v = static_cast<float>((2.0 * u - 1.0) * b.init_bound);
        }
        break;
      case ParamInit::kNormal:
        // Box-Muller on 53-bit uniforms; u1 in (0, 1] keeps the log finite.
        for (size_t i = 0; i < host.size(); i += 2) {
          const double u1 = (static_cast<double>(rng.Next() >> 11) + 1.0) / 9007199254740992.0;
          const double u2 = static_cast<double>(rng.Next() >> 11) / 9007199254740992.0;
          const double r = std::sqrt(-2.0 * std::log(u1)) * b.init_bound;
          host[i] = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
          if (i + 1 < host.size()) host[i + 1] = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
        }
        break;
    }
    // Every rank draws every value (the generator stays in step); ZeRO-3
    // keeps its shard.
    RETURN_IF_ERROR(UploadParameter(plan, device, static_cast<int>(i), host, rank));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StartingPoint> LoadStartingPoint(const Plan& plan, const TrainOptions& options,
                                                Device& device, int rank, std::ostream& log) {
  StartingPoint start;
  if (!options.resume.empty()) {
    ASSIGN_OR_RETURN(start.resumed_from,
                     ResumeFrom(options.resume, plan, device, rank, &start.state, log));
  } else if (!options.init_from.empty()) {
    RETURN_IF_ERROR(LoadCheckpoint(options.init_from, plan, device, &start.state,
                                   /*weights_only=*/true, rank));
    start.state = TrainingState();
  } else {
    RETURN_IF_ERROR(InitializeParameters(plan, device, rank));
  }
  RETURN_IF_ERROR(device.Synchronize());
  return start;
}

}  // namespace trainc
