// GLA's projection chain and its low-rank gate in one call on CUDA
// (projection_chain_with_gate_forward) with the gate computed inside the GEMM
// (SEQMIX_CHAINS_GATE_EPILOGUE=1 forces it; src/cuda/chains/gate_epilogue.cuh): against
// the float64 oracle, bit for bit against the two calls (the chain's GEMM, then the gate's
// narrow-K kernel on the code it wrote: the same mainloop, the same products and activation),
// and replayed from a CUDA graph. Named Small: compute-sanitizer runs them.
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "chains_cuda_util.hpp"
#include "cuda/chains/gate_in_gemm.hpp"

namespace seqmix::test {
namespace {

struct GateCase {
  int64_t tokens, d, rank;
  bool gate_bias;
  DType gate_dtype;
};

std::string case_name(const testing::TestParamInfo<GateCase>& info) {
  const GateCase& c = info.param;
  return "Small_T" + std::to_string(c.tokens) + "_d" + std::to_string(c.d) + "_r" + std::to_string(c.rank) +
         (c.gate_bias ? "_bias" : "_nobias") + "_" + dtype_name(c.gate_dtype);
}

// A GLA-like chain at a small width: q, k, v, g and the code last (main columns a multiple of 8).
std::vector<ProjectionSegment> segments_for(int64_t rank) {
  return {{128, Activation::identity}, {128, Activation::identity}, {256, Activation::identity},
          {256, Activation::identity}, {rank, Activation::identity}};
}
constexpr int64_t kGateWidth = 1024;
constexpr double kTau = 16.0;

struct GateRun {
  std::vector<double> chain, gate;  // [tokens, W] and [tokens, width], row-major
};

struct GateData {
  GateCase c;
  std::vector<ProjectionSegment> segments = segments_for(c.rank);
  int64_t W = width_of(segments);
  HostTensor x = uniform({c.tokens, c.d}, DType::bf16), weight = uniform({W, c.d}, DType::bf16, -0.1, 0.1),
             gate_weight = uniform({kGateWidth, c.rank}, DType::bf16, -0.5, 0.5),
             gate_bias = uniform({kGateWidth}, DType::bf16);
  DeviceTensor dx{x}, dweight{weight}, dgate_weight{gate_weight}, dgate_bias{gate_bias};
  HostTensor out_host = poisoned({c.tokens, W}, DType::bf16);
  HostTensor gate_host = poisoned({c.tokens, kGateWidth}, c.gate_dtype);
  DeviceTensor out{out_host}, gate{gate_host};

  LowRankGate low_rank(const Tensor& weight_, std::optional<Tensor> bias) const {
    return {segments.size() - 1, weight_, c.gate_bias ? bias : std::nullopt, kTau};
  }
  void call(void* stream) {
    ProjectionChainOptions options;
    options.stream = stream;
    projection_chain_with_gate_forward(dx, dweight, std::nullopt, segments, low_rank(dgate_weight, dgate_bias.view),
                                       column_views(out.view, segments), gate.view, options);
  }
  void poison() {
    cuda_ok(cudaMemset(out.ptr, 0xff, out.bytes));
    cuda_ok(cudaMemset(gate.ptr, 0xff, gate.bytes));
  }
  GateRun read() { return {out.values(out_host), gate.values(gate_host)}; }
  GateRun run(const char* in_epilogue) {
    setenv("SEQMIX_CHAINS_GATE_EPILOGUE", in_epilogue, 1);
    poison();
    call(nullptr);
    unsetenv("SEQMIX_CHAINS_GATE_EPILOGUE");
    return read();
  }
  // The float64 oracle: the CPU reference of the same composition.
  GateRun oracle() const {
    HostTensor x64 = as_f64(x), w64 = as_f64(weight), gw64 = as_f64(gate_weight), gb64 = as_f64(gate_bias);
    HostTensor out64 = poisoned({c.tokens, W}, DType::f64), gate64 = poisoned({c.tokens, kGateWidth}, DType::f64);
    projection_chain_with_gate_forward(x64, w64, std::nullopt, segments, low_rank(gw64, gb64.view),
                                       column_views(out64.view, segments), gate64);
    return {out64.values(), gate64.values()};
  }
};

// Columns [first, first + width) of a [rows, N] row-major matrix.
std::vector<double> columns(const std::vector<double>& m, int64_t rows, int64_t N, int64_t first, int64_t width) {
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i)
    out.insert(out.end(), m.begin() + i * N + first, m.begin() + i * N + first + width);
  return out;
}

class ProjectionChainWithGateCuda : public testing::TestWithParam<GateCase> {};

TEST_P(ProjectionChainWithGateCuda, MatchesOracleAndTheTwoCalls) {
  SKIP_WITHOUT_CUDA_DEVICE();
  GateData data{GetParam()};
  const int64_t T = data.c.tokens, W = data.W, main = W - data.c.rank;
  const GateRun one = data.run("1"), two = data.run("0"), want = data.oracle();
  const double tol = tolerance(DType::bf16);
  EXPECT_LT(rel_err(columns(one.chain, T, W, 0, main), columns(want.chain, T, W, 0, main)), tol) << "main columns";
  EXPECT_LT(rel_err(columns(one.chain, T, W, main, data.c.rank), columns(want.chain, T, W, main, data.c.rank)), tol)
      << "code";
  EXPECT_LT(rel_err(one.gate, want.gate), tol) << "gate";
  EXPECT_EQ(one.chain, two.chain) << "the chain: the same GEMM mainloop as the two calls";
  EXPECT_EQ(one.gate, two.gate) << "the gate: the narrow-K kernel's products and activation on the same code";
}

TEST_P(ProjectionChainWithGateCuda, GraphReplayEqualsAPlainCall) {
  SKIP_WITHOUT_CUDA_DEVICE();
  GateData data{GetParam()};
  const GateRun plain = data.run("1");
  setenv("SEQMIX_CHAINS_GATE_EPILOGUE", "1", 1);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  data.call(stream);  // once outside the capture
  cuda_ok(cudaStreamSynchronize(stream));
  {
    const CapturedGraph graph(stream, [&] { data.call(stream); });
    data.poison();
    for (int replay = 0; replay < 2; ++replay) graph.launch(stream);
    cuda_ok(cudaStreamSynchronize(stream));
    const GateRun replayed = data.read();
    EXPECT_EQ(replayed.chain, plain.chain);
    EXPECT_EQ(replayed.gate, plain.gate);
  }
  cuda_ok(cudaStreamDestroy(stream));
  unsetenv("SEQMIX_CHAINS_GATE_EPILOGUE");
}

// Not tile multiples: 1, 1000, 2085 tokens; d 264; rank 8 (the code tile mostly zeros);
// 12345 tokens: 49 bands, several a CTA's share waits for.
INSTANTIATE_TEST_SUITE_P(Gla, ProjectionChainWithGateCuda,
                         testing::Values(GateCase{1, 256, 16, true, DType::bf16},
                                         GateCase{1000, 256, 16, true, DType::bf16},
                                         GateCase{2085, 256, 16, false, DType::bf16},
                                         GateCase{1000, 264, 16, true, DType::f32},
                                         GateCase{2085, 264, 8, true, DType::bf16},
                                         GateCase{12345, 256, 16, true, DType::bf16}),
                         case_name);

// The path is taken for the GLA-like shapes above when switched on, and refused (nothing
// launched) where it does not fit: an f32 gate, a gate width not a multiple of 32, a bias not
// 16-byte aligned, the code not the last segment or not on a 128-column boundary, or the
// switch off (its default).
TEST(ProjectionChainWithGateCuda, SmallEpiloguePathTakenWhereItFits) {
  SKIP_WITHOUT_CUDA_DEVICE();
  GateData data{{1000, 256, 16, false, DType::bf16}};
  cuda::ProjectionChainProblem p;
  p.tokens = 1000, p.d = 256, p.columns = data.W;
  p.x = {data.dx.ptr, 256};
  p.weight = {data.dweight.ptr, 256};
  for (int64_t first = 0; const auto& s : data.segments) {
    p.segments.push_back({first, s.width, 0, 1.f});
    first += s.width;
  }
  const std::vector<cuda::OutputRun> runs{{0, data.W, {data.out.ptr, data.W}, false}};
  const size_t code = p.segments.size() - 1;
  cuda::LowRankGateProblem gate{
      kGateWidth, 16, {data.dgate_weight.ptr, 16}, nullptr, 1.f / 16, {data.gate.ptr, kGateWidth}, false};
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate)) << "off by default";
  setenv("SEQMIX_CHAINS_GATE_EPILOGUE", "1", 1);
  EXPECT_TRUE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate));
  cuda_ok(cudaDeviceSynchronize());
  gate.f32 = true;
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate)) << "f32 gate";
  gate.f32 = false;
  gate.width = 1000;
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate)) << "width not a multiple of 32";
  gate.width = kGateWidth;
  gate.bias = static_cast<const char*>(data.dgate_bias.ptr) + 2;
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate)) << "bias not 16-byte aligned";
  gate.bias = nullptr;
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, 0, gate)) << "code not last";
  cuda::ProjectionChainProblem shifted = p;
  shifted.segments[0].width -= 8;
  for (size_t s = 1; s < shifted.segments.size(); ++s) shifted.segments[s].offset -= 8;
  shifted.columns -= 8;
  const std::vector<cuda::OutputRun> shifted_runs{{0, shifted.columns, {data.out.ptr, data.W}, false}};
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(shifted, shifted_runs, code, gate)) << "code off a tile";
  setenv("SEQMIX_CHAINS_GATE_EPILOGUE", "0", 1);
  EXPECT_FALSE(cuda::projection_chain_with_gate_in_gemm(p, runs, code, gate)) << "switched off";
  unsetenv("SEQMIX_CHAINS_GATE_EPILOGUE");
}

}  // namespace
}  // namespace seqmix::test
