// blocked_pool.h's max pooling against oneDNN's own kernels on the same
// nChw16c and nChw8c images: output, workspace and gradient bit for bit, with ties
// (relu's zeros, repeated values, -0 beside +0), windows of 2 and 3 and
// rows and columns no window covers.
#include "runtime/cpu/blocked_pool.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "runtime/cpu/dnnl_ops.h"

namespace trainc::cpu {
namespace {

using dnnl::memory;

struct Images {
  std::vector<float> x, y, dy, dx;
  std::vector<uint8_t> argmax;
};

// oneDNN's forward and backward max pooling of x over g.
Images OneDnn(const WindowGeometry& g, int64_t block, const std::vector<float>& x,
              const std::vector<float>& dy) {
  const memory::format_tag tag =
      block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc src({g.n, g.c, g.h, g.w}, memory::data_type::f32, tag);
  const memory::desc dst({g.n, g.c, g.oh, g.ow}, memory::data_type::f32, tag);
  const memory::dims window = {g.kh, g.kw}, stride = {g.stride, g.stride}, pad = {0, 0};
  dnnl::pooling_forward::primitive_desc fwd(
      {dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max, src, dst, stride,
       window, pad, pad},
      engine);
  dnnl::pooling_backward::primitive_desc bwd(
      {dnnl::algorithm::pooling_max, src, dst, stride, window, pad, pad}, engine, fwd);
  Images r{x, std::vector<float>(dy.size()), dy, std::vector<float>(x.size()),
           std::vector<uint8_t>(fwd.workspace_desc().get_size())};
  memory mx(src, engine, r.x.data()), my(dst, engine, r.y.data());
  memory mdy(dst, engine, r.dy.data()), mdx(src, engine, r.dx.data());
  memory ws(fwd.workspace_desc(), engine, r.argmax.data());
  dnnl::pooling_forward(fwd).execute(
      stream, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_DST, my}, {DNNL_ARG_WORKSPACE, ws}});
  dnnl::pooling_backward(bwd).execute(
      stream, {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_SRC, mdx}, {DNNL_ARG_WORKSPACE, ws}});
  stream.wait();
  return r;
}

WindowGeometry Pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k) {
  WindowGeometry g;
  g.n = n, g.c = c, g.o = c, g.h = h, g.w = w, g.kh = k, g.kw = k, g.stride = k;
  g.oh = (h - k) / k + 1, g.ow = (w - k) / k + 1;
  return g;
}

void ExpectOneDnnBits(const WindowGeometry& g, int64_t block) {
  SCOPED_TRACE(block);
  ASSERT_TRUE(BlockedMaxPoolRuns(g, block));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, 7);
  std::vector<float> x(g.n * g.c * g.h * g.w), dy(g.n * g.c * g.oh * g.ow);
  // Few distinct values, half of them relu's zeros: ties in most windows.
  const float values[8] = {0.0f, 0.0f, -0.0f, 0.0f, 0.5f, 0.5f, -1.0f, 2.0f};
  for (float& v : x) v = values[pick(rng)];
  for (float& v : dy) v = static_cast<float>(pick(rng)) - 3.5f;
  const Images want = OneDnn(g, block, x, dy);
  std::vector<float> y(dy.size()), dx(x.size(), 7.0f);
  std::vector<uint8_t> argmax(dy.size());
  BlockedMaxPoolForward(g, block, x.data(), y.data(), argmax.data());
  BlockedMaxPoolBackward(g, block, dy.data(), argmax.data(), dx.data());
  ASSERT_EQ(want.argmax.size(), argmax.size());
  EXPECT_EQ(std::memcmp(want.y.data(), y.data(), y.size() * 4), 0);
  EXPECT_EQ(want.argmax, argmax);
  EXPECT_EQ(std::memcmp(want.dx.data(), dx.data(), dx.size() * 4), 0);
}

// Blocks of 16 where oneDNN runs AVX-512 (ChannelBlock), of 8 wherever
// the CPU has AVX2.
TEST(BlockedPool, OneDnnBitForBit) {
  std::vector<int64_t> blocks;
  if (ChannelBlock() == 16) blocks.push_back(16);
  if (__builtin_cpu_supports("avx2")) blocks.push_back(8);
  if (blocks.empty()) GTEST_SKIP() << "needs AVX2";
  for (int64_t block : blocks) {
    ExpectOneDnnBits(Pool(3, 32, 28, 28, 2), block);  // fashion_cnn's first pooling
    ExpectOneDnnBits(Pool(2, 16, 7, 9, 2), block);    // a row and a column left over
    ExpectOneDnnBits(Pool(2, 48, 9, 8, 3), block);    // windows of 3, two columns left
  }
}

TEST(BlockedPool, TakesNonOverlappingSquareWindowsOnly) {
  EXPECT_TRUE(BlockedMaxPoolRuns(Pool(1, 16, 8, 8, 2), 16));
  EXPECT_FALSE(BlockedMaxPoolRuns(Pool(1, 24, 8, 8, 2), 16));  // a partial block
  EXPECT_FALSE(BlockedMaxPoolRuns(Pool(1, 16, 8, 8, 2), 4));   // no such kernels
  WindowGeometry overlapping = Pool(1, 16, 8, 8, 3);
  overlapping.stride = 2, overlapping.oh = 3, overlapping.ow = 3;
  EXPECT_FALSE(BlockedMaxPoolRuns(overlapping, 16));
  WindowGeometry padded = Pool(1, 16, 8, 8, 2);
  padded.padding = 1, padded.oh = 5, padded.ow = 5;
  EXPECT_FALSE(BlockedMaxPoolRuns(padded, 16));
}

}  // namespace
}  // namespace trainc::cpu
