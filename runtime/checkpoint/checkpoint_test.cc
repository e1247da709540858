#include "runtime/checkpoint/checkpoint.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/data/host_test_device.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

int AddBuffer(Plan* plan, const std::string& name, BufferKind kind,
              std::vector<int64_t> shape, int64_t offset, int64_t bytes = -1) {
  Buffer b;
  b.id = plan->buffers.size();
  b.name = name;
  b.kind = kind;
  b.shape = std::move(shape);
  b.offset = offset;
  b.bytes = 4;
  for (int64_t d : b.shape) b.bytes *= d;
  if (bytes >= 0) b.bytes = bytes;
  plan->buffers.push_back(b);
  return b.id;
}

// h1.weight [2,3] at 0 and h1.bias [2] at 64 (aligned), one bucket whose
// parameter span covers both, adamw state spans at 128 and 256.
Plan TinyPlan(OptimizerKind optimizer = OptimizerKind::kAdamW) {
  Plan plan;
  plan.model = "tiny";
  plan.seed = 5;
  plan.world_size = 2;
  plan.micro_batch = 4;
  plan.accumulate = 2;
  plan.global_batch = 16;
  plan.optimizer.kind = optimizer;
  plan.optimizer.momentum = 0.9;
  plan.parameter_buffers = {
      AddBuffer(&plan, "h1.weight", BufferKind::kParameter, {2, 3}, 0),
      AddBuffer(&plan, "h1.bias", BufferKind::kParameter, {2}, 64)};
  Bucket bucket;
  bucket.parameters = {"h1.bias", "h1.weight"};
  bucket.param_span =
      AddBuffer(&plan, "span0", BufferKind::kParameterSpan, {18}, 0, 72);
  bucket.state_spans.push_back(
      AddBuffer(&plan, "m0", BufferKind::kStateSpan, {18}, 128, 72));
  if (optimizer == OptimizerKind::kAdamW) {
    bucket.state_spans.push_back(
        AddBuffer(&plan, "v0", BufferKind::kStateSpan, {18}, 256, 72));
  }
  plan.buckets.push_back(bucket);
  plan.arena_bytes = 384;
  return plan;
}

void FillArena(HostTestDevice* device, int64_t bytes) {
  ASSERT_TRUE(device->AllocateArena(bytes).ok());
  for (int64_t i = 0; i < bytes / 4; ++i) {
    const float x = 0.25f * i - 3.0f;
    ASSERT_TRUE(device->Upload(i * 4, &x, 4).ok());
  }
}

TEST(CheckpointTest, RoundTripRestoresWeightsStateAndPosition) {
  Plan plan = TinyPlan();
  HostTestDevice saved;
  FillArena(&saved, plan.arena_bytes);
  const std::string path = TempPath("ckpt.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, saved, {12, 1, 3}).ok());

  HostTestDevice restored;
  ASSERT_TRUE(restored.AllocateArena(plan.arena_bytes).ok());
  TrainingState state;
  ASSERT_TRUE(LoadCheckpoint(path, plan, restored, &state, false).ok());
  EXPECT_EQ(state.step, 12);
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.step_in_epoch, 3);
  // Parameters and both state spans (the padding between h1.weight and
  // h1.bias is not saved and stays zero).
  for (int64_t base : {0, 128, 256}) {
    EXPECT_EQ(std::memcmp(saved.At<char>(base), restored.At<char>(base), 24), 0);
    EXPECT_EQ(std::memcmp(saved.At<char>(base + 64), restored.At<char>(base + 64), 8), 0);
  }
}

std::vector<std::string> TensorNames(const SafetensorsFile& file) {
  std::vector<std::string> names;
  for (const auto& [name, t] : file.tensors()) names.push_back(name);
  return names;
}

// The weights file holds the parameters and nothing else (what
// load_state_dict(strict=True) wants), tagged as PyTorch's; the optimizer
// state goes to the training state beside it.
TEST(CheckpointTest, WeightsFileHoldsOnlyParametersNamedAsPyTorch) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("names.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {}).ok());
  auto file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(TensorNames(*file), ::testing::ElementsAre("h1.bias", "h1.weight"));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("model"), "tiny");
  EXPECT_EQ(file->metadata().at("world_size"), "2");
  EXPECT_EQ(file->metadata().at("training_state"), "names.train_state.safetensors");

  EXPECT_EQ(TrainingStatePath(path), TempPath("names.train_state.safetensors"));
  auto state = SafetensorsFile::Read(TrainingStatePath(path));
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_THAT(TensorNames(*state),
              ::testing::ElementsAre("optimizer.h1.bias.exp_avg", "optimizer.h1.bias.exp_avg_sq",
                                     "optimizer.h1.weight.exp_avg",
                                     "optimizer.h1.weight.exp_avg_sq"));
  // exp_avg of h1.bias is the m span at h1.bias's offset in the span.
  float first;
  std::memcpy(&first, state->Data(*state->Find("optimizer.h1.bias.exp_avg")).data(), 4);
  EXPECT_EQ(first, *device.At<float>(128 + 64));
  EXPECT_EQ(state->metadata().at("checkpoint_id"), file->metadata().at("checkpoint_id"));
  // A plan without a model signature (an older plan file) saves none.
  EXPECT_EQ(file->metadata().count("model_signature"), 0u);
}

TEST(CheckpointTest, WeightsRecordWhatTheModelComputes) {
  // tools/hf_export compares it with the .train file it is given.
  Plan plan = TinyPlan();
  plan.model_signature = "1 x linear(bias=true, out_features=2)\ninput x: f32[3]";
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("signed.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {}).ok());
  auto file = SafetensorsFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("model_signature"), plan.model_signature);
}

// The same shapes under other heads: refused by --resume and --init-from
// alike, naming both sides and the calls that differ, and marked so that
// --resume DIR does not fall back to an older checkpoint.
TEST(CheckpointTest, ACheckpointOfAnotherModelOfTheSameShapesIsRefused) {
  Plan trained = TinyPlan();
  trained.source = "runs/tiny.train";
  trained.model_signature = "2 x causal_attention(heads=2, kv_heads=1)\ninput x: f32[3]";
  HostTestDevice device;
  FillArena(&device, trained.arena_bytes);
  const std::string path = TempPath("other_heads.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, trained, device, {4, 0, 4}).ok());

  Plan plan = trained;
  plan.source = "tiny.train";
  plan.model_signature = "2 x causal_attention(heads=4, kv_heads=2)\ninput x: f32[3]";
  HostTestDevice restored;
  ASSERT_TRUE(restored.AllocateArena(plan.arena_bytes).ok());
  TrainingState state;
  for (const bool weights_only : {false, true}) {
    const absl::Status s = LoadCheckpoint(path, plan, restored, &state, weights_only);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    const std::string m(s.message());
    EXPECT_THAT(m, HasSubstr(path + " was trained as another model than tiny.train: "));
    EXPECT_THAT(m, HasSubstr("the checkpoint's model has 2 x causal_attention(heads=2, "
                             "kv_heads=1) where tiny.train's (with the options given here) "
                             "has 2 x causal_attention(heads=4, kv_heads=2)"));
    EXPECT_THAT(m, Not(HasSubstr("input x")));  // the same in both
    EXPECT_TRUE(IsCheckpointOfAnotherModel(s));
  }
  EXPECT_EQ(*restored.At<float>(0), 0.0f);  // nothing was uploaded
  // Its own model loads; a plan without a signature (an older plan file)
  // takes it on trust.
  EXPECT_TRUE(LoadCheckpoint(path, trained, restored, &state, false).ok());
  plan.model_signature.clear();
  EXPECT_TRUE(LoadCheckpoint(path, plan, restored, &state, false).ok());
}

TEST(CheckpointTest, ACheckpointWithoutASignatureLoadsAsBefore) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("unsigned.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {4, 0, 4}).ok());  // no signature
  plan.model_signature = "1 x linear(bias=true, out_features=2)";
  TrainingState state;
  const absl::Status s = LoadCheckpoint(path, plan, device, &state, false);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(state.step, 4);
}

TEST(CheckpointTest, SgdMomentumBuffer) {
  Plan plan = TinyPlan(OptimizerKind::kSgd);
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("sgd.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {}).ok());
  auto file = SafetensorsFile::Read(TrainingStatePath(path));
  ASSERT_TRUE(file.ok());
  EXPECT_NE(file->Find("optimizer.h1.weight.momentum_buffer"), nullptr);
}

// A checkpoint from before the split: one file, the optimizer state inside.
TEST(CheckpointTest, OldSingleFileCheckpointStillResumes) {
  Plan plan = TinyPlan();
  HostTestDevice saved;
  FillArena(&saved, plan.arena_bytes);
  const std::string split = TempPath("to_merge.safetensors");
  ASSERT_TRUE(SaveCheckpoint(split, plan, saved, {9, 1, 4}).ok());
  auto weights = SafetensorsFile::Read(split);
  auto state = SafetensorsFile::Read(TrainingStatePath(split));
  ASSERT_TRUE(weights.ok() && state.ok());
  std::vector<TensorRef> all;
  for (const SafetensorsFile* f : {&*weights, &*state}) {
    for (const auto& [name, t] : f->tensors()) all.push_back({name, t.dtype, t.shape, f->Data(t)});
  }
  std::map<std::string, std::string> metadata = state->metadata();
  metadata["format"] = "trainc-checkpoint-1";
  metadata.erase("checkpoint_id");
  const std::string old = TempPath("old.safetensors");
  ASSERT_TRUE(WriteSafetensorsFile(old, all, metadata).ok());

  HostTestDevice restored;
  ASSERT_TRUE(restored.AllocateArena(plan.arena_bytes).ok());
  TrainingState position;
  const absl::Status loaded = LoadCheckpoint(old, plan, restored, &position, false);
  ASSERT_TRUE(loaded.ok()) << loaded;
  EXPECT_EQ(position.step, 9);
  EXPECT_EQ(position.step_in_epoch, 4);
  for (int64_t base : {0, 128, 256}) {
    EXPECT_EQ(std::memcmp(saved.At<char>(base), restored.At<char>(base), 24), 0);
  }
}

TEST(CheckpointTest, ResumeNeedsTheTrainingStateWrittenWithTheWeights) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string a = TempPath("pair_a.safetensors"), b = TempPath("pair_b.safetensors");
  ASSERT_TRUE(SaveCheckpoint(a, plan, device, {2, 0, 2}).ok());
  ASSERT_TRUE(SaveCheckpoint(b, plan, device, {3, 0, 3}).ok());
  TrainingState state;

  // Another checkpoint's state beside the weights: refused, naming both.
  std::filesystem::copy_file(TrainingStatePath(b), TrainingStatePath(a),
                             std::filesystem::copy_options::overwrite_existing);
  absl::Status foreign = LoadCheckpoint(a, plan, device, &state, false);
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(foreign.message()),
              HasSubstr("pair_a.train_state.safetensors belongs to another checkpoint than"));

  // No state at all: refused, saying what --init-from would do.
  std::filesystem::remove(TrainingStatePath(a));
  absl::Status missing = LoadCheckpoint(a, plan, device, &state, false);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("its training state " + TrainingStatePath(a) + " is missing"));
  EXPECT_THAT(std::string(missing.message()), HasSubstr("--init-from"));
  // The weights alone still start a run.
  EXPECT_TRUE(LoadCheckpoint(a, plan, device, &state, true).ok());
}

TEST(CheckpointTest, PruneDeletesBothFilesAndOrphanedStates) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string dir = TempPath("prune");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(PrepareCheckpointFolder(dir).ok());
  for (int64_t step : {1, 2, 3}) {
    ASSERT_TRUE(SaveCheckpoint(CheckpointPath(dir, step), plan, device, {step, 0, step}).ok());
  }
  // A run killed between the two renames of step 4 left only its state.
  std::filesystem::copy_file(TrainingStatePath(CheckpointPath(dir, 3)),
                             TrainingStatePath(CheckpointPath(dir, 4)));
  ASSERT_TRUE(PruneCheckpoints(dir, 2).ok());
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    left.push_back(entry.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_THAT(left, ::testing::ElementsAre(
                        "step-00000002.safetensors", "step-00000002.train_state.safetensors",
                        "step-00000003.safetensors", "step-00000003.train_state.safetensors"));
  auto newest = CheckpointsNewestFirst(dir);
  ASSERT_TRUE(newest.ok());
  EXPECT_THAT(*newest, ::testing::ElementsAre(CheckpointPath(dir, 3), CheckpointPath(dir, 2)));
}

TEST(CheckpointTest, WeightsOnlyIgnoresOptimizerStateAndPosition) {
  Plan plan = TinyPlan();
  HostTestDevice saved;
  FillArena(&saved, plan.arena_bytes);
  const std::string path = TempPath("init.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, saved, {7, 2, 2}).ok());
  // Another seed and batch: fine for --init-from.
  plan.seed = 99;
  plan.global_batch = 32;
  HostTestDevice fresh;
  ASSERT_TRUE(fresh.AllocateArena(plan.arena_bytes).ok());
  TrainingState state;
  ASSERT_TRUE(LoadCheckpoint(path, plan, fresh, &state, true).ok());
  EXPECT_EQ(state.step, 0);
  EXPECT_EQ(std::memcmp(saved.At<char>(0), fresh.At<char>(0), 24), 0);
  EXPECT_EQ(*fresh.At<float>(128), 0.0f);  // optimizer state untouched
  // But not for --resume.
  absl::Status resume = LoadCheckpoint(path, plan, fresh, &state, false);
  EXPECT_EQ(resume.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(resume.message(), HasSubstr("resuming would change the data order"));
}

TEST(CheckpointTest, ResumeOnAnotherSplitOfTheSameGlobalBatch) {
  Plan plan = TinyPlan();
  HostTestDevice saved;
  FillArena(&saved, plan.arena_bytes);
  const std::string path = TempPath("split.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, saved, {1, 0, 1}).ok());
  plan.world_size = 1;
  plan.accumulate = 4;
  HostTestDevice other;
  ASSERT_TRUE(other.AllocateArena(plan.arena_bytes).ok());
  TrainingState state;
  EXPECT_TRUE(LoadCheckpoint(path, plan, other, &state, false).ok());
}

TEST(CheckpointTest, MismatchesAreClearErrors) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("mismatch.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {}).ok());
  TrainingState state;

  Plan wider = TinyPlan();
  wider.buffers[wider.parameter_buffers[0]].shape = {3, 2};
  absl::Status shape = LoadCheckpoint(path, wider, device, &state, false);
  EXPECT_THAT(shape.message(),
              HasSubstr("tensor 'h1.weight' is F32[2,3], the plan has F32[3,2]"));
  EXPECT_TRUE(IsCheckpointOfAnotherModel(shape));

  Plan renamed = TinyPlan();
  renamed.buffers[renamed.parameter_buffers[1]].name = "h2.bias";
  renamed.buckets[0].parameters[0] = "h2.bias";
  absl::Status missing = LoadCheckpoint(path, renamed, device, &state, true);
  EXPECT_THAT(missing.message(), HasSubstr("tensor 'h1.bias' is not in the plan"));
  EXPECT_TRUE(IsCheckpointOfAnotherModel(missing));

  Plan sgd = TinyPlan(OptimizerKind::kSgd);
  sgd.optimizer.momentum = 0.9;
  EXPECT_TRUE(LoadCheckpoint(path, sgd, device, &state, true).ok());
  absl::Status no_momentum = LoadCheckpoint(path, sgd, device, &state, false);
  EXPECT_FALSE(no_momentum.ok());
  // Another optimizer's state is not another model.
  EXPECT_FALSE(IsCheckpointOfAnotherModel(no_momentum));
}

// While alive, files this process writes cannot grow past `bytes`: a
// write beyond fails with EFBIG (SIGXFSZ ignored), as on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_;
  sighandler_t old_handler_;
};

// Entries of path's folder named "<file name>.tmp..." (safetensors.cc
// writes path.tmp.XXXXXX, then renames it).
std::vector<std::string> TempFilesOf(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(p.parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) found.push_back(name);
  }
  return found;
}

// A save that fails part-way (the disk fills up) must leave the previous
// checkpoint as it was, loadable, and no temporary file behind.
TEST(CheckpointTest, FailedSaveLeavesThePreviousCheckpointIntact) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("keep.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {3, 1, 2}).ok());
  std::vector<char> saved(plan.arena_bytes);
  std::memcpy(saved.data(), device.At<char>(0), plan.arena_bytes);

  // Training moves on; the next save runs out of space after 64 bytes.
  for (int64_t i = 0; i < plan.arena_bytes / 4; ++i) {
    const float x = 100.0f + i;
    ASSERT_TRUE(device.Upload(i * 4, &x, 4).ok());
  }
  absl::Status failed;
  {
    FileSizeLimit limit(64);
    failed = SaveCheckpoint(path, plan, device, {4, 1, 3});
  }
  ASSERT_FALSE(failed.ok()) << "the save should have hit the file size limit";
  EXPECT_THAT(std::string(failed.message()), HasSubstr("keep.safetensors"));

  HostTestDevice restored;
  ASSERT_TRUE(restored.AllocateArena(plan.arena_bytes).ok());
  TrainingState state;
  const absl::Status load = LoadCheckpoint(path, plan, restored, &state, false);
  ASSERT_TRUE(load.ok()) << "the previous checkpoint is gone or damaged: "
                         << load;
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(state.step_in_epoch, 2);
  for (int64_t base : {0, 128, 256}) {
    EXPECT_EQ(std::memcmp(saved.data() + base, restored.At<char>(base), 24), 0)
        << "at " << base;
  }
  EXPECT_THAT(TempFilesOf(path), ::testing::IsEmpty());
  EXPECT_THAT(TempFilesOf(TrainingStatePath(path)), ::testing::IsEmpty());

  // Once there is room again, the save goes through.
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {4, 1, 3}).ok());
  ASSERT_TRUE(LoadCheckpoint(path, plan, restored, &state, false).ok());
  EXPECT_EQ(state.step, 4);
  EXPECT_EQ(*restored.At<float>(0), 100.0f);
}

TEST(CheckpointTest, SaveIntoAMissingFolderOrOntoAFolderIsAClearError) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string missing = TempPath("no-such-folder/ckpt.safetensors");
  const absl::Status no_folder = SaveCheckpoint(missing, plan, device, {});
  ASSERT_FALSE(no_folder.ok());
  EXPECT_THAT(std::string(no_folder.message()), HasSubstr("no-such-folder/ckpt.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(TempPath("no-such-folder")));

  // A folder where the checkpoint should go: an error, and the folder and
  // what it holds are left alone.
  const std::string folder = TempPath("folder.safetensors");
  std::filesystem::create_directories(folder);
  std::ofstream(folder + "/inside") << "x";
  const absl::Status onto_folder = SaveCheckpoint(folder, plan, device, {});
  ASSERT_FALSE(onto_folder.ok());
  EXPECT_THAT(std::string(onto_folder.message()), HasSubstr("folder.safetensors"));
  EXPECT_TRUE(std::filesystem::is_directory(folder));
  EXPECT_TRUE(std::filesystem::exists(folder + "/inside"));
  EXPECT_THAT(TempFilesOf(folder), ::testing::IsEmpty());
}

TEST(CheckpointTest, TruncatedOrMissingFile) {
  Plan plan = TinyPlan();
  HostTestDevice device;
  FillArena(&device, plan.arena_bytes);
  const std::string path = TempPath("cut.safetensors");
  ASSERT_TRUE(SaveCheckpoint(path, plan, device, {}).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << bytes.substr(0, bytes.size() - 10);
  TrainingState state;
  absl::Status cut = LoadCheckpoint(path, plan, device, &state, false);
  EXPECT_THAT(cut.message(), HasSubstr("truncated"));
  absl::Status none =
      LoadCheckpoint(TempPath("absent.safetensors"), plan, device, &state, false);
  EXPECT_EQ(none.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainc
