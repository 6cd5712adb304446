// The chains' programmatic dependent launches (src/cuda/chains/dependent_launch.hpp): every
// dependent kernel waits for the kernel before it, so the results are bit for bit those of
// plain launches (SEQMIX_CHAINS_PDL=0), eagerly and replayed from a CUDA graph captured on a
// stream of its own (the bench's forward timing captures them). Covered: the output chain
// forward (norm-gate, then its GEMM as a dependent) and backward (du's GEMM, the norm-gate
// backward and dout_weight's GEMM as dependents), GLA's low-rank gate after its chain's
// GEMM (the narrow-K kernel as a dependent), and Gated DeltaNet-like gates activated after
// the plain GEMM (activate_columns as a dependent). Named Small: compute-sanitizer runs them.
#include <cuda_runtime.h>

#include <cstdlib>
#include <functional>
#include <vector>

#include "chains_cuda_util.hpp"

namespace seqmix::test {
namespace {

// Runs `call(stream)` three ways and returns what `read()` gives after each: eagerly with
// plain launches, eagerly with programmatic ones, and captured into a CUDA graph on a
// non-blocking stream and replayed twice.
std::vector<std::vector<double>> three_ways(const std::function<void(void*)>& call,
                                            const std::function<std::vector<double>()>& read,
                                            const std::function<void()>& poison) {
  std::vector<std::vector<double>> results;
  for (const char* pdl : {"0", "1"}) {
    setenv("SEQMIX_CHAINS_PDL", pdl, 1);
    poison();
    call(nullptr);
    results.push_back(read());
  }
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  call(stream);  // once outside the capture: what is kept across calls is filled here
  cuda_ok(cudaStreamSynchronize(stream));
  {
    const CapturedGraph graph(stream, [&] { call(stream); });
    poison();
    for (int replay = 0; replay < 2; ++replay) graph.launch(stream);
    cuda_ok(cudaStreamSynchronize(stream));
    results.push_back(read());
  }
  cuda_ok(cudaStreamDestroy(stream));
  unsetenv("SEQMIX_CHAINS_PDL");
  return results;
}

void expect_all_equal(const std::vector<std::vector<double>>& results, const char* what) {
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1], results[0]) << what << ": programmatic launches against plain ones";
  EXPECT_EQ(results[2], results[0]) << what << ": graph replay against plain launches";
}

// The outputs' values one after another.
std::vector<double> concatenated(std::initializer_list<std::vector<double>> parts) {
  std::vector<double> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(ChainsCudaPdl, SmallOutputChainBitwiseTheSame) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t T = 777, H = 2, Dv = 512, d_out = 200;
  const OutputChainData data(T, H, Dv, d_out);
  HostTensor y = poisoned({T, d_out}, DType::bf16), d_o_host = poisoned({T, H, Dv}, DType::bf16);
  HostTensor dg = poisoned({T, H, Dv}, DType::bf16), dnw = poisoned({Dv}, DType::bf16);
  HostTensor dow = poisoned({d_out, H * Dv}, DType::bf16);
  DeviceTensor d_y(y), d_do(d_o_host), d_dg(dg), d_dnw(dnw), d_dow(dow);
  const OutputChainInputs in = data.inputs();
  std::vector<double> dnorm[3];
  int run = 0;
  const auto results = three_ways(
      [&](void* stream) {
        OutputChainOptions options;
        options.stream = stream;
        output_chain_forward(in, d_y, options);
        output_chain_backward(in, data.d_dy, {d_do, d_dg, d_dnw, d_dow}, options);
      },
      [&] {
        cuda_ok(cudaDeviceSynchronize());
        dnorm[run++] = d_dnw.values(dnw);
        return concatenated({d_y.values(y), d_do.values(d_o_host), d_dg.values(dg), d_dow.values(dow)});
      },
      [&] {
        for (DeviceTensor* t : {&d_y, &d_do, &d_dg, &d_dow}) cuda_ok(cudaMemset(t->ptr, 0xff, t->bytes));
      });
  expect_all_equal(results, "y, d_o, dg, dout_weight");
  // dnorm_weight sums f32 atomics in no fixed order: equal to rounding.
  for (int i = 1; i < 3; ++i) EXPECT_LT(rel_err(dnorm[i], dnorm[0]), 1e-2) << "dnorm_weight, way " << i;
}

// A chain with a 16-column code segment, then the low-rank gate on that code (K = 16: the
// narrow-K kernel, launched as a dependent of the chain's GEMM); and a wide identity chain
// whose gates the plain GEMM covers and activate_columns finishes.
TEST(ChainsCudaPdl, SmallGateAfterItsGemmBitwiseTheSame) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t M = 1000, K = 40, rank = 16, gate_width = 136;
  const std::vector<ProjectionSegment> chain = {{64, Activation::identity, 1.0}, {rank, Activation::identity, 1.0}};
  const std::vector<ProjectionSegment> gate = {{gate_width, Activation::logsigmoid, 16.0}};
  const std::vector<ProjectionSegment> gated = {{192, Activation::identity, 1.0},
                                                {16, Activation::softplus, 1.0},
                                                {16, Activation::sigmoid, 1.0}};
  const int64_t N = width_of(chain), G = width_of(gated);
  HostTensor x = uniform({M, K}, DType::bf16), w = uniform({N, K}, DType::bf16, -0.3, 0.3);
  HostTensor gw = uniform({gate_width, rank}, DType::bf16, -0.5, 0.5), w2 = uniform({G, K}, DType::bf16, -0.3, 0.3);
  HostTensor out = poisoned({M, N}, DType::bf16), gate_out = poisoned({M, gate_width}, DType::bf16);
  HostTensor gated_out = poisoned({M, G}, DType::bf16);
  DeviceTensor d_x(x), d_w(w), d_gw(gw), d_w2(w2), d_out(out), d_gate(gate_out), d_gated(gated_out);
  const std::vector<Tensor> views = column_views(d_out.view, chain);
  const auto results = three_ways(
      [&](void* stream) {
        ProjectionChainOptions options;
        options.stream = stream;
        projection_chain_forward(d_x, d_w, std::nullopt, chain, views, options);
        projection_chain_forward(views[1], d_gw, std::nullopt, gate, {d_gate.view}, options);
        projection_chain_forward(d_x, d_w2, std::nullopt, gated, column_views(d_gated.view, gated), options);
      },
      [&] { return concatenated({d_out.values(out), d_gate.values(gate_out), d_gated.values(gated_out)}); },
      [&] {
        for (DeviceTensor* t : {&d_out, &d_gate, &d_gated}) cuda_ok(cudaMemset(t->ptr, 0xff, t->bytes));
      });
  expect_all_equal(results, "chain, gate and gated outputs");
}

}  // namespace
}  // namespace seqmix::test
