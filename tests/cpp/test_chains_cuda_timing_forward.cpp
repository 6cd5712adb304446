// The chains' forward against cuBLAS part by part, and the launch-level changes measured
// side by side (NOTES.md, "Where the forward's gap is", "Programmatic dependent launch",
// "The norm-gate kernels' grid", "The gate in the GEMM's epilogue", "The 256 × 192 tile"):
// every configuration alternated three times in one process, the middle time kept. Printed
// as tables; run with --gtest_filter='*ChainsCudaTiming*'. Asserts only that every output is
// finite: the numbers are for NOTES.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "chains_cuda_util.hpp"
#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/chains/params.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {
namespace {

// Median of CUDA-event times of `run` (3 warm-up calls, 10 timed), the L2 flushed before each.
float median_ms(const std::function<void()>& run) { return test::median_ms(run, {.reps = 10, .warmups = 3}); }

// The switches under test, each "0" or "1": SEQMIX_CHAINS_CACHED_COLUMNS,
// SEQMIX_CHAINS_GATES_IN_GEMM, SEQMIX_CHAINS_FORWARD_ROUNDS, SEQMIX_CHAINS_PDL.
struct ForwardSwitches {
  const char* cached_columns;
  const char* gates_in_gemm;
  const char* rounds;
  const char* pdl;
  static constexpr const char* kNames[] = {"SEQMIX_CHAINS_CACHED_COLUMNS", "SEQMIX_CHAINS_GATES_IN_GEMM",
                                           "SEQMIX_CHAINS_FORWARD_ROUNDS", "SEQMIX_CHAINS_PDL"};
  void set() const {
    const char* values[] = {cached_columns, gates_in_gemm, rounds, pdl};
    for (int i = 0; i < 4; ++i) setenv(kNames[i], values[i], 1);
  }
  static void clear() {
    for (const char* name : kNames) unsetenv(name);
  }
};

// A layer's projection forward as the bench runs it, on random operands of `tokens` rows:
// the chain into one [tokens, W] buffer of column views, then for GLA its low-rank gate
// (rank 16 → 1024, logsigmoid / 16) on the chain's last 16 columns. Callable on `stream`.
struct BenchForward {
  static constexpr int64_t kRank = 16, kGateWidth = 1024;
  const Layer& layer;
  const int64_t tokens, W;
  const bool gla;
  DeviceBf16 x, weight, out, gate_weight, gate;
  ProjectionChainOptions options;

  BenchForward(const Layer& l, int64_t rows, cudaStream_t stream)
      : layer(l), tokens(rows), W(l.width()), gla(&l == &kGla), x(rows * kD, 1.f), weight(W * kD, 0.03f),
        out(rows * W, 0.f), gate_weight(kGateWidth * kRank, 0.25f), gate(rows * kGateWidth, 0.f) {
    options.stream = stream;
  }
  cuda::Rows x_rows() const { return {x.ptr, kD}; }
  cuda::Rows weight_rows() const { return {weight.ptr, kD}; }
  cuda::MutableRows out_rows() const { return {out.ptr, W}; }
  void operator()() const {
    projection_chain_forward(x.view({tokens, kD}), weight.view({W, kD}), std::nullopt, layer.segments,
                             column_views(out.view({tokens, W}), layer.segments), options);
    if (!gla) return;
    Tensor code = out.view({tokens, W});
    code.data = out.ptr + (W - kRank);
    code.shape = {tokens, kRank};
    projection_chain_forward(code, gate_weight.view({kGateWidth, kRank}), std::nullopt,
                             {{kGateWidth, Activation::logsigmoid, 16.0}}, {gate.view({tokens, kGateWidth})},
                             options);
  }
};

// One layer at one token count, all in graph replays on one stream: cuBLAS of the full
// width (the bench's baseline), the CUTLASS plain GEMM of the full width in the dispatched
// schedule (the same mainloop and tile as the chain with a plain epilogue: plain ÷ cuBLAS
// is the mainloop and tile part of the gap) with and without the round count, the plain GEMM
// of the identity columns only, and the bench's seqmix forward (the chain, plus GLA's
// low-rank gate) under each switch setting. Everything is timed three times in turn (the
// H100's clock drifts over a long run at 32768 tokens) and the middle time taken.
void time_forward_gap(const Layer& layer, int64_t tokens, cudaStream_t stream) {
  using namespace seqmix::cuda;
  BenchForward forward(layer, tokens, stream);
  const bool gla = forward.gla;
  const int64_t W = forward.W, identity_columns = W - (gla ? 16 : 32);
  DeviceBf16 &x = forward.x, &weight = forward.weight, &out = forward.out;
  const Rows xr = forward.x_rows(), wr = forward.weight_rows();
  const MutableRows outr = forward.out_rows();
  // GLA's chain has no activation columns: its gates switch changes nothing.
  const std::vector<ForwardSwitches> settings =
      gla ? std::vector<ForwardSwitches>{{"0", "0", "0", "0"}, {"1", "0", "1", "0"}, {"1", "0", "1", "1"}}
          : std::vector<ForwardSwitches>{
                {"0", "0", "0", "0"}, {"1", "0", "0", "0"}, {"1", "1", "1", "0"}, {"1", "1", "1", "1"}};
  std::vector<float> cublas_ms, plain[2], plain_identity, chain[4];
  setenv("SEQMIX_CHAINS_PDL", "0", 1);  // the plain GEMMs alone
  for (int rep = 0; rep < 3; ++rep) {
    if (cublas().ok)
      cublas_ms.push_back(graph_median_ms(stream, [&] { cublas().nt(tokens, W, kD, x.ptr, weight.ptr, out.ptr); }));
    setenv("SEQMIX_CHAINS_PDL", "0", 1);
    for (int rounds = 0; rounds < 2; ++rounds) {
      setenv("SEQMIX_CHAINS_FORWARD_ROUNDS", rounds ? "1" : "0", 1);
      plain[rounds].push_back(graph_median_ms(stream, [&] { gemm_nt_bf16(tokens, W, kD, xr, wr, outr, stream); }));
    }
    unsetenv("SEQMIX_CHAINS_FORWARD_ROUNDS");
    plain_identity.push_back(
        graph_median_ms(stream, [&] { gemm_nt_bf16(tokens, identity_columns, kD, xr, wr, outr, stream); }));
    for (size_t i = 0; i < settings.size(); ++i) {
      settings[i].set();
      out.poison();
      chain[i].push_back(graph_median_ms(stream, [&] { forward(); }));
      EXPECT_TRUE(out.finite_prefix(64 * W));
    }
    ForwardSwitches::clear();
  }
  const float reference = cublas().ok ? middle(cublas_ms) : NAN;
  std::printf("  %-15s %6lld  cuBLAS %8.4f ms; CUTLASS plain %8.4f ms = %5.3fx cuBLAS, by rounds %8.4f ms = %5.3fx "
              "(%lld identity columns %8.4f ms = %5.3fx)\n",
              layer.name, static_cast<long long>(tokens), reference, middle(plain[0]), middle(plain[0]) / reference,
              middle(plain[1]), middle(plain[1]) / reference, static_cast<long long>(identity_columns),
              middle(plain_identity), middle(plain_identity) / reference);
  for (size_t i = 0; i < settings.size(); ++i) {
    const float ms = middle(chain[i]);
    std::printf("  %-15s %6lld  forward%s, cached columns %s, gates in GEMM %s, rounds %s, PDL %s: %8.4f ms (%.4f "
                "%.4f %.4f) = %5.3fx cuBLAS, %5.3fx CUTLASS plain\n",
                layer.name, static_cast<long long>(tokens), gla ? " + low-rank gate" : "",
                settings[i].cached_columns, settings[i].gates_in_gemm, settings[i].rounds, settings[i].pdl, ms,
                chain[i][0],
                chain[i][1], chain[i][2], ms / reference, ms / middle(plain[0]));
  }
}

// The output chain with and without programmatic dependent launches (SEQMIX_CHAINS_PDL),
// alternated three times: the forward in graph replays (the bench's forward timing), the
// backward in event time on the default stream (the bench's backward timing) and in graph
// replays; each the middle of its three.
void time_output_pdl(const char* name, int64_t heads, int64_t dv, int64_t tokens, cudaStream_t stream) {
  const int64_t width = heads * dv;
  DeviceBf16 o(tokens * width, 1.f), g(tokens * width, 1.f), norm_weight(dv, 1.f), out_weight(kD * width, 0.03f),
      y(tokens * kD, 0.f), dy(tokens * kD, 1.f), d_o(tokens * width, 0.f), dg(tokens * width, 0.f), dnorm(dv, 0.f),
      dout_weight(kD * width, 0.f);
  const OutputChainInputs in{o.view({tokens, heads, dv}), g.view({tokens, heads, dv}), norm_weight.view({dv}),
                             out_weight.view({kD, width})};
  const OutputChainGrads grads{d_o.view({tokens, heads, dv}), dg.view({tokens, heads, dv}), dnorm.view({dv}),
                               dout_weight.view({kD, width})};
  OutputChainOptions on_stream;
  on_stream.stream = stream;
  std::vector<float> forward[2], backward[2], backward_graph[2];
  for (int rep = 0; rep < 3; ++rep)
    for (int pdl = 0; pdl < 2; ++pdl) {
      setenv("SEQMIX_CHAINS_PDL", pdl ? "1" : "0", 1);
      y.poison();
      forward[pdl].push_back(graph_median_ms(stream, [&] { output_chain_forward(in, y.view({tokens, kD}), on_stream); }));
      EXPECT_TRUE(y.finite_prefix(64 * kD));
      d_o.poison();
      backward[pdl].push_back(median_ms([&] { output_chain_backward(in, dy.view({tokens, kD}), grads); }));
      backward_graph[pdl].push_back(
          graph_median_ms(stream, [&] { output_chain_backward(in, dy.view({tokens, kD}), grads, on_stream); }));
      EXPECT_TRUE(d_o.finite_prefix(64 * width));
    }
  unsetenv("SEQMIX_CHAINS_PDL");
  std::printf("  %-15s %6lld  output fwd (graph) PDL off %8.4f on %8.4f ms (%5.3f); bwd (events) off %8.4f on %8.4f "
              "ms (%5.3f); bwd (graph) off %8.4f on %8.4f ms (%5.3f)\n",
              name, static_cast<long long>(tokens), middle(forward[0]), middle(forward[1]),
              middle(forward[1]) / middle(forward[0]), middle(backward[0]), middle(backward[1]),
              middle(backward[1]) / middle(backward[0]), middle(backward_graph[0]), middle(backward_graph[1]),
              middle(backward_graph[1]) / middle(backward_graph[0]));
}

// The norm-gate kernels' grids (launch_output.cu, norm_gate_blocks): the grids before (at
// most 1024 blocks backward, 4096 forward) against one wave at the resident count
// (SEQMIX_CHAINS_NORM_GATE_WAVE, SEQMIX_CHAINS_NORM_GATE_WAVE_FORWARD), alternated three
// times, the middle of each: the backward in event time, the forward in graph replays (as
// the bench times them).
TEST(ChainsCudaTiming, OutputNormGateWave) {
  SKIP_WITHOUT_CUDA_DEVICE();
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Shape {
    const char* name;
    int64_t heads, dv;
  };
  for (int64_t tokens : {2048, 8192, 32768})
    for (const Shape& s : {Shape{"gla", 4, 512}, Shape{"gated_deltanet", 16, 256}}) {
      const int64_t width = s.heads * s.dv;
      DeviceBf16 o(tokens * width, 1.f), g(tokens * width, 1.f), norm_weight(s.dv, 1.f),
          out_weight(kD * width, 0.03f), y(tokens * kD, 0.f), dy(tokens * kD, 1.f), d_o(tokens * width, 0.f),
          dg(tokens * width, 0.f), dnorm(s.dv, 0.f), dout_weight(kD * width, 0.f);
      const OutputChainInputs in{o.view({tokens, s.heads, s.dv}), g.view({tokens, s.heads, s.dv}),
                                 norm_weight.view({s.dv}), out_weight.view({kD, width})};
      const OutputChainGrads grads{d_o.view({tokens, s.heads, s.dv}), dg.view({tokens, s.heads, s.dv}),
                                   dnorm.view({s.dv}), dout_weight.view({kD, width})};
      OutputChainOptions on_stream;
      on_stream.stream = stream;
      std::vector<float> forward[2], backward[2];
      for (int rep = 0; rep < 3; ++rep)
        for (int wave = 0; wave < 2; ++wave) {
          setenv("SEQMIX_CHAINS_NORM_GATE_WAVE", wave ? "1" : "0", 1);
          setenv("SEQMIX_CHAINS_NORM_GATE_WAVE_FORWARD", wave ? "1" : "0", 1);
          y.poison();
          forward[wave].push_back(
              graph_median_ms(stream, [&] { output_chain_forward(in, y.view({tokens, kD}), on_stream); }));
          EXPECT_TRUE(y.finite_prefix(64 * kD));
          d_o.poison();
          backward[wave].push_back(median_ms([&] { output_chain_backward(in, dy.view({tokens, kD}), grads); }));
          EXPECT_TRUE(d_o.finite_prefix(64 * width));
        }
      unsetenv("SEQMIX_CHAINS_NORM_GATE_WAVE");
      unsetenv("SEQMIX_CHAINS_NORM_GATE_WAVE_FORWARD");
      std::printf("  %-15s %6lld  output fwd (graph): grid before %8.4f ms, one wave %8.4f (%5.3f); bwd (events): "
                  "before %8.4f ms, one wave %8.4f (%5.3f)\n",
                  s.name, static_cast<long long>(tokens), middle(forward[0]), middle(forward[1]),
                  middle(forward[1]) / middle(forward[0]), middle(backward[0]), middle(backward[1]),
                  middle(backward[1]) / middle(backward[0]));
    }
  cuda_ok(cudaStreamDestroy(stream));
}

// GLA's chain with its low-rank gate (NOTES.md, "The gate in the epilogue producer warp"), in
// interleaved graph replays on one stream, L2 flushed: cuBLAS of the 6160 columns, the two
// calls (SEQMIX_CHAINS_GATE_EPILOGUE=0: the chain's GEMM, then the gate's narrow-K kernel),
// and the one GEMM whose load warps compute the gate (=1).
void time_gate_epilogue(int64_t tokens, cudaStream_t stream) {
  BenchForward operands(kGla, tokens, stream);
  constexpr int64_t kRank = BenchForward::kRank, kGateWidth = BenchForward::kGateWidth;
  const int64_t W = operands.W;
  DeviceBf16 &x = operands.x, &weight = operands.weight, &out = operands.out, &gate = operands.gate;
  const std::vector<Tensor> outputs = column_views(out.view({tokens, W}), kGla.segments);
  const LowRankGate low_rank{kGla.segments.size() - 1, operands.gate_weight.view({kGateWidth, kRank}), std::nullopt,
                             16.0};
  const auto one_call = [&] {
    projection_chain_with_gate_forward(x.view({tokens, kD}), weight.view({W, kD}), std::nullopt, kGla.segments,
                                       low_rank, outputs, gate.view({tokens, kGateWidth}), operands.options);
  };
  // Interleaved replays (interleaved_graph_medians): the two calls, the one GEMM, the two
  // calls with the narrow kernel's weights read after its wait, and cuBLAS.
  const char* names[] = {"two calls:", "one GEMM, gate in the load warps:", "two calls, weights after the wait:"};
  std::vector<std::function<void()>> runs;
  for (const char* setting : {"0", "1"})
    runs.push_back(with_environment("SEQMIX_CHAINS_GATE_EPILOGUE", setting, one_call));
  runs.push_back(with_environment("SEQMIX_CHAINS_NARROW_EARLY_WEIGHTS", "0", runs[0]));
  if (cublas().ok) runs.push_back([&] { cublas().nt(tokens, W, kD, x.ptr, weight.ptr, out.ptr); });
  out.poison();
  gate.poison();
  const std::vector<float> ms = interleaved_graph_medians(stream, runs);
  EXPECT_TRUE(out.finite_prefix(64 * W));
  EXPECT_TRUE(gate.finite_prefix(64 * kGateWidth));
  const float reference = cublas().ok ? ms.back() : NAN;
  std::printf("  gla + gate %6lld  cuBLAS (6160 columns) %8.4f ms\n", static_cast<long long>(tokens), reference);
  for (int i = 0; i < 3; ++i)
    std::printf("  gla + gate %6lld  %-34s %8.4f ms = %5.3fx cuBLAS, %5.3fx the two calls\n",
                static_cast<long long>(tokens), names[i], ms[i], ms[i] / reference, ms[i] / ms[0]);
}

TEST(ChainsCudaTiming, GateEpilogue) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {2048, 8192, 32768}) time_gate_epilogue(tokens, timing.stream);
}

TEST(ChainsCudaTiming, OutputPdl) {
  SKIP_WITHOUT_CUDA_DEVICE();
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t tokens : {2048, 8192, 32768}) {
    time_output_pdl("gla", 4, 512, tokens, stream);
    time_output_pdl("gated_deltanet", 16, 256, tokens, stream);
  }
  cuda_ok(cudaStreamDestroy(stream));
}

TEST(ChainsCudaTiming, ForwardGap) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {2048, 8192, 32768})
    for (const Layer* layer : {&kGla, &kGatedDeltaNet}) time_forward_gap(*layer, tokens, timing.stream);
}

// The 256 × 192 tile (NOTES.md, "The 256 × 192 tile"), in graph replays on one stream,
// alternated three times and the middle kept: cuBLAS of the full width, the plain GEMM as
// dispatched with SEQMIX_CHAINS_WIDE_TILE off and on and on the 256 × 192 tile in three tile
// orders, and the bench's forward (GLA with its low-rank gate) with the switch off and on.
// Each output's first rows are checked against the dispatched GEMM's with the switch off.
void time_wide_tile(const Layer& layer, int64_t tokens, cudaStream_t stream) {
  using namespace seqmix::cuda;
  BenchForward forward(layer, tokens, stream);
  const bool gla = forward.gla;
  const int64_t W = forward.W;
  DeviceBf16 &x = forward.x, &weight = forward.weight, &out = forward.out;
  const Rows xr = forward.x_rows(), wr = forward.weight_rows();
  const MutableRows outr = forward.out_rows();
  constexpr GemmTile kWide = GemmTile::cooperative_256x192_cluster2x1;
  const GemmSchedule wide[] = {{kWide, Raster::along_n, 1}, {kWide, Raster::along_m, 1}, {kWide, Raster::along_n, 2}};
  const int64_t sample = std::min<int64_t>(tokens, 128);
  std::vector<float> cublas_ms, dispatched[2], wide_ms[3], chain[2];
  setenv("SEQMIX_CHAINS_PDL", "0", 1);  // the plain GEMMs alone
  for (int rep = 0; rep < 3; ++rep) {
    if (cublas().ok)
      cublas_ms.push_back(graph_median_ms(stream, [&] { cublas().nt(tokens, W, kD, x.ptr, weight.ptr, out.ptr); }));
    std::vector<float> want;
    for (int on = 0; on < 2; ++on) {
      setenv("SEQMIX_CHAINS_WIDE_TILE", on ? "1" : "0", 1);
      out.poison();
      dispatched[on].push_back(graph_median_ms(stream, [&] { gemm_nt_bf16(tokens, W, kD, xr, wr, outr, stream); }));
      if (on) EXPECT_LT(relative_difference(first_rows(out, sample, W), want), 1e-2) << "wide tile dispatched";
      else want = first_rows(out, sample, W);
    }
    unsetenv("SEQMIX_CHAINS_WIDE_TILE");
    for (int i = 0; i < 3; ++i) {
      out.poison();
      wide_ms[i].push_back(
          graph_median_ms(stream, [&] { gemm_nt_bf16_scheduled(wide[i], tokens, W, kD, xr, wr, outr, stream); }));
      EXPECT_LT(relative_difference(first_rows(out, sample, W), want), 1e-2) << raster_name(wide[i].raster);
    }
    unsetenv("SEQMIX_CHAINS_PDL");
    for (int on = 0; on < 2; ++on) {
      setenv("SEQMIX_CHAINS_WIDE_TILE", on ? "1" : "0", 1);
      out.poison();
      chain[on].push_back(graph_median_ms(stream, [&] { forward(); }));
      EXPECT_TRUE(out.finite_prefix(64 * W));
    }
    unsetenv("SEQMIX_CHAINS_WIDE_TILE");
    setenv("SEQMIX_CHAINS_PDL", "0", 1);
  }
  unsetenv("SEQMIX_CHAINS_PDL");
  const float reference = cublas().ok ? middle(cublas_ms) : NAN;
  const GemmSchedule chosen = forward_schedule(tokens, W, kD);
  std::printf("  %-15s %6lld  cuBLAS %8.4f ms; plain dispatched, wide tile off %8.4f ms = %5.3fx cuBLAS; on (%s, "
              "%s, swizzle %d) %8.4f ms = %5.3fx cuBLAS, %5.3fx off\n",
              layer.name, static_cast<long long>(tokens), reference, middle(dispatched[0]),
              middle(dispatched[0]) / reference, gemm_tile_name(chosen.tile), raster_name(chosen.raster),
              chosen.swizzle, middle(dispatched[1]), middle(dispatched[1]) / reference,
              middle(dispatched[1]) / middle(dispatched[0]));
  for (int i = 0; i < 3; ++i)
    std::printf("  %-15s %6lld  plain 256x192 %-9s swizzle %d: %8.4f ms = %5.3fx cuBLAS, %5.3fx dispatched\n",
                layer.name, static_cast<long long>(tokens), raster_name(wide[i].raster), wide[i].swizzle,
                middle(wide_ms[i]), middle(wide_ms[i]) / reference, middle(wide_ms[i]) / middle(dispatched[0]));
  for (int on = 0; on < 2; ++on)
    std::printf("  %-15s %6lld  forward%s, wide tile %s: %8.4f ms (%.4f %.4f %.4f) = %5.3fx cuBLAS, %5.3fx off\n",
                layer.name, static_cast<long long>(tokens), gla ? " + low-rank gate" : "", on ? "on " : "off",
                middle(chain[on]), chain[on][0], chain[on][1], chain[on][2], middle(chain[on]) / reference,
                middle(chain[on]) / middle(chain[0]));
}

TEST(ChainsCudaTiming, WideTile) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {2048, 8192, 32768})
    for (const Layer* layer : {&kGla, &kGatedDeltaNet}) time_wide_tile(*layer, tokens, timing.stream);
}

// A dispatch switch in replays taken in turn (interleaved_graph_medians): cuBLAS, the plain
// GEMM as dispatched with the switch (SEQMIX_CHAINS_WIDE_TILE, SEQMIX_CHAINS_TILE_160) off
// and on and on its tile in explicit orders, and the bench's forward off and on.
// The blocks of replays above put 32768 tokens' second configuration of a pair up to 6 %
// behind whichever it was (the clock drifting under minutes of GEMMs).
void time_switch_interleaved(const Layer& layer, int64_t tokens, cudaStream_t stream, const char* name,
                             seqmix::cuda::GemmTile tile) {
  using namespace seqmix::cuda;
  BenchForward forward(layer, tokens, stream);
  const int64_t W = forward.W;
  DeviceBf16 &x = forward.x, &weight = forward.weight, &out = forward.out;
  const auto with_switch = [name](bool on, std::function<void()> issue) {
    return with_environment(name, on ? "1" : "0", std::move(issue));
  };
  const auto plain = [&] {
    gemm_nt_bf16(tokens, W, kD, forward.x_rows(), forward.weight_rows(), forward.out_rows(), stream);
  };
  const auto chain = [&] { forward(); };
  std::vector<std::function<void()>> runs = {with_switch(false, plain), with_switch(true, plain),
                                             with_switch(false, chain), with_switch(true, chain)};
  // The tile in explicit orders: along M up to 3k tokens (the dispatch's order there), else
  // along N without and with a swizzle of 2.
  const std::vector<GemmSchedule> wide = tokens <= 3072
                                             ? std::vector<GemmSchedule>{{tile, Raster::along_m, 1}}
                                             : std::vector<GemmSchedule>{{tile, Raster::along_n, 1},
                                                                         {tile, Raster::along_n, 2}};
  for (const GemmSchedule& schedule : wide)
    runs.push_back([&, schedule] {
      gemm_nt_bf16_scheduled(schedule, tokens, W, kD, forward.x_rows(), forward.weight_rows(), forward.out_rows(),
                             stream);
    });
  if (cublas().ok) runs.push_back([&] { cublas().nt(tokens, W, kD, x.ptr, weight.ptr, out.ptr); });
  setenv("SEQMIX_CHAINS_PDL", "0", 1);  // the plain GEMMs alone, as in the tests above
  const std::vector<float> ms = interleaved_graph_medians(stream, runs);
  unsetenv("SEQMIX_CHAINS_PDL");
  EXPECT_TRUE(out.finite_prefix(64 * W));
  const float reference = cublas().ok ? ms.back() : NAN;
  std::printf("  %-15s %6lld  interleaved %s: cuBLAS %8.4f ms; plain off %8.4f, on %8.4f ms (%5.3fx off; %5.3fx / "
              "%5.3fx cuBLAS); forward off %8.4f, on %8.4f ms (%5.3fx off; %5.3fx / %5.3fx cuBLAS)\n",
              layer.name, static_cast<long long>(tokens), name, reference, ms[0], ms[1], ms[1] / ms[0], ms[0] / reference,
              ms[1] / reference, ms[2], ms[3], ms[3] / ms[2], ms[2] / reference, ms[3] / reference);
  for (size_t i = 0; i < wide.size(); ++i)
    std::printf("  %-15s %6lld  interleaved: plain %s %s swizzle %d %8.4f ms (%5.3fx off, %5.3fx cuBLAS)\n",
                layer.name, static_cast<long long>(tokens), gemm_tile_name(tile), raster_name(wide[i].raster),
                wide[i].swizzle, ms[4 + i],
                ms[4 + i] / ms[0], ms[4 + i] / reference);
}

TEST(ChainsCudaTiming, WideTileInterleaved) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {2048, 4096, 8192, 16384, 32768})
    for (const Layer* layer : {&kGla, &kGatedDeltaNet})
      time_switch_interleaved(*layer, tokens, timing.stream, "SEQMIX_CHAINS_WIDE_TILE",
                              seqmix::cuda::GemmTile::cooperative_256x192_cluster2x1);
}

TEST(ChainsCudaTiming, Tile160Interleaved) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {4096, 8192, 16384, 32768})
    for (const Layer* layer : {&kGla, &kGatedDeltaNet})
      time_switch_interleaved(*layer, tokens, timing.stream, "SEQMIX_CHAINS_TILE_160",
                              seqmix::cuda::GemmTile::cooperative_256x160_cluster2x1);
}

// Every nt tile × raster order × swizzle (1, 2, 4) of one projection GEMM in replays taken in
// turn (interleaved_graph_medians), against the dispatched schedule and cuBLAS: the sweep of
// "Tile choice" again without the clock's drift between blocks of replays. Prints every
// configuration sorted by time; the fastest first.
void time_tiles_interleaved(const Layer& layer, int64_t tokens, cudaStream_t stream) {
  using namespace seqmix::cuda;
  BenchForward forward(layer, tokens, stream);
  const int64_t W = forward.W;
  std::vector<GemmSchedule> schedules = {forward_schedule(tokens, W, kD)};
  for (int t = 0; t < kGemmTiles; ++t)
    for (Raster raster : {Raster::along_m, Raster::along_n})
      for (int swizzle : {1, 2, 4}) schedules.push_back({static_cast<GemmTile>(t), raster, swizzle});
  std::vector<std::function<void()>> runs;
  for (const GemmSchedule& schedule : schedules)
    runs.push_back([&, schedule] {
      gemm_nt_bf16_scheduled(schedule, tokens, W, kD, forward.x_rows(), forward.weight_rows(), forward.out_rows(),
                             stream);
    });
  if (cublas().ok)
    runs.push_back([&] { cublas().nt(tokens, W, kD, forward.x.ptr, forward.weight.ptr, forward.out.ptr); });
  const std::vector<float> ms = interleaved_graph_medians(stream, runs, 15);
  EXPECT_TRUE(forward.out.finite_prefix(64 * W));
  const float dispatched = ms[0], reference = cublas().ok ? ms.back() : NAN;
  std::vector<size_t> order(schedules.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  std::printf("  %-15s %6lld  cuBLAS %8.4f ms; dispatched (%s, %s, swizzle %d) %8.4f ms = %5.3fx cuBLAS\n",
              layer.name, static_cast<long long>(tokens), reference, gemm_tile_name(schedules[0].tile),
              raster_name(schedules[0].raster), schedules[0].swizzle, dispatched, dispatched / reference);
  for (size_t i : order) {
    if (i == 0) continue;
    std::printf("  %-15s %6lld    %-32s %-9s swizzle %d %8.4f ms  %5.3fx dispatched  %5.3fx cuBLAS\n", layer.name,
                static_cast<long long>(tokens), gemm_tile_name(schedules[i].tile), raster_name(schedules[i].raster),
                schedules[i].swizzle, ms[i], ms[i] / dispatched, ms[i] / reference);
  }
}

TEST(ChainsCudaTiming, ForwardTilesInterleaved) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const TimingStream timing;
  for (int64_t tokens : {2048, 8192, 32768})
    for (const Layer* layer : {&kGla, &kGatedDeltaNet}) time_tiles_interleaved(*layer, tokens, timing.stream);
}

}  // namespace
}  // namespace seqmix::test
