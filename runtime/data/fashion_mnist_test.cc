// Reads the real Fashion-MNIST from Debian's dataset-fashion-mnist, when
// installed.
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "runtime/data/dataset.h"
#include "runtime/data/sampler.h"

namespace trainc {
namespace {

constexpr char kDir[] = "/usr/share/datasets/fashion-mnist/";

bool Present() {
  return access((std::string(kDir) + "train-images-idx3-ubyte.gz").c_str(),
                R_OK) == 0;
}

TEST(FashionMnistTest, LoadsTrainAndTestSets) {
  if (!Present()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const std::string d = kDir;
  auto train = LoadIdxDataset(d + "train-images-idx3-ubyte.gz",
                              d + "train-labels-idx1-ubyte.gz", 1.0 / 255);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(train->feature_dim(), 784);
  int counts[10] = {};
  for (int64_t i = 0; i < train->size(); ++i) {
    ASSERT_GE(train->label(i), 0);
    ASSERT_LT(train->label(i), 10);
    ++counts[train->label(i)];
  }
  for (int c : counts) EXPECT_EQ(c, 6000);  // balanced classes
  std::vector<float> first(train->feature_dim());
  train->CopyFeatures(0, first.data());
  for (float x : first) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LE(x, 1.0f);
  }

  auto test = LoadIdxDataset(d + "t10k-images-idx3-ubyte.gz",
                             d + "t10k-labels-idx1-ubyte.gz", 1.0 / 255);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);

  BatchConfig config;
  config.world_size = 2;
  config.accumulate = 2;
  config.micro_batch = 64;
  auto planner = BatchPlanner::Create(train->size(), config);
  ASSERT_TRUE(planner.ok());
  EXPECT_EQ(planner->steps_per_epoch(), 234);  // 60000 / 256, 96 dropped
}

}  // namespace
}  // namespace trainc
