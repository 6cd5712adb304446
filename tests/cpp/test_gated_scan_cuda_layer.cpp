// The gated-scan layer kernel against a float64 oracle written from the definition
// (u = x·Wᵀ, then the scan token by token). Cases named Small* run under compute-sanitizer.
#include <cmath>

#include "cuda_util.hpp"
#include "seqmix/gated_scan_layer.hpp"

namespace seqmix::test {
namespace {

struct LayerCase {
  const char* name;
  int64_t B, T, d, D;
  DType dtype;
  Decay decay;
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

// y [B, T, D] in float64 from the stored x and W.
std::vector<double> oracle(const LayerCase& c, const std::vector<double>& x, const std::vector<double>& w) {
  std::vector<double> y(c.B * c.T * c.D);
  std::vector<double> u(3 * c.D);
  for (int64_t b = 0; b < c.B; ++b) {
    std::vector<double> h(c.D, 0.0);
    for (int64_t t = 0; t < c.T; ++t) {
      const double* xr = &x[(b * c.T + t) * c.d];
      for (int64_t j = 0; j < 3 * c.D; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < c.d; ++k) sum += xr[k] * w[j * c.d + k];
        u[j] = sum;
      }
      for (int64_t i = 0; i < c.D; ++i) {
        const double a = u[i];
        const double decay = c.decay == Decay::log ? std::exp(a) : c.decay == Decay::logit ? 1 / (1 + std::exp(-a)) : a;
        h[i] = decay * h[i] + u[c.D + i];
        const double z = u[2 * c.D + i];
        y[(b * c.T + t) * c.D + i] = h[i] * z / (1 + std::exp(-z));
      }
    }
  }
  return y;
}

class GatedScanLayerCuda : public ::testing::TestWithParam<LayerCase> {};

TEST_P(GatedScanLayerCuda, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const LayerCase c = GetParam();
  ASSERT_TRUE(gated_scan_layer_fits(c.B, c.T, c.D, c.dtype)) << "grid larger than the GPU";
  // u's entries have a standard deviation of about 0.6: decays spread over (0.2, 0.85)
  // as logits; as logs, W's a rows are shifted so exp(a) stays mostly below 1.
  const double scale = std::sqrt(3.0 / c.d);
  HostTensor x = uniform({c.B, c.T, c.d}, c.dtype), w = uniform({3 * c.D, c.d}, c.dtype, -scale, scale);
  if (c.decay == Decay::log) {
    std::vector<double> v = w.values();
    for (int64_t i = 0; i < c.D * c.d; ++i) v[i] = 0.3 * v[i];
    w.set(v);
    std::vector<double> xv = x.values();  // a constant feature pulls every log decay below 0
    for (int64_t r = 0; r < c.B * c.T; ++r) xv[r * c.d] = 1.0;
    x.set(xv);
    std::vector<double> wv = w.values();
    for (int64_t i = 0; i < c.D; ++i) wv[i * c.d] = -0.4;
    w.set(wv);
  }
  HostTensor y = poisoned({c.B, c.T, c.D}, c.dtype);
  HostTensor workspace = poisoned({gated_scan_layer_workspace_size(c.B, c.T, c.D)}, DType::f32);
  DeviceTensor d_x(x), d_w(w), d_y(y), d_ws(workspace);
  GatedScanLayerOptions options;
  options.decay = c.decay;
  gated_scan_layer_forward(d_x, d_w, d_y, d_ws, options);
  const std::vector<double> want = oracle(c, x.values(), w.values());
  EXPECT_LT(rel_err(d_y.values(y), want), tolerance(c.dtype));

  // The same launch again on the same buffers gives the same bits (no race on the workspace).
  const std::vector<double> first = y.values();
  gated_scan_layer_forward(d_x, d_w, d_y, d_ws, options);
  EXPECT_EQ(d_y.values(y), first);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GatedScanLayerCuda,
    ::testing::Values(LayerCase{"SmallUnevenShapes", 2, 100, 72, 24, DType::bf16, Decay::logit},
                      LayerCase{"SmallOneToken", 1, 1, 8, 1, DType::bf16, Decay::logit},
                      LayerCase{"SmallLogDecayF16", 3, 200, 64, 40, DType::f16, Decay::log},
                      LayerCase{"LayerB16T512", 16, 512, 256, 64, DType::bf16, Decay::logit},
                      LayerCase{"LayerB4T2048", 4, 2048, 256, 64, DType::bf16, Decay::logit}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace seqmix::test
