// The narrow-column kernel (src/cuda/chains/narrow_columns.cuh: a run of at most 64
// activation columns over a deep K, Gated DeltaNet's gates) against the float64 oracle:
// gate-only chains through the public API (bf16 and f32 outputs, bias on and off, one and two
// 32-column slabs, K not a multiple of the kernel's 32-deep chunks), a wide identity chain
// with narrow gates (split around them at any token count), forward and backward; and the
// launcher directly for what the core's checks refuse (widths off 8, unaligned out rows).
// The one-pass narrow-K backward from a single segment's gradient is here too. Every case is
// Small: compute-sanitizer runs them all.
#include <cmath>
#include <cstdlib>
#include <optional>

#include "cuda/chains/narrow_projection.hpp"
#include "cuda/chains/params.hpp"
#include "chains_cuda_util.hpp"

namespace seqmix::test {
namespace {

// Gated DeltaNet's gates (one softplus and one sigmoid column per head, 16 heads); a 40-wide
// mix of every activation (two slabs, the second 8 columns); a wide identity chain with those
// gates at its end (the forward splits it: plain GEMM, then the gates).
const std::vector<ProjectionSegment> kGates = {{16, Activation::softplus, 1.0}, {16, Activation::sigmoid, 1.0}};
const std::vector<ProjectionSegment> kMixed = {{8, Activation::softplus, 1.0},
                                               {8, Activation::sigmoid, 1.0},
                                               {8, Activation::logsigmoid, 16.0},
                                               {16, Activation::silu, 1.0}};
const std::vector<ProjectionSegment> kWideWithGates = {{128, Activation::identity, 1.0},
                                                       {64, Activation::identity, 1.0},
                                                       {16, Activation::softplus, 1.0},
                                                       {16, Activation::sigmoid, 1.0}};

struct ColumnsCase {
  const char* name;
  const std::vector<ProjectionSegment>* segments;
  int64_t M, K;
  bool bias, f32;
};
void PrintTo(const ColumnsCase& c, std::ostream* os) { *os << c.name; }

struct ColumnsInputs {
  const ColumnsCase c;
  const std::vector<ProjectionSegment>& segments = *c.segments;
  const int64_t N = width_of(segments);
  HostTensor x = uniform({c.M, c.K}, DType::bf16), weight = uniform({N, c.K}, DType::bf16, -0.15, 0.15);
  HostTensor bias = uniform({N}, DType::bf16);
  HostTensor x64 = as_f64(x), weight64 = as_f64(weight), bias64 = as_f64(bias);
  DeviceTensor d_x{x}, d_weight{weight}, d_bias{bias};
  ProjectionChainOptions reference;
  explicit ColumnsInputs(const ColumnsCase& c_) : c(c_) { reference.impl = Impl::reference; }
  std::optional<Tensor> host_bias() const { return c.bias ? std::optional<Tensor>(bias64.view) : std::nullopt; }
  std::optional<Tensor> device_bias() const { return c.bias ? std::optional<Tensor>(d_bias.view) : std::nullopt; }
};

// The wide chains' gates on the narrow-column kernel beside a plain GEMM of the identity
// columns (the split the gates-in-GEMM default replaced; SEQMIX_CHAINS_GATES_IN_GEMM=0
// keeps it reachable, and tested here).
class ProjectionChainCudaNarrowColumns : public ::testing::TestWithParam<ColumnsCase> {
 protected:
  void SetUp() override { setenv("SEQMIX_CHAINS_GATES_IN_GEMM", "0", 1); }
  void TearDown() override { unsetenv("SEQMIX_CHAINS_GATES_IN_GEMM"); }
};

// The forward through the public API against the oracle, `calls` times on the same inputs
// (the second call finds the kept column vectors when they are on).
void expect_forward_matches_oracle(const ColumnsCase& c, int calls = 1) {
  ColumnsInputs in(c);
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : in.segments) {
    want.emplace_back(std::vector<int64_t>{in.c.M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  projection_chain_forward(in.x64, in.weight64, in.host_bias(), in.segments, want_views, in.reference);

  for (int call = 0; call < calls; ++call) {
    HostTensor out = poisoned({in.c.M, in.N}, in.c.f32 ? DType::f32 : DType::bf16);
    DeviceTensor d_out(out);
    projection_chain_forward(in.d_x, in.d_weight, in.device_bias(), in.segments,
                             column_views(d_out.view, in.segments));
    // f32 outputs: only the operands' bf16 rounding is shared with the oracle.
    expect_segments_match(d_out.values(out), want, in.segments, in.c.M,
                          in.c.f32 ? 1e-4 : tolerance(DType::bf16));
  }
}

// The backward's recompute of the gates (narrow_columns_derivative_bf16) inside the whole
// chain's backward; the gradients separate bf16 tensors, as autograd hands them over.
void expect_backward_matches_oracle(const ColumnsCase& c) {
  ColumnsInputs in(c);
  std::vector<HostTensor> d_outputs, d_outputs64;
  std::vector<std::unique_ptr<DeviceTensor>> device_d_outputs;
  std::vector<Tensor> host_views, device_views;
  for (const auto& s : in.segments) {
    d_outputs.push_back(uniform({in.c.M, s.width}, DType::bf16));
    d_outputs64.push_back(as_f64(d_outputs.back()));
    device_d_outputs.push_back(std::make_unique<DeviceTensor>(d_outputs.back()));
    host_views.push_back(d_outputs64.back().view);
    device_views.push_back(device_d_outputs.back()->view);
  }
  HostTensor dx64({in.c.M, in.c.K}, DType::f64), dw64({in.N, in.c.K}, DType::f64), db64({in.N}, DType::f64);
  const std::optional<Tensor> host_db = in.c.bias ? std::optional<Tensor>(db64.view) : std::nullopt;
  projection_chain_backward(in.x64, in.weight64, in.host_bias(), in.segments, host_views,
                            {dx64.view, dw64.view, host_db}, in.reference);

  HostTensor dx = poisoned({in.c.M, in.c.K}, DType::bf16), dw = poisoned({in.N, in.c.K}, DType::bf16);
  HostTensor db = poisoned({in.N}, DType::bf16);
  DeviceTensor d_dx(dx), d_dw(dw), d_db(db);
  const std::optional<Tensor> device_db = in.c.bias ? std::optional<Tensor>(d_db.view) : std::nullopt;
  projection_chain_backward(in.d_x, in.d_weight, in.device_bias(), in.segments, device_views,
                            {d_dx.view, d_dw.view, device_db});
  EXPECT_LT(rel_err(d_dx.values(dx), dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(d_dw.values(dw), dw64.values()), tolerance(DType::bf16)) << "dweight";
  if (in.c.bias) EXPECT_LT(rel_err(d_db.values(db), db64.values()), tolerance(DType::bf16)) << "dbias";
}

TEST_P(ProjectionChainCudaNarrowColumns, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_forward_matches_oracle(GetParam());
}

TEST_P(ProjectionChainCudaNarrowColumns, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches_oracle(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ProjectionChainCudaNarrowColumns,
    ::testing::Values(ColumnsCase{"Small_gates_M1_K136_nobias_bf16", &kGates, 1, 136, false, false},
                      ColumnsCase{"Small_gates_M1000_K136_bias_bf16", &kGates, 1000, 136, true, false},
                      ColumnsCase{"Small_gates_M1000_K520_nobias_f32", &kGates, 1000, 520, false, true},
                      ColumnsCase{"Small_mixed_M1000_K64_bias_bf16", &kMixed, 1000, 64, true, false},
                      ColumnsCase{"Small_mixed_M4500_K136_nobias_bf16", &kMixed, 4500, 136, false, false},
                      ColumnsCase{"Small_mixed_M1000_K40_bias_f32", &kMixed, 1000, 40, true, true},
                      ColumnsCase{"Small_wide_M1_K136_nobias_bf16", &kWideWithGates, 1, 136, false, false},
                      ColumnsCase{"Small_wide_M1000_K136_nobias_bf16", &kWideWithGates, 1000, 136, false, false},
                      ColumnsCase{"Small_wide_M4500_K264_nobias_bf16", &kWideWithGates, 4500, 264, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

// The same cases with the gates in the plain GEMM (then activate_columns) and the column
// vectors kept across calls (SEQMIX_CHAINS_GATES_IN_GEMM=1, SEQMIX_CHAINS_CACHED_COLUMNS=1,
// both the defaults; set here so the cases keep their path if a default changes):
// the forward twice (the second call reuses the kept vectors), and the backward; plus a
// chain whose gates start off a multiple of 8, so the activated piece takes in identity
// columns (factor 1) and lanes with mixed codes.
const std::vector<ProjectionSegment> kWideMixedOffEight = {{196, Activation::identity, 1.0},
                                                           {12, Activation::softplus, 1.0},
                                                           {8, Activation::sigmoid, 1.0},
                                                           {12, Activation::logsigmoid, 4.0},
                                                           {8, Activation::silu, 1.0},
                                                           {20, Activation::identity, 1.0}};

class ProjectionChainCudaGatesInGemm : public ::testing::TestWithParam<ColumnsCase> {
 protected:
  void SetUp() override {
    setenv("SEQMIX_CHAINS_GATES_IN_GEMM", "1", 1);
    setenv("SEQMIX_CHAINS_CACHED_COLUMNS", "1", 1);
  }
  void TearDown() override {
    unsetenv("SEQMIX_CHAINS_GATES_IN_GEMM");
    unsetenv("SEQMIX_CHAINS_CACHED_COLUMNS");
  }
};

TEST_P(ProjectionChainCudaGatesInGemm, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_forward_matches_oracle(GetParam(), 2);
}

TEST_P(ProjectionChainCudaGatesInGemm, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_backward_matches_oracle(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ProjectionChainCudaGatesInGemm,
    ::testing::Values(ColumnsCase{"Small_wide_M1_K136_nobias_bf16", &kWideWithGates, 1, 136, false, false},
                      ColumnsCase{"Small_wide_M1000_K136_nobias_bf16", &kWideWithGates, 1000, 136, false, false},
                      ColumnsCase{"Small_offeight_M1000_K40_nobias_bf16", &kWideMixedOffEight, 1000, 40, false,
                                  false},
                      ColumnsCase{"Small_offeight_M63_K72_bias_bf16", &kWideMixedOffEight, 63, 72, true, false},
                      ColumnsCase{"Small_gates_M1000_K136_nobias_f32", &kGates, 1000, 136, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

// The launcher itself, for what the public API's checks refuse: a run 20 columns wide (its
// last lane group 4 columns), out rows 21 elements apart (no 16-byte stores), bias on, every
// activation; forward into bf16 and f32, and the in-place derivative.
TEST(ProjectionChainCudaNarrowColumns, SmallLauncherOddWidthAndStride) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<ProjectionSegment> segments = {{5, Activation::softplus, 1.0},
                                                   {3, Activation::identity, 1.0},
                                                   {4, Activation::logsigmoid, 16.0},
                                                   {6, Activation::silu, 1.0},
                                                   {2, Activation::sigmoid, 1.0}};
  const int64_t M = 777, K = 72, N = 20, ld = 21;
  HostTensor x = uniform({M, K}, DType::bf16), weight = uniform({N, K}, DType::bf16, -0.3, 0.3);
  HostTensor bias = uniform({N}, DType::bf16), dy = uniform({M, ld}, DType::bf16);
  const HostTensor x64 = as_f64(x), weight64 = as_f64(weight), bias64 = as_f64(bias);
  DeviceTensor d_x(x), d_weight(weight);

  // The forward's oracle: the float64 reference.
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : segments) {
    want.emplace_back(std::vector<int64_t>{M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  projection_chain_forward(x64, weight64, bias64.view, segments, want_views, reference);

  // Per-column vectors as the launcher's callers build them: bias, code, scale.
  std::vector<float> vectors(3 * N);
  int64_t c = 0;
  for (const auto& s : segments)
    for (int64_t j = 0; j < s.width; ++j, ++c) {
      vectors[c] = static_cast<float>(bias64.values()[c]);
      vectors[N + c] = static_cast<float>(static_cast<int>(s.activation));
      vectors[2 * N + c] = s.activation == Activation::logsigmoid ? static_cast<float>(1.0 / s.tau) : 1.f;
    }
  HostTensor vector_host({3 * N}, DType::f32);
  vector_host.set(std::vector<double>(vectors.begin(), vectors.end()));
  DeviceTensor d_vectors(vector_host);
  const auto* v = static_cast<const float*>(d_vectors.ptr);
  const cuda::ColumnEpilogue columns{v, v + N, v + 2 * N};
  const cuda::Rows xr{d_x.ptr, K}, wr{d_weight.ptr, K};
  ASSERT_TRUE(cuda::narrow_columns_fit(N, K, xr, wr));

  for (const bool f32 : {false, true}) {
    HostTensor out = poisoned({M, ld}, f32 ? DType::f32 : DType::bf16);
    DeviceTensor d_out(out);
    if (f32) cuda::narrow_columns_f32out(M, N, K, xr, wr, {d_out.ptr, ld}, columns, nullptr);
    else cuda::narrow_columns_bf16(M, N, K, xr, wr, {d_out.ptr, ld}, columns, nullptr);
    const std::vector<double> got = d_out.values(out);
    int64_t first = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      std::vector<double> cols;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < segments[s].width; ++j) cols.push_back(got[i * ld + first + j]);
      EXPECT_LT(rel_err(cols, want[s].values()), f32 ? 1e-4 : tolerance(DType::bf16))
          << (f32 ? "f32" : "bf16") << " segment " << s;
      first += segments[s].width;
    }
    // The padding column past N is never written (still NaN).
    EXPECT_TRUE(std::isnan(got[ld - 1]));
  }

  // The derivative in place, dz = dy ⊙ act'(z)·scale, against dy·act'(z) in float64 on the
  // oracle's z (the same chain with every activation identity), act' written from its
  // definition (activation.cuh's forms; the oracle's backward covers them in test_chains.cpp).
  std::vector<HostTensor> z;
  std::vector<Tensor> z_views;
  std::vector<ProjectionSegment> identity = segments;
  for (auto& s : identity) s.activation = Activation::identity, s.tau = 1.0;
  for (const auto& s : segments) {
    z.emplace_back(std::vector<int64_t>{M, s.width}, DType::f64);
    z_views.push_back(z.back().view);
  }
  projection_chain_forward(x64, weight64, bias64.view, identity, z_views, reference);
  DeviceTensor d_dz(dy);
  cuda::narrow_columns_derivative_bf16(M, N, K, xr, wr, {d_dz.ptr, ld}, columns, nullptr);
  HostTensor dz_host = poisoned({M, ld}, DType::bf16);
  const std::vector<double> got = d_dz.values(dz_host), dy_values = dy.values();
  std::vector<double> got_cols, want_cols;
  int64_t first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const std::vector<double> zs = z[s].values();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < segments[s].width; ++j) {
        const double zz = zs[i * segments[s].width + j], sig = 1.0 / (1.0 + std::exp(-zz));
        double d = 1.0;
        switch (segments[s].activation) {
          case Activation::silu: d = sig * (1.0 + zz * (1.0 - sig)); break;
          case Activation::sigmoid: d = sig * (1.0 - sig); break;
          case Activation::logsigmoid: d = (1.0 - sig) / segments[s].tau; break;
          case Activation::softplus: d = sig; break;
          default: break;
        }
        got_cols.push_back(got[i * ld + first + j]);
        want_cols.push_back(dy_values[i * ld + first + j] * d);
      }
    first += segments[s].width;
  }
  EXPECT_LT(rel_err(got_cols, want_cols), tolerance(DType::bf16)) << "derivative";
  // The column past the run keeps dy.
  for (int64_t i = 0; i < M; i += 97) EXPECT_EQ(got[i * ld + ld - 1], dy_values[i * ld + ld - 1]);
}

// The one-pass narrow-K backward (narrow_fused_backward.cuh, selected here with
// SEQMIX_CHAINS_NARROW_FUSED=1) straight from a single segment's gradient (GLA's low-rank gate: K = 16 from a column view of a wider buffer,
// logsigmoid / 16), with and without bias, 200 columns (a partial 128-column group), and
// one with K = 8 and sigmoid; against the float64 oracle's dx, dweight and dbias.
struct FusedCase {
  const char* name;
  int64_t M, K, N, x_stride;
  Activation activation;
  double tau;
  bool bias;
};
void PrintTo(const FusedCase& c, std::ostream* os) { *os << c.name; }

class ProjectionChainCudaNarrowFused : public ::testing::TestWithParam<FusedCase> {};

TEST_P(ProjectionChainCudaNarrowFused, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const FusedCase c = GetParam();
  const std::vector<ProjectionSegment> segments = {{c.N, c.activation, c.tau}};
  HostTensor x_buffer = uniform({c.M, c.x_stride}, DType::bf16), weight = uniform({c.N, c.K}, DType::bf16, -0.5, 0.5);
  HostTensor bias = uniform({c.N}, DType::bf16), dy = uniform({c.M, c.N}, DType::bf16);
  const int64_t column = c.x_stride - c.K;
  auto columns_of = [&](Tensor buffer) {
    buffer.data = static_cast<char*>(buffer.data) + column * 2;
    buffer.shape = {c.M, c.K};
    return buffer;
  };
  HostTensor x64({c.M, c.K}, DType::f64);
  x64.set(core::to_dense<double>(columns_of(x_buffer.view)));
  const HostTensor weight64 = as_f64(weight), bias64 = as_f64(bias), dy64 = as_f64(dy);
  HostTensor dx64({c.M, c.K}, DType::f64), dw64({c.N, c.K}, DType::f64), db64({c.N}, DType::f64);
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  const std::optional<Tensor> host_bias = c.bias ? std::optional<Tensor>(bias64.view) : std::nullopt;
  const std::optional<Tensor> host_db = c.bias ? std::optional<Tensor>(db64.view) : std::nullopt;
  projection_chain_backward(x64, weight64, host_bias, segments, {dy64.view}, {dx64.view, dw64.view, host_db},
                            reference);

  DeviceTensor d_x(x_buffer), d_weight(weight), d_bias(bias), d_dy(dy);
  HostTensor dx = poisoned({c.M, c.K}, DType::bf16), dw = poisoned({c.N, c.K}, DType::bf16);
  HostTensor db = poisoned({c.N}, DType::bf16);
  DeviceTensor d_dx(dx), d_dw(dw), d_db(db);
  const std::optional<Tensor> device_bias = c.bias ? std::optional<Tensor>(d_bias.view) : std::nullopt;
  const std::optional<Tensor> device_db = c.bias ? std::optional<Tensor>(d_db.view) : std::nullopt;
  setenv("SEQMIX_CHAINS_NARROW_FUSED", "1", 1);  // off by default (slower, NOTES.md)
  projection_chain_backward(columns_of(d_x.view), d_weight.view, device_bias, segments, {d_dy.view},
                            {d_dx.view, d_dw.view, device_db});
  unsetenv("SEQMIX_CHAINS_NARROW_FUSED");
  EXPECT_LT(rel_err(d_dx.values(dx), dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(d_dw.values(dw), dw64.values()), tolerance(DType::bf16)) << "dweight";
  if (c.bias) EXPECT_LT(rel_err(d_db.values(db), db64.values()), tolerance(DType::bf16)) << "dbias";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ProjectionChainCudaNarrowFused,
    ::testing::Values(FusedCase{"Small_M1_K16_N200_nobias", 1, 16, 200, 40, Activation::logsigmoid, 16.0, false},
                      FusedCase{"Small_M1000_K16_N200_nobias", 1000, 16, 200, 40, Activation::logsigmoid, 16.0, false},
                      FusedCase{"Small_M1000_K16_N200_bias", 1000, 16, 200, 24, Activation::logsigmoid, 16.0, true},
                      FusedCase{"Small_M777_K8_N136_bias_sigmoid", 777, 8, 136, 8, Activation::sigmoid, 1.0, true},
                      FusedCase{"Small_M3000_K16_N1024_nobias", 3000, 16, 1024, 24, Activation::logsigmoid, 16.0,
                                false}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace seqmix::test
