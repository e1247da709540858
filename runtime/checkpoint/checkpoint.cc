#include "runtime/checkpoint/checkpoint.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/spec/model_signature.h"
#include "compiler/util/status_macros.h"
#include "runtime/checkpoint/hf_folder.h"
#include "runtime/checkpoint/safetensors.h"

namespace trainc {
namespace {

// The weights file says format = "pt" (PyTorch's tag) and trainc = this;
// the training state beside it says format = kStateFormat. Checkpoints
// before the split were one file with format = kSingleFileFormat.
constexpr char kTraincKey[] = "trainc";
constexpr char kWeightsFormat[] = "checkpoint-2";
constexpr char kStateFormat[] = "trainc-training-state-2";
constexpr char kSingleFileFormat[] = "trainc-checkpoint-1";
constexpr char kStateExtension[] = ".train_state.safetensors";
constexpr char kOptimizerPrefix[] = "optimizer.";

// A tensor of the checkpoint and where it lives in the arena. Optimizer
// state is a slice of its bucket's state span: bytes [within, within +
// bytes) of state span `kind` of bucket `bucket`. Under ZeRO-1 the arena
// holds only this rank's shard of that span, and `offset` is unused.
struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t bytes = 0;
  bool state = false;  // optimizer state (the training state file)
  // Sharded (ZeRO >= 1 state, ZeRO-3 parameters): the buffer holding this
  // rank's shard of the tensor's bucket span, its bucket, and the tensor's
  // byte offset in the whole span. -1: the tensor is whole at `offset`.
  int shard_buffer = -1;
  int bucket = -1;
  int64_t within = 0;
};

absl::StatusOr<std::vector<std::string>> StateNames(const Plan& plan) {
  const OptimizerConfig& opt = plan.optimizer;
  switch (opt.kind) {
    case OptimizerKind::kAdamW:
      return std::vector<std::string>{"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kSgd:
      if (opt.momentum > 0) return std::vector<std::string>{"momentum_buffer"};
      return std::vector<std::string>{};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer ", static_cast<int>(opt.kind)));
}

// The parameters, then (if `with_state`) each parameter's slice of its
// bucket's state spans, in plan order.
absl::StatusOr<std::vector<Slot>> Slots(const Plan& plan, bool with_state) {
  std::vector<Slot> slots;
  absl::flat_hash_map<std::string, const Buffer*> params;
  absl::flat_hash_map<std::string, int> bucket_of;
  for (const Bucket& bucket : plan.buckets) {
    for (const std::string& name : bucket.parameters) bucket_of[name] = bucket.id;
  }
  for (int id : plan.parameter_buffers) {
    const Buffer& b = plan.buffers[id];
    if (b.dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", b.name, "' is not f32"));
    }
    params[b.name] = &b;
    Slot slot{b.name, b.shape, b.offset, b.bytes};
    auto it = bucket_of.find(b.name);
    if (plan.zero >= 3 && it != bucket_of.end()) {  // kept as its bucket's shard
      const Bucket& bucket = plan.buckets[it->second];
      slot.shard_buffer = bucket.param_shard;
      slot.bucket = bucket.id;
      slot.within = b.offset - plan.buffers[bucket.param_span].offset;
      if (slot.within < 0 || slot.within + b.bytes > bucket.bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", b.name, "' is not inside bucket ", bucket.id, "'s span"));
      }
    }
    slots.push_back(std::move(slot));
  }
  if (!with_state) return slots;

  ASSIGN_OR_RETURN(std::vector<std::string> kinds, StateNames(plan));
  for (const Bucket& bucket : plan.buckets) {
    if (bucket.state_spans.size() != kinds.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket ", bucket.id, " has ", bucket.state_spans.size(),
          " optimizer state spans; ", EnumName(plan.optimizer.kind), " keeps ",
          kinds.size()));
    }
    if (kinds.empty()) continue;
    const Buffer& span = plan.buffers[bucket.param_span];
    for (const std::string& name : bucket.parameters) {
      auto it = params.find(name);
      if (it == params.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bucket ", bucket.id, " names unknown parameter '", name, "'"));
      }
      const Buffer& p = *it->second;
      // The state spans repeat the parameter span's layout element for
      // element, so a parameter's state sits at its offset in the span.
      const int64_t within = p.offset - span.offset;
      for (size_t k = 0; k < kinds.size(); ++k) {
        const Buffer& state = plan.buffers[bucket.state_spans[k]];
        const int64_t state_bytes =
            bucket.shard_elems > 0 ? bucket.bytes : state.bytes;
        if (within < 0 || within + p.bytes > span.bytes ||
            within + p.bytes > state_bytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "parameter '", name, "' is not inside bucket ", bucket.id,
              "'s parameter and state spans"));
        }
        Slot slot{absl::StrCat(kOptimizerPrefix, name, ".", kinds[k]), p.shape,
                  state.offset + within, p.bytes, /*state=*/true};
        if (bucket.shard_elems > 0) {
          slot.shard_buffer = bucket.state_spans[k];
          slot.bucket = bucket.id;
          slot.within = within;
        }
        slots.push_back(std::move(slot));
      }
    }
  }
  return slots;
}

absl::StatusOr<int64_t> MetadataInt(const SafetensorsFile& file,
                                    const std::string& path,
                                    const std::string& key) {
  auto it = file.metadata().find(key);
  int64_t value = 0;
  if (it == file.metadata().end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": metadata '", key, "' is missing or not an integer"));
  }
  return value;
}

// ZeRO: every rank's shard of every sharded span the slots read, gathered
// through `sharding` (collective, in slot order on every rank); shard
// buffer id -> the whole span's bytes.
absl::StatusOr<std::map<int, std::vector<char>>> GatherShards(const Plan& plan, Device& device,
                                                               const std::vector<Slot>& slots,
                                                               const Sharding& sharding) {
  std::map<int, std::vector<char>> spans;
  for (const Slot& slot : slots) {
    if (slot.shard_buffer < 0 || spans.count(slot.shard_buffer)) continue;
    const Bucket& bucket = plan.buckets[slot.bucket];
    const Buffer& mine = plan.buffers[slot.shard_buffer];
    std::vector<float> shard(bucket.shard_elems);
    RETURN_IF_ERROR(device.Download(mine.offset, shard.data(), mine.bytes));
    std::vector<char>& whole = spans[slot.shard_buffer];
    whole.resize(bucket.bytes);
    RETURN_IF_ERROR(sharding.all_gather(
        shard.data(), reinterpret_cast<float*>(whole.data()), bucket.shard_elems));
  }
  return spans;
}

// Every slot's bytes, whole: downloaded, or cut from its gathered span.
absl::StatusOr<std::vector<std::vector<char>>> ReadSlots(const Plan& plan, Device& device,
                                                         const std::vector<Slot>& slots,
                                                         const Sharding* sharding) {
  bool sharded = false;
  for (const Slot& slot : slots) sharded |= slot.shard_buffer >= 0;
  if (sharded && (sharding == nullptr || !sharding->all_gather)) {
    return absl::InvalidArgumentError(
        "a ZeRO plan's checkpoint needs every rank's shards (a Sharding)");
  }
  RETURN_IF_ERROR(device.Synchronize());
  std::map<int, std::vector<char>> spans;
  if (sharded) {
    ASSIGN_OR_RETURN(spans, GatherShards(plan, device, slots, *sharding));
  }
  std::vector<std::vector<char>> data(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& slot = slots[i];
    if (slot.shard_buffer >= 0) {
      const char* from = spans.at(slot.shard_buffer).data() + slot.within;
      data[i].assign(from, from + slot.bytes);
    } else {
      data[i].resize(slot.bytes);
      RETURN_IF_ERROR(device.Download(slot.offset, data[i].data(), slot.bytes));
    }
  }
  return data;
}

// A NaN or Inf would train to a NaN loss: refuse it, naming it.
absl::Status CheckFinite(absl::Span<const char> data, const std::string& path,
                         const std::string& name) {
  const int64_t n = static_cast<int64_t>(data.size() / sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, data.data() + i * sizeof(float), sizeof(float));
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name, "' holds a non-finite value (", v, ") at element ", i));
    }
  }
  return absl::OkStatus();
}

// Uploads one tensor into the arena. A sharded one (ZeRO state, ZeRO-3
// parameters) contributes only the part inside this rank's shard.
absl::Status UploadSlot(const Plan& plan, Device& device, const Slot& slot,
                        absl::Span<const char> data, int rank) {
  if (slot.shard_buffer < 0) return device.Upload(slot.offset, data.data(), data.size());
  const Bucket& bucket = plan.buckets[slot.bucket];
  const int64_t shard_begin = rank * bucket.shard_elems * 4;
  const int64_t shard_end = shard_begin + bucket.shard_elems * 4;
  const int64_t begin = std::max(slot.within, shard_begin);
  const int64_t end = std::min(slot.within + slot.bytes, shard_end);
  if (begin >= end) return absl::OkStatus();
  const Buffer& shard = plan.buffers[slot.shard_buffer];
  return device.Upload(shard.offset + (begin - shard_begin),
                       data.data() + (begin - slot.within), end - begin);
}

// Ties a weights file to the training state written with it.
std::string NewCheckpointId() {
  std::random_device random;
  return absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random());
}

}  // namespace

std::string TrainingStatePath(const std::string& weights_path) {
  constexpr absl::string_view kExt = ".safetensors";
  absl::string_view stem = weights_path;
  if (absl::EndsWith(stem, kExt)) stem.remove_suffix(kExt.size());
  return absl::StrCat(stem, kStateExtension);
}

absl::Status SaveCheckpoint(const std::string& path, const Plan& plan,
                            Device& device, const TrainingState& state,
                            const Sharding* sharding) {
  ASSIGN_OR_RETURN(std::vector<Slot> slots, Slots(plan, /*with_state=*/true));
  ASSIGN_OR_RETURN(const std::vector<std::vector<char>> data,
                   ReadSlots(plan, device, slots, sharding));
  if (sharding != nullptr && sharding->rank != 0) return absl::OkStatus();
  std::vector<TensorRef> weights, optimizer;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& slot = slots[i];
    (slot.state ? optimizer : weights)
        .push_back({slot.name, "F32", slot.shape, absl::Span<const char>(data[i])});
  }
  const std::string state_path = TrainingStatePath(path);
  std::map<std::string, std::string> metadata = {
      {"model", plan.model},
      {"step", absl::StrCat(state.step)},
      {"epoch", absl::StrCat(state.epoch)},
      {"step_in_epoch", absl::StrCat(state.step_in_epoch)},
      {"seed", absl::StrCat(plan.seed)},
      {"world_size", absl::StrCat(plan.world_size)},
      {"micro_batch", absl::StrCat(plan.micro_batch)},
      {"accumulate", absl::StrCat(plan.accumulate)},
      {"global_batch", absl::StrCat(plan.global_batch)},
      {"optimizer", EnumName(plan.optimizer.kind)},
      {"checkpoint_id", NewCheckpointId()},
  };
  // What the model computes, for tools/hf_export (plans older than it have none).
  if (!plan.model_signature.empty()) metadata["model_signature"] = plan.model_signature;
  // Both are written whole before either is renamed into place (a full
  // disk leaves the previous pair as it was); the weights are renamed last,
  // so a new weights file always has its state beside it.
  std::map<std::string, std::string> state_metadata = metadata;
  state_metadata["format"] = kStateFormat;
  // The weights file is what other tools load: PyTorch's format tag (which
  // transformers' loaders check), our own beside it.
  metadata["format"] = "pt";
  metadata[kTraincKey] = kWeightsFormat;
  metadata["training_state"] = std::filesystem::path(state_path).filename().string();
  return WriteSafetensorsFiles(
      {{path, weights, metadata}, {state_path, optimizer, state_metadata}});
}

namespace {

// The tensors a load takes from, by name, and the file each comes from.
struct Sources {
  std::vector<SafetensorsFile> files;
  std::vector<std::string> paths;
  absl::flat_hash_map<std::string, int> file_of;  // tensor name -> index
};

bool IsOurWeightsFile(const SafetensorsFile& file) {
  auto it = file.metadata().find(kTraincKey);
  return it != file.metadata().end() && it->second == kWeightsFormat;
}

bool IsSingleFileCheckpoint(const SafetensorsFile& file) {
  auto it = file.metadata().find("format");
  return it != file.metadata().end() && it->second == kSingleFileFormat;
}

// Marks an error as IsCheckpointOfAnotherModel's.
constexpr char kOtherModelPayload[] = "trainc/checkpoint-of-another-model";

absl::Status OtherModel(absl::Status status) {
  status.SetPayload(kOtherModelPayload, absl::Cord(kOtherModelPayload));
  return status;
}

// The model signature the checkpoint was saved with (compiler/spec/
// model_signature.h) against the plan's: weights of other heads over
// key/value heads, rope_theta or eps have the plan's shapes and would load
// as this model. A checkpoint (or plan) without one, from before it was
// recorded, is taken on trust.
absl::Status CheckSameModel(const SafetensorsFile& weights, const std::string& path,
                            const Plan& plan) {
  auto saved = weights.metadata().find("model_signature");
  if (saved == weights.metadata().end() || plan.model_signature.empty()) {
    return absl::OkStatus();
  }
  const std::string train =
      plan.source.empty() ? absl::StrCat("model '", plan.model, "'") : plan.source;
  const std::string why =
      ModelSignatureDifference(saved->second, "the checkpoint's model", plan.model_signature,
                               absl::StrCat(train, "'s (with the options given here)"));
  if (why.empty()) return absl::OkStatus();
  return OtherModel(absl::FailedPreconditionError(absl::StrCat(
      path, " was trained as another model than ", train, ": ", why,
      ". Load it with the .train file and the model options (--heads ...) its run used")));
}

// Reads a checkpoint's training state (optimizer tensors and where training
// stands) beside the weights file at `path`, checking that the two were
// written together.
absl::StatusOr<SafetensorsFile> ReadTrainingState(const std::string& path,
                                                  const SafetensorsFile& weights) {
  const std::string state_path = TrainingStatePath(path);
  std::error_code error;
  if (!std::filesystem::exists(state_path, error)) {
    return absl::NotFoundError(absl::StrCat(
        path, ": its training state ", state_path,
        " is missing (--resume needs both files; --init-from ", path,
        " starts a new run from the weights alone)"));
  }
  ASSIGN_OR_RETURN(SafetensorsFile state, SafetensorsFile::Read(state_path));
  auto format = state.metadata().find("format");
  auto id = state.metadata().find("checkpoint_id");
  auto want = weights.metadata().find("checkpoint_id");
  if (format == state.metadata().end() || format->second != kStateFormat) {
    return absl::InvalidArgumentError(absl::StrCat(
        state_path, ": not a trainc training state (metadata 'format' is not '",
        kStateFormat, "')"));
  }
  if (id == state.metadata().end() || want == weights.metadata().end() ||
      id->second != want->second) {
    return absl::FailedPreconditionError(absl::StrCat(
        state_path, " belongs to another checkpoint than ", path,
        " (a run stopped between writing the two?); --init-from ", path,
        " starts a new run from the weights alone"));
  }
  return state;
}

// The files a checkpoint at `path` is read from: its weights (a file or a
// Hugging Face folder) and, unless `weights_only` or an old single-file
// checkpoint, its training state.
absl::StatusOr<Sources> OpenSources(const std::string& path, const Plan& plan,
                                    bool weights_only) {
  Sources sources;
  if (IsHfFolder(path) && !weights_only) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": a Hugging Face model folder holds weights only; start from it with "
        "--init-from"));
  }
  ASSIGN_OR_RETURN(SafetensorsFile weights,
                   IsHfFolder(path) ? ReadHfFolder(path) : SafetensorsFile::Read(path));
  RETURN_IF_ERROR(CheckSameModel(weights, path, plan));
  const bool single_file = IsSingleFileCheckpoint(weights);
  if (!weights_only && !single_file && !IsOurWeightsFile(weights)) {
    // Still usable as weights (e.g. a file exported from PyTorch).
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not a trainc checkpoint (no metadata '", kTraincKey, "' = '",
        kWeightsFormat, "'); use it with --init-from to load only the weights"));
  }
  sources.files.push_back(std::move(weights));
  sources.paths.push_back(path);
  if (!weights_only && !single_file) {
    ASSIGN_OR_RETURN(SafetensorsFile training, ReadTrainingState(path, sources.files[0]));
    sources.files.push_back(std::move(training));
    sources.paths.push_back(TrainingStatePath(path));
  }
  return sources;
}

// Where training stands: in the training state, or in an old single file.
// Its seed and global batch must be the plan's, or the data order changes.
absl::StatusOr<TrainingState> ReadTrainingPosition(const Sources& sources,
                                                   const std::string& path, const Plan& plan) {
  const SafetensorsFile& meta = sources.files.back();
  const std::string& meta_path = sources.paths.back();
  TrainingState loaded;
  ASSIGN_OR_RETURN(loaded.step, MetadataInt(meta, meta_path, "step"));
  ASSIGN_OR_RETURN(loaded.epoch, MetadataInt(meta, meta_path, "epoch"));
  ASSIGN_OR_RETURN(loaded.step_in_epoch, MetadataInt(meta, meta_path, "step_in_epoch"));
  ASSIGN_OR_RETURN(int64_t seed, MetadataInt(meta, meta_path, "seed"));
  ASSIGN_OR_RETURN(int64_t global_batch, MetadataInt(meta, meta_path, "global_batch"));
  if (seed != plan.seed || global_batch != plan.global_batch) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": saved with seed ", seed, " and global batch ", global_batch,
        ", the plan has seed ", plan.seed, " and global batch ",
        plan.global_batch, "; resuming would change the data order"));
  }
  return loaded;
}

// Records which file holds each of the plan's tensors; a tensor the plan
// lacks is refused (optimizer state is skipped under `weights_only`).
absl::Status MatchTensors(const std::vector<Slot>& slots, const Plan& plan, bool weights_only,
                          Sources* sources) {
  absl::flat_hash_map<std::string, const Slot*> wanted;
  for (const Slot& slot : slots) wanted[slot.name] = &slot;
  for (size_t f = 0; f < sources->files.size(); ++f) {
    for (const auto& [name, tensor] : sources->files[f].tensors()) {
      if (wanted.contains(name)) {
        sources->file_of[name] = static_cast<int>(f);
        continue;
      }
      if (weights_only && absl::StartsWith(name, kOptimizerPrefix)) continue;
      absl::Status unknown = absl::InvalidArgumentError(absl::StrCat(
          sources->paths[f], ": tensor '", name, "' is not in the plan of model '",
          plan.model, "' (a checkpoint of another model?)"));
      return f == 0 ? OtherModel(unknown) : unknown;  // a parameter, or optimizer state
    }
  }
  return absl::OkStatus();
}

// Every slot's tensor is there, F32 of the plan's shape, and finite.
absl::Status CheckSlots(const std::vector<Slot>& slots, const Sources& sources) {
  for (const Slot& slot : slots) {
    auto found = sources.file_of.find(slot.name);
    if (found == sources.file_of.end()) {
      absl::Status missing = absl::NotFoundError(absl::StrCat(
          sources.paths[slot.state ? sources.files.size() - 1 : 0], ": tensor '",
          slot.name, "' is missing"));
      return slot.state ? missing : OtherModel(missing);
    }
    const SafetensorsFile& file = sources.files[found->second];
    const std::string& file_path = sources.paths[found->second];
    const SafetensorsFile::Tensor* t = file.Find(slot.name);
    if (t->dtype != "F32" || t->shape != slot.shape) {
      absl::Status other = absl::InvalidArgumentError(absl::StrCat(
          file_path, ": tensor '", slot.name, "' is ", t->dtype, "[",
          absl::StrJoin(t->shape, ","), "], the plan has F32[",
          absl::StrJoin(slot.shape, ","), "]"));
      return slot.state ? other : OtherModel(other);
    }
    RETURN_IF_ERROR(CheckFinite(file.Data(*t), file_path, slot.name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadCheckpoint(const std::string& path, const Plan& plan,
                            Device& device, TrainingState* state,
                            bool weights_only, int rank) {
  ASSIGN_OR_RETURN(Sources sources, OpenSources(path, plan, weights_only));
  TrainingState loaded;
  if (!weights_only) {
    ASSIGN_OR_RETURN(loaded, ReadTrainingPosition(sources, path, plan));
  }
  ASSIGN_OR_RETURN(std::vector<Slot> slots, Slots(plan, !weights_only));
  RETURN_IF_ERROR(MatchTensors(slots, plan, weights_only, &sources));
  // Check everything before uploading anything, so that a bad file leaves
  // the arena untouched.
  RETURN_IF_ERROR(CheckSlots(slots, sources));
  for (const Slot& slot : slots) {
    const SafetensorsFile& file = sources.files[sources.file_of.at(slot.name)];
    RETURN_IF_ERROR(UploadSlot(plan, device, slot, file.Data(*file.Find(slot.name)), rank));
  }
  if (!weights_only && state != nullptr) *state = loaded;
  return absl::OkStatus();
}

bool IsCheckpointOfAnotherModel(const absl::Status& status) {
  return status.GetPayload(kOtherModelPayload).has_value();
}

absl::Status UploadParameter(const Plan& plan, Device& device, int index,
                             absl::Span<const float> values, int rank) {
  ASSIGN_OR_RETURN(const std::vector<Slot> slots, Slots(plan, /*with_state=*/false));
  if (index < 0 || index >= static_cast<int>(slots.size()) ||
      static_cast<int64_t>(values.size() * sizeof(float)) != slots[index].bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter ", index, ": no such parameter of ", values.size(), " floats"));
  }
  return UploadSlot(plan, device, slots[index],
                    absl::Span<const char>(reinterpret_cast<const char*>(values.data()),
                                           values.size() * sizeof(float)),
                    rank);
}

absl::StatusOr<std::vector<std::vector<float>>> DownloadParameters(const Plan& plan,
                                                                   Device& device,
                                                                   const Sharding* sharding) {
  ASSIGN_OR_RETURN(const std::vector<Slot> slots, Slots(plan, /*with_state=*/false));
  ASSIGN_OR_RETURN(const std::vector<std::vector<char>> data,
                   ReadSlots(plan, device, slots, sharding));
  std::vector<std::vector<float>> values(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    values[i].resize(data[i].size() / sizeof(float));
    std::memcpy(values[i].data(), data[i].data(), data[i].size());
  }
  return values;
}

namespace {

constexpr char kPrefix[] = "step-";
constexpr char kSuffix[] = ".safetensors";

// The step of a checkpoint file name, or -1 for any other name.
int64_t StepOfName(const std::string& name) {
  const size_t prefix = sizeof(kPrefix) - 1, suffix = sizeof(kSuffix) - 1;
  if (name.size() <= prefix + suffix || name.compare(0, prefix, kPrefix) != 0 ||
      name.compare(name.size() - suffix, suffix, kSuffix) != 0) {
    return -1;
  }
  int64_t step = 0;
  for (size_t i = prefix; i < name.size() - suffix; ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// (step, path) of every checkpoint in `dir`, newest first.
absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(
    const std::string& dir) {
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the checkpoint folder ", dir, ": ", error.message()));
  }
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::filesystem::directory_entry& entry : it) {
    const int64_t step = StepOfName(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(error)) {
      found.emplace_back(step, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  return found;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/%s%08d%s", dir, kPrefix, step, kSuffix);
}

absl::Status PrepareCheckpointFolder(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint folder ", dir, ": cannot create it: ", error.message()));
  }
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint folder ", dir, ": exists and is not a folder"));
  }
  std::string probe = dir + "/.write-test.XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint folder ", dir,
                                                   ": cannot write in it: ",
                                                   std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> CheckpointsNewestFirst(const std::string& dir) {
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> found = ListCheckpoints(dir);
  if (!found.ok()) return found.status();
  std::vector<std::string> paths;
  for (auto& [step, path] : *found) paths.push_back(std::move(path));
  return paths;
}

absl::Status PruneCheckpoints(const std::string& dir, int64_t keep) {
  absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> found = ListCheckpoints(dir);
  if (!found.ok()) return found.status();
  const size_t kept = std::min(found->size(), static_cast<size_t>(std::max<int64_t>(keep, 0)));
  std::set<std::string> keep_states;
  for (size_t i = 0; i < kept; ++i) keep_states.insert(TrainingStatePath((*found)[i].second));
  // The weights first: a checkpoint is gone from the listing before its
  // state is (a run killed in between leaves an orphaned state, removed
  // below by the next prune).
  for (size_t i = kept; i < found->size(); ++i) {
    if (::unlink((*found)[i].second.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot delete the old checkpoint ",
                                              (*found)[i].second, ": ",
                                              std::strerror(errno)));
    }
    ::unlink(TrainingStatePath((*found)[i].second).c_str());
  }
  // Training states of deleted checkpoints (and of one whose weights a
  // killed run never wrote), and temporary files of writes a killed run
  // never finished (<name>.tmp.XXXXXX, safetensors.h).
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const bool temporary = name.find(std::string(kSuffix) + ".tmp.") != std::string::npos;
    const bool state = absl::EndsWith(name, kStateExtension) &&
                       keep_states.count(entry.path().string()) == 0;
    if (temporary || state) std::filesystem::remove(entry.path(), error);
  }
  return absl::OkStatus();
}

}  // namespace trainc
