#include "compiler/frontend/batch_arithmetic.h"

#include "gtest/gtest.h"

namespace trainc::frontend {
namespace {

using Source = BatchValue::Source;

BatchValue File(int64_t v) { return {v, Source::kFile}; }
BatchValue Flag(int64_t v) { return {v, Source::kFlag}; }

BatchSizes Ok(const BatchRequest& r) {
  auto result = ResolveBatch(r);
  EXPECT_TRUE(std::holds_alternative<BatchSizes>(result))
      << std::get<BatchError>(result).message;
  return std::holds_alternative<BatchSizes>(result) ? std::get<BatchSizes>(result)
                                                    : BatchSizes{};
}

BatchError Error(const BatchRequest& r) {
  auto result = ResolveBatch(r);
  EXPECT_TRUE(std::holds_alternative<BatchError>(result));
  return std::holds_alternative<BatchError>(result) ? std::get<BatchError>(result)
                                                    : BatchError{};
}

TEST(BatchArithmeticTest, InfersGlobalBatch) {
  BatchRequest r;
  r.gpus = File(2);
  r.micro_batch = File(64);
  r.accumulate = File(2);
  EXPECT_EQ(Ok(r).global_batch, 256);
}

TEST(BatchArithmeticTest, InfersEachFactor) {
  BatchRequest r;
  r.global_batch = File(256);
  r.gpus = File(2);
  r.micro_batch = File(64);
  EXPECT_EQ(Ok(r).accumulate, 2);
  r.micro_batch = {};
  r.accumulate = File(4);
  EXPECT_EQ(Ok(r).micro_batch, 32);
  r.gpus = {};
  r.micro_batch = File(32);
  EXPECT_EQ(Ok(r).gpus, 2);
}

TEST(BatchArithmeticTest, Defaults) {
  BatchRequest r;
  r.micro_batch = File(64);
  BatchSizes s = Ok(r);
  EXPECT_EQ(s.gpus, 1);
  EXPECT_EQ(s.accumulate, 1);
  EXPECT_EQ(s.global_batch, 64);
  r.global_batch = File(256);  // accumulate defaults to 1; gpus inferred
  s = Ok(r);
  EXPECT_EQ(s.gpus, 4);
  EXPECT_EQ(s.accumulate, 1);
  BatchRequest only_global;
  only_global.global_batch = File(256);
  s = Ok(only_global);
  EXPECT_EQ(s.micro_batch, 256);
}

TEST(BatchArithmeticTest, ErrorsShowTheArithmetic) {
  BatchRequest r;
  r.global_batch = File(250);
  r.gpus = File(2);
  r.micro_batch = File(64);
  EXPECT_EQ(Error(r).message,
            "global_batch = 250 is not divisible by gpus × micro_batch = 2 × "
            "64 = 128");
  r.accumulate = File(3);
  r.global_batch = File(256);
  EXPECT_EQ(Error(r).message,
            "global_batch = 256 does not equal gpus × micro_batch × accumulate "
            "= 2 × 64 × 3 = 384");
  BatchRequest none;
  EXPECT_EQ(Error(none).blame, BatchField::kMicroBatch);
}

TEST(BatchArithmeticTest, Overflow) {
  BatchRequest r;
  r.gpus = File(int64_t{1} << 40);
  r.micro_batch = File(int64_t{1} << 40);
  EXPECT_NE(Error(r).message.find("does not fit"), std::string::npos);
}

TEST(BatchArithmeticTest, FlagWinsAndFileValueIsReinferred) {
  BatchRequest r;
  r.global_batch = File(256);
  r.gpus = Flag(4);
  r.micro_batch = File(64);
  r.accumulate = File(2);
  BatchSizes s = Ok(r);
  EXPECT_EQ(s.accumulate, 1);
  EXPECT_TRUE(s.dropped);
  EXPECT_EQ(s.dropped_field, BatchField::kAccumulate);
  EXPECT_EQ(s.dropped_value, 2);

  r.accumulate = Flag(4);  // then micro_batch gives way
  r.gpus = File(2);
  s = Ok(r);
  EXPECT_EQ(s.micro_batch, 32);

  r.gpus = Flag(2);
  r.micro_batch = Flag(64);  // all three flags: global_batch gives way
  s = Ok(r);
  EXPECT_EQ(s.global_batch, 512);
}

}  // namespace
}  // namespace trainc::frontend
