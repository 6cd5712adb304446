#include "seqmix/gated_scan.hpp"

#include "test_util.hpp"

namespace seqmix::test {
namespace {

struct ScanCase {
  int64_t B, T, D;
  DType dtype;
  bool gated, with_state;
  Decay decay;
  std::vector<int64_t> cu;  // non-empty: variable length with these offsets (B = 1)
};

// Readable parameter names in test output, e.g. "B2 T63 D5 f32 gated state".
void PrintTo(const ScanCase& c, std::ostream* os) {
  *os << "B" << c.B << " T" << c.T << " D" << c.D << " " << dtype_name(c.dtype) << (c.gated ? " gated" : "")
      << (c.with_state ? " state" : "") << " decay" << static_cast<int>(c.decay) << (c.cu.empty() ? "" : " varlen");
}

struct ScanData {
  HostTensor a, b, z, h0, cu;
  int64_t N;
  GatedScanInputs inputs(const ScanCase& c) const {
    GatedScanInputs in{a, b};
    if (c.gated) in.z = z.view;
    if (c.with_state) in.initial_state = h0.view;
    if (!c.cu.empty()) in.cu_seqlens = cu.view;
    return in;
  }
};

ScanData make_data(const ScanCase& c) {
  const int64_t N = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  const DType state_dtype = c.dtype == DType::f64 ? DType::f64 : DType::f32;
  const std::vector<int64_t> shape{c.B, c.T, c.D};
  return {c.decay == Decay::log     ? uniform(shape, c.dtype, -2.0, -0.01)
          : c.decay == Decay::logit ? uniform(shape, c.dtype, -4.0, 4.0)
                                    : uniform(shape, c.dtype, 0.5, 0.999),
          uniform({c.B, c.T, c.D}, c.dtype), uniform({c.B, c.T, c.D}, c.dtype, -3, 3),
          uniform({N, c.D}, state_dtype), offsets(c.cu.empty() ? std::vector<int64_t>{0, 1} : c.cu), N};
}

struct ForwardResult {
  HostTensor y, hT;
};

ForwardResult run_forward(const ScanCase& c, const ScanData& d, Impl impl) {
  ForwardResult r{poisoned({c.B, c.T, c.D}, c.dtype), poisoned({d.N, c.D}, DType::f32)};
  GatedScanOptions options;
  options.impl = impl;
  options.decay = c.decay;
  gated_scan_forward(d.inputs(c), {r.y.view, r.hT.view}, options);
  return r;
}

class GatedScanForward : public ::testing::TestWithParam<ScanCase> {};

TEST_P(GatedScanForward, FastMatchesOracle) {
  const ScanCase c = GetParam();
  ScanData d = make_data(c);
  auto fast = run_forward(c, d, Impl::fast);
  auto ref = run_forward(c, d, Impl::reference);
  EXPECT_LT(rel_err(fast.y, ref.y), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast.hT, ref.hT), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GatedScanForward,
    ::testing::Values(ScanCase{2, 63, 5, DType::f32, true, true, Decay::direct, {}},
                      ScanCase{1, 1, 7, DType::f32, false, false, Decay::direct, {}},
                      ScanCase{3, 100, 16, DType::bf16, true, false, Decay::log, {}},
                      ScanCase{2, 33, 9, DType::f16, false, true, Decay::logit, {}},
                      ScanCase{1, 50, 4, DType::f32, true, true, Decay::log, {0, 1, 17, 50}},
                      ScanCase{1, 40, 3, DType::bf16, true, true, Decay::direct, {0, 39, 40}}));

TEST(GatedScan, OracleMatchesHandComputedValues) {
  // One channel, two steps: h1 = 0.5·1 + 2 = 2.5, h2 = 0.25·2.5 + 1 = 1.625.
  HostTensor a({1, 2, 1}, DType::f64), b({1, 2, 1}, DType::f64), h0({1, 1}, DType::f64);
  a.set({0.5, 0.25});
  b.set({2.0, 1.0});
  h0.set({1.0});
  HostTensor y = poisoned({1, 2, 1}, DType::f64), hT = poisoned({1, 1}, DType::f64);
  gated_scan_forward({a, b, std::nullopt, h0.view}, {y.view, hT.view});
  EXPECT_DOUBLE_EQ(y.values()[0], 2.5);
  EXPECT_DOUBLE_EQ(y.values()[1], 1.625);
  EXPECT_DOUBLE_EQ(hT.values()[0], 1.625);
}

class GatedScanBackward : public ::testing::TestWithParam<ScanCase> {};

TEST_P(GatedScanBackward, OracleMatchesFiniteDifferences) {
  ScanCase c = GetParam();
  c.dtype = DType::f64;
  ScanData d = make_data(c);
  HostTensor wy = uniform({c.B, c.T, c.D}, DType::f64), ws = uniform({d.N, c.D}, DType::f64);
  GatedScanOptions options;
  options.impl = Impl::reference;
  options.decay = c.decay;
  auto loss = [&] {
    HostTensor y({c.B, c.T, c.D}, DType::f64), hT({d.N, c.D}, DType::f64);
    gated_scan_forward(d.inputs(c), {y.view, hT.view}, options);
    return dot(y.values(), wy.values()) + dot(hT.values(), ws.values());
  };
  HostTensor da = poisoned({c.B, c.T, c.D}, DType::f64), db = poisoned({c.B, c.T, c.D}, DType::f64),
             dz = poisoned({c.B, c.T, c.D}, DType::f64), dh0 = poisoned({d.N, c.D}, DType::f64);
  GatedScanGrads grads{da.view, db.view};
  if (c.gated) grads.dz = dz.view;
  if (c.with_state) grads.d_initial_state = dh0.view;
  gated_scan_backward(d.inputs(c), wy, ws.view, grads, options);
  EXPECT_LT(rel_err(da.values(), finite_difference(d.a, loss)), 1e-7);
  EXPECT_LT(rel_err(db.values(), finite_difference(d.b, loss)), 1e-7);
  if (c.gated) EXPECT_LT(rel_err(dz.values(), finite_difference(d.z, loss)), 1e-7);
  if (c.with_state) EXPECT_LT(rel_err(dh0.values(), finite_difference(d.h0, loss)), 1e-7);
}

TEST_P(GatedScanBackward, FastMatchesOracle) {
  const ScanCase c = GetParam();
  ScanData d = make_data(c);
  HostTensor dy = uniform({c.B, c.T, c.D}, c.dtype), dhT = uniform({d.N, c.D}, DType::f32);
  auto run = [&](Impl impl) {
    std::vector<HostTensor> g;
    for (int i = 0; i < 3; ++i) g.push_back(poisoned({c.B, c.T, c.D}, c.dtype));
    g.push_back(poisoned({d.N, c.D}, DType::f32));
    GatedScanGrads grads{g[0].view, g[1].view};
    if (c.gated) grads.dz = g[2].view;
    if (c.with_state) grads.d_initial_state = g[3].view;
    GatedScanOptions options;
    options.impl = impl;
    options.decay = c.decay;
    gated_scan_backward(d.inputs(c), dy, dhT.view, grads, options);
    return g;
  };
  auto fast = run(Impl::fast), ref = run(Impl::reference);
  EXPECT_LT(rel_err(fast[0], ref[0]), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast[1], ref[1]), tolerance(c.dtype));
  if (c.gated) EXPECT_LT(rel_err(fast[2], ref[2]), tolerance(c.dtype));
  if (c.with_state) EXPECT_LT(rel_err(fast[3], ref[3]), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GatedScanBackward,
    ::testing::Values(ScanCase{2, 9, 3, DType::f32, true, true, Decay::direct, {}},
                      ScanCase{1, 7, 2, DType::f32, false, false, Decay::log, {}},
                      ScanCase{1, 11, 2, DType::bf16, true, true, Decay::logit, {0, 4, 5, 11}}));

TEST(GatedScanErrors, EveryBadInputNamesTheArgument) {
  HostTensor a = uniform({2, 8, 4}, DType::f32), b = uniform({2, 8, 4}, DType::f32);
  HostTensor y({2, 8, 4}, DType::f32);
  HostTensor a_bf16 = uniform({2, 8, 4}, DType::bf16), a_short = uniform({2, 7, 4}, DType::f32);
  HostTensor a_rank2 = uniform({16, 4}, DType::f32), h0_bad = uniform({3, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(gated_scan_forward({a_bf16, b}, {y.view}),
                      "seqmix.gated_scan: argument 'a': expected dtype f32 (the dtype of b), got bf16");
  EXPECT_SEQMIX_ERROR(gated_scan_forward({a_short, b}, {y.view}),
                      "argument 'a': expected shape [2, 8, 4] [B, T, D], got [2, 7, 4]");
  EXPECT_SEQMIX_ERROR(gated_scan_forward({a_rank2, b}, {y.view}),
                      "argument 'a': expected 3 dimensions [B, T, D], got 2 dimensions [16, 4]");
  EXPECT_SEQMIX_ERROR(gated_scan_forward({a, b, std::nullopt, h0_bad.view}, {y.view}),
                      "argument 'initial_state': expected shape [2, 4] [N, D], got [3, 4]");

  Tensor strided = a.view;
  strided.strides = {32, 4, 2};
  EXPECT_SEQMIX_ERROR(gated_scan_forward({strided, b}, {y.view}),
                      "argument 'a': expected stride 1 in the last dimension, got strides [32, 4, 2]");
  Tensor on_gpu = a.view;
  on_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(gated_scan_forward({on_gpu, b}, {y.view}),
                      "argument 'a': expected device cpu (the device of the first input), got cuda:0");

  HostTensor empty_a({2, 0, 4}, DType::f32), empty_b({2, 0, 4}, DType::f32), empty_y({2, 0, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(gated_scan_forward({empty_a, empty_b}, {empty_y.view}),
                      "argument 'T': expected sequence length T >= 1, got sequence length T = 0");
}

TEST(GatedScanErrors, CuSeqlensIsValidated) {
  HostTensor a = uniform({1, 10, 2}, DType::f32), b = uniform({1, 10, 2}, DType::f32), y({1, 10, 2}, DType::f32);
  HostTensor decreasing = offsets({0, 6, 4, 10}), short_end = offsets({0, 4, 9}), empty_seq = offsets({0, 4, 4, 10});
  HostTensor not_zero = offsets({1, 10}), floats({3}, DType::f32);
  auto with_cu = [&](const HostTensor& cu) { return GatedScanInputs{a, b, std::nullopt, std::nullopt, cu.view}; };
  EXPECT_SEQMIX_ERROR(gated_scan_forward(with_cu(decreasing), {y.view}),
                      "argument 'cu_seqlens': expected non-decreasing offsets, got cu_seqlens[2] = 4 < 6");
  EXPECT_SEQMIX_ERROR(gated_scan_forward(with_cu(short_end), {y.view}),
                      "argument 'cu_seqlens': expected last offset equal to the total length 10, got 9");
  EXPECT_SEQMIX_ERROR(gated_scan_forward(with_cu(empty_seq), {y.view}),
                      "argument 'cu_seqlens': expected no empty sequence, got sequence 1 of length 0");
  EXPECT_SEQMIX_ERROR(gated_scan_forward(with_cu(not_zero), {y.view}),
                      "argument 'cu_seqlens': expected cu_seqlens[0] == 0, got 1");
  EXPECT_SEQMIX_ERROR(gated_scan_forward(with_cu(floats), {y.view}),
                      "argument 'cu_seqlens': expected dtype int32 or int64, got f32");

  HostTensor a2 = uniform({2, 5, 2}, DType::f32), b2 = uniform({2, 5, 2}, DType::f32), y2({2, 5, 2}, DType::f32);
  HostTensor cu = offsets({0, 5});
  EXPECT_SEQMIX_ERROR(gated_scan_forward({a2, b2, std::nullopt, std::nullopt, cu.view}, {y2.view}),
                      "expected batch size 1 when cu_seqlens is given, got batch size 2");
}

}  // namespace
}  // namespace seqmix::test
