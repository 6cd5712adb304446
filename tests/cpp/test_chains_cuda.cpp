// The projection chain's fused CUDA GEMM (src/cuda/chains) against the float64 oracle.
// It is called directly: src/core does not dispatch to it until it has run on a GPU.
// Cases named Small* are the ones the GPU check runs under compute-sanitizer.
#include <optional>

#include "cuda/chains/params.hpp"
#include "cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {
namespace {

struct ProjectionCase {
  const char* name;
  int64_t M, K;
  bool bias;
};

void PrintTo(const ProjectionCase& c, std::ostream* os) { *os << c.name; }

class ProjectionGemmCuda : public ::testing::TestWithParam<ProjectionCase> {};

// One segment of every activation (widths that are not tile multiples), tau = 16 for the
// log-sigmoid gate as in fla's GLA.
const std::vector<ProjectionSegment> kSegments = {{64, Activation::identity, 1.0},
                                                  {48, Activation::silu, 1.0},
                                                  {40, Activation::sigmoid, 1.0},
                                                  {56, Activation::logsigmoid, 16.0},
                                                  {32, Activation::softplus, 1.0}};

TEST_P(ProjectionGemmCuda, MatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ProjectionCase c = GetParam();
  int64_t N = 0;
  for (const auto& s : kSegments) N += s.width;
  // Weights scaled so that the pre-activations span several units: every branch of the
  // activations is exercised.
  HostTensor x = uniform({c.M, c.K}, DType::bf16), weight = uniform({N, c.K}, DType::bf16, -0.2, 0.2);
  HostTensor bias = uniform({N}, DType::bf16);
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : kSegments) {
    want.emplace_back(std::vector<int64_t>{c.M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  projection_chain_forward(x, weight, c.bias ? std::optional<Tensor>(bias.view) : std::nullopt, kSegments, want_views,
                           reference);

  // The per-column vectors the epilogue reads: bias, activation code, scale (1/tau).
  HostTensor column_bias({N}, DType::f32), column_code({N}, DType::f32), column_scale({N}, DType::f32);
  {
    const std::vector<double> b = bias.values();
    std::vector<double> code, scale;
    for (const auto& s : kSegments)
      for (int64_t j = 0; j < s.width; ++j) {
        code.push_back(static_cast<double>(static_cast<int>(s.activation)));
        scale.push_back(s.activation == Activation::logsigmoid ? 1.0 / s.tau : 1.0);
      }
    column_bias.set(b);
    column_code.set(code);
    column_scale.set(scale);
  }
  HostTensor out = poisoned({c.M, N}, DType::bf16);
  DeviceTensor d_x(x), d_weight(weight), d_out(out), d_bias(column_bias), d_code(column_code), d_scale(column_scale);

  cuda::ProjectionGemmParams p;
  p.M = c.M, p.N = N, p.K = c.K;
  p.x = d_x.ptr, p.x_stride = c.K;
  p.weight = d_weight.ptr, p.weight_stride = c.K;
  p.out = d_out.ptr, p.out_stride = N;
  p.column_bias = c.bias ? static_cast<const float*>(d_bias.ptr) : nullptr;
  p.column_code = static_cast<const float*>(d_code.ptr);
  p.column_scale = static_cast<const float*>(d_scale.ptr);
  const size_t bytes = cuda::projection_gemm_workspace_bytes<cuda::ProjectionDtype::bf16>(p);
  void* workspace = nullptr;
  if (bytes > 0) cuda_ok(cudaMalloc(&workspace, bytes));
  p.workspace = workspace;
  cuda::projection_gemm<cuda::ProjectionDtype::bf16>(p);
  const std::vector<double> got = d_out.values(out);
  cudaFree(workspace);

  int64_t first = 0;
  for (size_t s = 0; s < kSegments.size(); ++s) {
    std::vector<double> columns;
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < kSegments[s].width; ++j) columns.push_back(got[i * N + first + j]);
    for (double v : columns) ASSERT_TRUE(std::isfinite(v)) << "segment " << s << ": an element is not finite (unwritten?)";
    EXPECT_LT(rel_err(columns, want[s].values()), tolerance(DType::bf16))
        << "segment " << s << " (" << activation_name(kSegments[s].activation) << ")";
    first += kSegments[s].width;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ProjectionGemmCuda,
                         ::testing::Values(ProjectionCase{"Small_M1_K64_nobias", 1, 64, false},
                                           ProjectionCase{"Small_M1000_K136_bias", 1000, 136, true},
                                           ProjectionCase{"M2000_K512_bias", 2000, 512, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace seqmix::test
