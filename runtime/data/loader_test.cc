#include "runtime/data/loader.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data/host_test_device.h"

namespace trainc {
namespace {

using ::testing::HasSubstr;

// 5 examples of 3 features: example i is {i, i + 0.5, i + 0.25}, label 9 - i.
Dataset Tiny() {
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 5; ++i) {
    features.insert(features.end(), {i + 0.0f, i + 0.5f, i + 0.25f});
    labels.push_back(9 - i);
  }
  return Dataset(3, std::move(features), std::move(labels));
}

Buffer MakeBuffer(int id, const char* name, BufferKind kind, DType dtype,
                  std::vector<int64_t> shape, int64_t offset) {
  Buffer b;
  b.id = id;
  b.name = name;
  b.kind = kind;
  b.dtype = dtype;
  b.shape = std::move(shape);
  b.offset = offset;
  b.bytes = 4;
  for (int64_t d : b.shape) b.bytes *= d;
  return b;
}

Plan PlanWith(std::vector<Buffer> inputs) {
  Plan plan;
  plan.micro_batch = 2;
  for (Buffer& b : inputs) {
    b.id = plan.buffers.size();
    plan.input_buffers.push_back(b.id);
    plan.buffers.push_back(b);
  }
  plan.arena_bytes = 1024;
  return plan;
}

TEST(LoaderTest, FillsFeaturesAndClassIndex) {
  Dataset data = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 3}, 64),
       MakeBuffer(0, "class", BufferKind::kLabel, DType::kI32, {2}, 128)});
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  MicroBatchLoader loader(&data);
  ASSERT_TRUE(loader.Validate(plan).ok());
  std::vector<int64_t> indices = {4, 1};
  ASSERT_TRUE(loader.Fill(indices, plan, device).ok());
  const float* x = device.At<float>(64);
  EXPECT_EQ(std::vector<float>(x, x + 6),
            (std::vector<float>{4, 4.5, 4.25, 1, 1.5, 1.25}));
  EXPECT_EQ(device.At<int32_t>(128)[0], 5);
  EXPECT_EQ(device.At<int32_t>(128)[1], 8);
}

TEST(LoaderTest, ShortBatchIsZeroPadded) {
  Dataset data = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 3}, 0)});
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  MicroBatchLoader loader(&data);
  std::vector<int64_t> full = {3, 4}, partial = {2};
  ASSERT_TRUE(loader.Fill(full, plan, device).ok());
  ASSERT_TRUE(loader.Fill(partial, plan, device).ok());
  const float* x = device.At<float>(0);
  EXPECT_EQ(std::vector<float>(x, x + 6),
            (std::vector<float>{2, 2.5, 2.25, 0, 0, 0}));
}

TEST(LoaderTest, FloatLabelOfFeatureWidthIsTheImage) {
  Dataset data = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 3}, 0),
       MakeBuffer(0, "target", BufferKind::kLabel, DType::kF32, {2, 3}, 64)});
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  std::vector<int64_t> indices = {0, 2};
  ASSERT_TRUE(FillMicroBatch(data, indices, plan, device).ok());
  EXPECT_EQ(device.At<float>(64)[3], 2.0f);
}

TEST(LoaderTest, MismatchedBufferIsNamed) {
  Dataset data = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 784}, 0)});
  MicroBatchLoader loader(&data);
  absl::Status status = loader.Validate(plan);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("input buffer 'image'"));
  EXPECT_THAT(status.message(), HasSubstr("3 features"));
}

TEST(LoaderTest, TooManyExamplesOrOutOfRange) {
  Dataset data = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 3}, 0)});
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  std::vector<int64_t> three = {0, 1, 2}, bad = {0, 5};
  EXPECT_FALSE(FillMicroBatch(data, three, plan, device).ok());
  EXPECT_FALSE(FillMicroBatch(data, bad, plan, device).ok());
}

// Tokens 100, 101, ..., 100 + n - 1 as windows of `context`.
Dataset Counting(int n, int64_t context) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(100 + i);
  return Dataset::TokenWindows(std::move(tokens), context);
}

TEST(LoaderTest, TokenWindowsFillInputsAndShiftedTargets) {
  Dataset data = Counting(14, 4);  // windows [100..104] [104..108] [108..112]
  ASSERT_EQ(data.size(), 3);
  Plan plan = PlanWith(
      {MakeBuffer(0, "tokens", BufferKind::kInput, DType::kI32, {2, 4}, 0),
       MakeBuffer(0, "next", BufferKind::kLabel, DType::kI32, {2, 4}, 64)});
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  MicroBatchLoader loader(&data);
  ASSERT_TRUE(loader.Validate(plan).ok()) << loader.Validate(plan);
  std::vector<int64_t> indices = {2, 0};
  ASSERT_TRUE(loader.Fill(indices, plan, device).ok());
  const int32_t* x = device.At<int32_t>(0);
  const int32_t* y = device.At<int32_t>(64);
  EXPECT_EQ(std::vector<int32_t>(x, x + 8),
            (std::vector<int32_t>{108, 109, 110, 111, 100, 101, 102, 103}));
  EXPECT_EQ(std::vector<int32_t>(y, y + 8),
            (std::vector<int32_t>{109, 110, 111, 112, 101, 102, 103, 104}));
  // A short batch zeroes the rest; the last window is in range, one more not.
  std::vector<int64_t> last = {2}, past = {3};
  ASSERT_TRUE(loader.Fill(last, plan, device).ok());
  EXPECT_EQ(y[3], 112);
  EXPECT_EQ(y[4], 0);
  EXPECT_FALSE(loader.Fill(past, plan, device).ok());
}

TEST(LoaderTest, TokenWindowsNameAMismatchedBuffer) {
  Dataset data = Counting(20, 4);
  for (const Buffer& bad :
       {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 4}, 0),
        MakeBuffer(0, "tokens", BufferKind::kInput, DType::kI32, {2, 8}, 0),
        MakeBuffer(0, "class", BufferKind::kLabel, DType::kI32, {2}, 0)}) {
    Plan plan = PlanWith({bad});
    absl::Status status = MicroBatchLoader(&data).Validate(plan);
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("input buffer '", bad.name, "'")));
    EXPECT_THAT(status.message(), HasSubstr("input i32[B,4] (the tokens)"));
  }
  // And an idx data set does not serve token buffers.
  Dataset tiny = Tiny();
  Plan plan = PlanWith(
      {MakeBuffer(0, "tokens", BufferKind::kInput, DType::kI32, {2, 3}, 0)});
  EXPECT_FALSE(MicroBatchLoader(&tiny).Validate(plan).ok());
}

TEST(TrainBatchSourceTest, ServesTokenWindows) {
  Dataset data = Counting(41, 4);  // 10 windows
  Plan plan = PlanWith(
      {MakeBuffer(0, "tokens", BufferKind::kInput, DType::kI32, {2, 4}, 0),
       MakeBuffer(0, "next", BufferKind::kLabel, DType::kI32, {2, 4}, 64)});
  plan.world_size = 2;
  plan.accumulate = 2;
  plan.global_batch = 8;
  plan.seed = 3;
  auto source = TrainBatchSource::Create(&data, plan, /*rank=*/0);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->steps_per_epoch(), 1);
  BatchConfig config;
  config.world_size = 2;
  config.accumulate = 2;
  config.micro_batch = 2;
  config.seed = 3;
  auto planner = BatchPlanner::Create(10, config);
  ASSERT_TRUE(planner.ok());
  auto expected = planner->MicroBatchIndices(1, 0, 0, 1);
  ASSERT_TRUE(expected.ok());
  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  (*source)->SetPosition(1, 0);
  ASSERT_TRUE((*source)->Fill(1, plan, device).ok());
  for (int r = 0; r < 2; ++r) {
    const int32_t first = 100 + 4 * static_cast<int32_t>((*expected)[r]);
    EXPECT_EQ(device.At<int32_t>(0)[4 * r], first);
    EXPECT_EQ(device.At<int32_t>(64)[4 * r + 3], first + 4);
  }
}

// A device that hands out a buffer of its own to gather into (as the CUDA
// device does with its pinned input slots), still holding the last batch.
class BufferingDevice : public HostTestDevice {
 public:
  void* UploadBuffer(int64_t bytes) override {
    buffer.assign(bytes, 0x5a);  // dirty: padding rows must be zeroed
    return buffer.data();
  }
  absl::Status Upload(int64_t offset, const void* src, int64_t bytes) override {
    in_place += src == buffer.data();
    return HostTestDevice::Upload(offset, src, bytes);
  }
  std::vector<char> buffer;
  int in_place = 0;
};

// The loader gathers straight into the device's buffer (no copy of its
// own) and uploads from there: the same rows, padding zeroed.
TEST(LoaderTest, GathersIntoTheDevicesUploadBuffer) {
  Dataset data = Tiny();
  Plan plan = PlanWith({MakeBuffer(0, "x", BufferKind::kInput, DType::kF32, {3, 3}, 0),
                        MakeBuffer(1, "y", BufferKind::kLabel, DType::kI32, {3}, 64)});
  HostTestDevice plain;
  BufferingDevice buffering;
  for (Device* device : {static_cast<Device*>(&plain), static_cast<Device*>(&buffering)}) {
    ASSERT_TRUE(device->AllocateArena(plan.arena_bytes).ok());
    ASSERT_TRUE(FillMicroBatch(data, {1, 0}, plan, *device).ok());  // 2 of 3 rows
  }
  EXPECT_EQ(buffering.in_place, 2);
  EXPECT_EQ(std::vector<char>(plain.arena(), plain.arena() + plan.arena_bytes),
            std::vector<char>(buffering.arena(), buffering.arena() + plan.arena_bytes));
  EXPECT_EQ(buffering.At<float>(0)[8], 0.0f);  // the padding row
}

TEST(TrainBatchSourceTest, FillsThisRanksMicroBatches) {
  // 10 examples of 3 features, example i has label i % 10.
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 10; ++i) {
    features.insert(features.end(), {i + 0.0f, 0.0f, 0.0f});
    labels.push_back(i);
  }
  Dataset data(3, std::move(features), std::move(labels));
  Plan plan = PlanWith(
      {MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 3}, 0),
       MakeBuffer(0, "class", BufferKind::kLabel, DType::kI32, {2}, 64)});
  plan.world_size = 2;
  plan.accumulate = 2;
  plan.seed = 1;
  auto source = TrainBatchSource::Create(&data, plan, /*rank=*/1);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->steps_per_epoch(), 1);  // 8 per step, 2 dropped

  BatchConfig config;
  config.world_size = 2;
  config.accumulate = 2;
  config.micro_batch = 2;
  config.seed = 1;
  auto planner = BatchPlanner::Create(10, config);
  ASSERT_TRUE(planner.ok());
  auto expected = planner->MicroBatchIndices(3, 0, 1, 1);
  ASSERT_TRUE(expected.ok());

  HostTestDevice device;
  ASSERT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  (*source)->SetPosition(3, 0);
  ASSERT_TRUE((*source)->Fill(1, plan, device).ok());
  EXPECT_EQ(device.At<int32_t>(64)[0], (*expected)[0]);
  EXPECT_EQ(device.At<int32_t>(64)[1], (*expected)[1]);
  EXPECT_EQ(device.At<float>(0)[3], static_cast<float>((*expected)[1]));
  EXPECT_FALSE((*source)->Fill(2, plan, device).ok());
  EXPECT_FALSE(TrainBatchSource::Create(&data, plan, 2).ok());

  // Two steps' views of the one source keep their own positions: run step
  // 4 (epoch 3 at one step per epoch) after a fill of step 5 through the
  // other view gives the same rows.
  StepBatches step4((*source).get()), step5((*source).get());
  step4.SetStep(4);
  step5.SetStep(5);
  ASSERT_TRUE(step5.Fill(1, plan, device).ok());
  const int32_t fifth = device.At<int32_t>(64)[0];
  ASSERT_TRUE(step4.Fill(1, plan, device).ok());
  EXPECT_EQ(device.At<int32_t>(64)[0], (*expected)[0]);
  EXPECT_EQ(device.At<int32_t>(64)[1], (*expected)[1]);
  auto in_epoch4 = planner->MicroBatchIndices(4, 0, 1, 1);
  ASSERT_TRUE(in_epoch4.ok());
  EXPECT_EQ(fifth, (*in_epoch4)[0]);
}

}  // namespace
}  // namespace trainc

namespace trainc {
namespace {

// 8 images 1 x 2 x 3 (example i holds i*10 + 1 .. i*10 + 6) through a
// plan of `gpus` x `accumulate` x 2: what rank r's micro-step m loads.
std::vector<float> AugmentedRows(int gpus, int accumulate, int rank, int micro) {
  std::vector<float> features;
  std::vector<int32_t> labels;
  for (int i = 0; i < 8; ++i) {
    for (int p = 1; p <= 6; ++p) features.push_back(i * 10.0f + p);
    labels.push_back(i % 3);
  }
  Dataset data(6, std::move(features), std::move(labels));
  Plan plan = PlanWith({MakeBuffer(0, "image", BufferKind::kInput, DType::kF32, {2, 1, 2, 3}, 0)});
  plan.world_size = gpus;
  plan.accumulate = accumulate;
  plan.global_batch = 4;
  plan.seed = 5;
  plan.data.shuffle = false;
  plan.data.random_crop = 1;
  plan.data.random_flip = true;
  auto source = TrainBatchSource::Create(&data, plan, rank);
  EXPECT_TRUE(source.ok()) << source.status();
  HostTestDevice device;
  EXPECT_TRUE(device.AllocateArena(plan.arena_bytes).ok());
  (*source)->SetPosition(/*epoch=*/1, /*step_in_epoch=*/1);  // step 4 of the run
  EXPECT_TRUE((*source)->Fill(micro, plan, device).ok());
  const float* x = device.At<float>(0);
  return std::vector<float>(x, x + 12);
}

// Augmentation is a function of the example's place in the run: the rows
// of global micro-batch k are the same whichever rank and micro-step load
// them, and they differ from the unaugmented images.
TEST(LoaderTest, AugmentationDoesNotDependOnTheSplit) {
  std::vector<float> one_rank, two_ranks;
  for (int m = 0; m < 2; ++m) {
    std::vector<float> a = AugmentedRows(1, 2, 0, m), b = AugmentedRows(2, 1, m, 0);
    one_rank.insert(one_rank.end(), a.begin(), a.end());
    two_ranks.insert(two_ranks.end(), b.begin(), b.end());
  }
  EXPECT_EQ(one_rank, two_ranks);
  // Step 4 (0-based 3) holds examples 4..7 unshuffled; at least one of the
  // four is moved or mirrored.
  std::vector<float> plain;
  for (int i = 4; i < 8; ++i) {
    for (int p = 1; p <= 6; ++p) plain.push_back(i * 10.0f + p);
  }
  EXPECT_NE(one_rank, plain);
}

TEST(LoaderTest, AugmentationNeedsAnImageInput) {
  Dataset data = Tiny();
  Plan plan = PlanWith({MakeBuffer(0, "x", BufferKind::kInput, DType::kF32, {2, 3}, 0)});
  plan.global_batch = 2;
  plan.data.random_flip = true;
  auto source = TrainBatchSource::Create(&data, plan, 0);
  ASSERT_FALSE(source.ok());
  EXPECT_THAT(std::string(source.status().message()), HasSubstr("need an image input"));
}

}  // namespace
}  // namespace trainc
