// The pieces every op stands on: dtype conversions, strided gathers, parallel_for,
// Tensor helpers and impl parsing.
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/half.hpp"
#include "core/parallel.hpp"
#include "seqmix/common.hpp"
#include "test_util.hpp"

namespace seqmix::test {
namespace {

TEST(Half, EveryF16ValueRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = core::f16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(core::float_to_f16(f), bits) << "half bits 0x" << std::hex << bits;
  }
}

TEST(Half, EveryBf16ValueRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = core::bf16_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(core::float_to_bf16(f), bits) << "bf16 bits 0x" << std::hex << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(core::f16_to_float(core::float_to_f16(1.0f + 1.0f / 2048)), 1.0f);                 // tie: even
  EXPECT_EQ(core::f16_to_float(core::float_to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie: up to even
  EXPECT_EQ(core::f16_to_float(core::float_to_f16(65520.0f)), INFINITY);
  EXPECT_EQ(core::f16_to_float(core::float_to_f16(5.96e-8f)), 5.960464477539063e-8f);       // smallest subnormal
  EXPECT_EQ(core::bf16_to_float(core::float_to_bf16(1.0f + 1.0f / 256)), 1.0f);               // tie: even
  EXPECT_EQ(core::bf16_to_float(core::float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(core::bf16_to_float(core::float_to_bf16(NAN))));
}

TEST(Dense, GathersAndScattersStridedViews) {
  HostTensor base({4, 6}, DType::f32);
  std::vector<double> values(24);
  for (int i = 0; i < 24; ++i) values[i] = i;
  base.set(values);
  Tensor transposed = base.view;  // a [6, 4] view of the transpose
  transposed.shape = {6, 4};
  transposed.strides = {1, 6};
  const auto t = core::to_dense<double>(transposed);
  EXPECT_EQ(t[1], 6);   // element [0, 1] is base[1, 0]
  EXPECT_EQ(t[4], 1);   // element [1, 0] is base[0, 1]
  std::vector<double> doubled(t);
  for (double& v : doubled) v *= 2;
  core::from_dense(doubled, transposed);
  EXPECT_EQ(base.values()[7], 14);
}

TEST(Dense, ConvertsBetweenDtypes) {
  HostTensor h({3}, DType::bf16);
  h.set({1.0, -2.5, 1.0 + 1.0 / 512});
  EXPECT_EQ(h.values(), (std::vector<double>{1.0, -2.5, 1.0}));
}

TEST(Dense, CopiesContiguousTensorsOfTheSameDtype) {
  HostTensor t({2, 3}, DType::f32);
  t.set({1, 2, 3, 4, 5, 6});
  std::vector<float> v = core::to_dense<float>(t.view);
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  v[4] = -7;
  core::from_dense(v, t.view);
  EXPECT_EQ(t.values()[4], -7);
  const std::vector<double> widened = core::to_dense<double>(t.view);  // contiguous, other dtype
  EXPECT_EQ(widened[4], -7.0);
}

TEST(Parallel, VisitsEveryIndexOnceAndRethrows) {
  std::vector<std::atomic<int>> hits(1000);
  core::parallel_for(1000, [&](int64_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(core::parallel_for(10, [](int64_t i) { if (i == 7) throw Error("boom"); }), Error);
}

TEST(TensorView, ContiguityAndShapes) {
  HostTensor t({2, 3, 4}, DType::f16);
  EXPECT_TRUE(t.view.is_contiguous());
  EXPECT_EQ(t.view.strides, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.view.numel(), 24);
  Tensor sliced = t.view;
  sliced.shape = {2, 3, 2};
  EXPECT_FALSE(sliced.is_contiguous());
  EXPECT_TRUE(sliced.is_last_dim_contiguous());
  EXPECT_EQ(shape_str({2, 3}), "[2, 3]");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
}

TEST(Impl, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_impl("reference"), Impl::reference);
  EXPECT_EQ(parse_impl("auto"), Impl::automatic);
  EXPECT_SEQMIX_ERROR(parse_impl("gpu"), "argument 'impl': expected one of automatic, reference, fast, got 'gpu'");
}

}  // namespace
}  // namespace seqmix::test
