// Host time per call of the chains' public API (src/cuda/chains/NOTES.md, "Host time per
// call"): the CUTLASS GEMMs launched with their function attributes set once per device
// (the default) against CUTLASS's adapter, which sets two of them on every call
// (SEQMIX_CHAINS_ADAPTER_LAUNCH=1). Both launch the same kernel on the same parameters, so
// the outputs agree bit for bit (asserted); the timing prints host µs a call (calls issued
// back to back, no synchronisation between them) and the wall µs a call including the device.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

#include "chains_cuda_util.hpp"

namespace seqmix::test {
namespace {

// The output chain's forward and backward on small inputs: what both launch paths write.
struct OutputRun {
  OutputChainData data{100, 4, 128, 256};
  HostTensor hy = uniform({100, 256}, DType::bf16), hdo = uniform({100, 4, 128}, DType::bf16),
             hdg = uniform({100, 4, 128}, DType::bf16), hdnw = uniform({128}, DType::bf16),
             hdow = uniform({256, 512}, DType::bf16);
  DeviceTensor y{hy}, d_o{hdo}, dg{hdg}, dnw{hdnw}, dow{hdow};
  // Outputs poisoned (bf16 NaN), then both directions.
  void operator()() {
    for (const DeviceTensor* t : {&y, &d_o, &dg, &dnw, &dow}) cuda_ok(cudaMemset(t->ptr, 0xff, t->bytes));
    output_chain_forward(data.inputs(), y);
    output_chain_backward(data.inputs(), data.d_dy, {d_o, dg, dnw, dow});
  }
  std::vector<double> results() {
    std::vector<double> all;
    const std::pair<const DeviceTensor*, HostTensor*> outputs[] = {
        {&y, &hy}, {&d_o, &hdo}, {&dg, &hdg}, {&dnw, &hdnw}, {&dow, &hdow}};
    for (const auto& [device, host] : outputs) {
      const std::vector<double> v = device->values(*host);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

TEST(ChainsCudaHost, DirectLaunchMatchesAdapterSmall) {
  SKIP_WITHOUT_CUDA_DEVICE();
  OutputRun run;
  setenv("SEQMIX_CHAINS_ADAPTER_LAUNCH", "1", 1);
  run();
  const std::vector<double> adapter = run.results();
  unsetenv("SEQMIX_CHAINS_ADAPTER_LAUNCH");
  run();
  const std::vector<double> direct = run.results();
  EXPECT_TRUE(std::all_of(direct.begin(), direct.end(), [](double v) { return std::isfinite(v); }));
  EXPECT_EQ(direct, adapter);
}

// Mean µs a call of `call` over `calls` issued back to back: the host's time to return from
// them, and the wall time until the device has finished them.
std::pair<double, double> per_call_us(const std::function<void()>& call, int calls) {
  for (int i = 0; i < 10; ++i) call();
  cuda_ok(cudaDeviceSynchronize());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  const auto issued = std::chrono::steady_clock::now();
  cuda_ok(cudaDeviceSynchronize());
  const auto done = std::chrono::steady_clock::now();
  const auto us = [&](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count() / calls; };
  return {us(start, issued), us(start, done)};
}

TEST(ChainsCudaTiming, HostTimePerCall) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {256, 2048}) {
    OutputChainData data(tokens, 4, 512, kD);
    DeviceBf16 y(tokens * kD, 0.f), d_o(tokens * 2048, 0.f), dg(tokens * 2048, 0.f), dnw(512, 0.f),
        dow(kD * 2048, 0.f);
    const auto forward = [&] { output_chain_forward(data.inputs(), y.view({tokens, kD})); };
    const auto backward = [&] {
      output_chain_backward(data.inputs(), data.d_dy,
                            {d_o.view({tokens, 4, 512}), dg.view({tokens, 4, 512}), dnw.view({512}),
                             dow.view({kD, 2048})});
    };
    for (int round = 0; round < 3; ++round)
      for (const char* adapter : {"1", "0"}) {
        setenv("SEQMIX_CHAINS_ADAPTER_LAUNCH", adapter, 1);
        const auto [fh, fw] = per_call_us(forward, 200);
        const auto [bh, bw] = per_call_us(backward, 100);
        std::printf("  output chain, %5lld tokens, %-7s launch: forward host %6.1f us, wall %6.1f us; backward "
                    "host %6.1f us, wall %6.1f us\n",
                    static_cast<long long>(tokens), adapter[0] == '1' ? "adapter" : "direct", fh, fw, bh, bw);
      }
    unsetenv("SEQMIX_CHAINS_ADAPTER_LAUNCH");
  }
}

}  // namespace
}  // namespace seqmix::test
