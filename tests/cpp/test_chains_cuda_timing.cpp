// Where the projection chain's forward time goes, at issue 6's shapes (d = 2048; GLA:
// W_total 6160, all identity; Gated DeltaNet: W_total 12320, the last 32 columns softplus
// and sigmoid; tokens 2048, 8192, 32768; bf16): the bare CUTLASS GEMMs with a plain
// epilogue against the activation GEMM (null vectors and the layer's vectors) and the
// whole chain call, all on the same operands in one process; and the output chain's parts.
// Printed as a table; run with --gtest_filter='*ChainsCudaTiming*'. Asserts only that every
// time was measured and the outputs are finite: the numbers are for NOTES.md.
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <random>

#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/chains/narrow_projection.hpp"
#include "cuda/chains/params.hpp"
#include "chains_cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {
namespace {

// Median of CUDA-event times of `run` (3 warm-up calls, 10 timed), the L2 cache flushed
// (256 MiB written) before each timed call, outside the timed region.
float median_ms(const std::function<void()>& run) { return test::median_ms(run, {.reps = 10, .warmups = 3}); }

void print_row(const char* layer, int64_t tokens, const char* what, double flop, float ms, float reference_ms) {
  std::printf("  %-15s %6lld  %-44s %8.4f ms  %6.1f TFLOP/s  %5.2fx the plain GEMM's time\n", layer,
              static_cast<long long>(tokens), what, ms, flop / (ms * 1e-3) / 1e12, ms / reference_ms);
}

// The per-column vectors of `layer` (bias 0, code, scale), on the device.
struct ColumnVectors {
  float* data = nullptr;
  explicit ColumnVectors(const Layer& layer) {
    const int64_t n = layer.width();
    std::vector<float> host(3 * n, 0.f);
    int64_t c = 0;
    for (const auto& s : layer.segments)
      for (int64_t j = 0; j < s.width; ++j, ++c) {
        host[n + c] = static_cast<float>(static_cast<int>(s.activation));
        host[2 * n + c] = s.activation == Activation::logsigmoid ? static_cast<float>(1.0 / s.tau) : 1.f;
      }
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(float)));
    cuda_ok(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~ColumnVectors() { cudaFree(data); }
  ColumnVectors(const ColumnVectors&) = delete;
  ColumnVectors& operator=(const ColumnVectors&) = delete;
};

void time_projection(const Layer& layer, int64_t tokens) {
  const int64_t W = layer.width();
  const double flop = 2.0 * tokens * W * kD;
  DeviceBf16 x(tokens * kD, 1.f), weight(W * kD, 0.03f), weight_kn(kD * W, 0.03f), out(tokens * W, 0.f);
  const ColumnVectors vectors(layer);
  const cuda::ColumnEpilogue with_vectors{vectors.data, vectors.data + W, vectors.data + 2 * W};
  using namespace seqmix::cuda;
  const Rows xr{x.ptr, kD}, wr{weight.ptr, kD};
  const MutableRows outr{out.ptr, W};

  const float plain_nn = median_ms([&] { gemm_nn_bf16(tokens, W, kD, xr, Rows{weight_kn.ptr, W}, outr, nullptr); });
  const float plain = median_ms([&] { gemm_nt_bf16(tokens, W, kD, xr, wr, outr, nullptr); });
  print_row(layer.name, tokens, "plain GEMM x·Wᵀ (K-major B, no EVT)", flop, plain, plain);
  print_row(layer.name, tokens, "plain GEMM x·B (N-major B)", flop, plain_nn, plain);
  const float null_vectors = median_ms([&] { activation_gemm_bf16(tokens, W, kD, xr, wr, outr, {}, nullptr); });
  print_row(layer.name, tokens, "activation GEMM, null vectors", flop, null_vectors, plain);
  const float layer_vectors =
      median_ms([&] { activation_gemm_bf16(tokens, W, kD, xr, wr, outr, with_vectors, nullptr); });
  print_row(layer.name, tokens, "activation GEMM, the layer's vectors", flop, layer_vectors, plain);

  // The whole chain through the public API: segments as column views of one buffer.
  out.poison();
  const std::vector<Tensor> outputs = column_views(out.view({tokens, W}), layer.segments);
  const Tensor xt = x.view({tokens, kD}), wt = weight.view({W, kD});
  const float chain =
      median_ms([&] { projection_chain_forward(xt, wt, std::nullopt, layer.segments, outputs); });
  print_row(layer.name, tokens, "projection_chain_forward (public API)", flop, chain, plain);
  EXPECT_TRUE(out.finite_prefix(64 * W));
}

// The projection backward's parts: the two gradient GEMMs alone, then the whole call
// (gather, derivative GEMM over the activation columns, the two GEMMs).
void time_projection_backward(const Layer& layer, int64_t tokens) {
  const int64_t W = layer.width();
  const double flop = 2.0 * tokens * W * kD;  // one of the two gradient GEMMs
  DeviceBf16 x(tokens * kD, 1.f), weight(W * kD, 0.03f), dy(tokens * W, 1.f), dz(tokens * W, 1.f);
  DeviceBf16 dx(tokens * kD, 0.f), dweight(W * kD, 0.f);
  using namespace seqmix::cuda;
  const float nn = median_ms([&] {
    gemm_nn_bf16(tokens, kD, W, Rows{dz.ptr, W}, Rows{weight.ptr, kD}, MutableRows{dx.ptr, kD}, nullptr);
  });
  print_row(layer.name, tokens, "bwd: dx = dz·W (nn)", flop, nn, nn);
  const float tn = median_ms([&] {
    gemm_tn_bf16(W, kD, tokens, Rows{dz.ptr, W}, Rows{x.ptr, kD}, MutableRows{dweight.ptr, kD}, nullptr);
  });
  print_row(layer.name, tokens, "bwd: dW = dzᵀ·x (tn)", flop, tn, nn);
  const std::vector<Tensor> d_outputs = column_views(dy.view({tokens, W}), layer.segments);
  const Tensor xt = x.view({tokens, kD}), wt = weight.view({W, kD});
  const ProjectionChainGrads grads{dx.view({tokens, kD}), dweight.view({W, kD}), std::nullopt};
  // The dW GEMM's tile as dispatched, and forced to the default (SEQMIX_CHAINS_TN_TILE=0).
  setenv("SEQMIX_CHAINS_TN_TILE", "0", 1);
  const float tn_default = median_ms([&] {
    gemm_tn_bf16(W, kD, tokens, Rows{dz.ptr, W}, Rows{x.ptr, kD}, MutableRows{dweight.ptr, kD}, nullptr);
  });
  const float chain_default =
      median_ms([&] { projection_chain_backward(xt, wt, std::nullopt, layer.segments, d_outputs, grads); });
  unsetenv("SEQMIX_CHAINS_TN_TILE");
  const float chain =
      median_ms([&] { projection_chain_backward(xt, wt, std::nullopt, layer.segments, d_outputs, grads); });
  print_row(layer.name, tokens, "bwd: dW (tn), the default tile forced", flop, tn_default, nn);
  print_row(layer.name, tokens, "projection_chain_backward, default dW tile", 2 * flop, chain_default, nn + tn);
  print_row(layer.name, tokens, "projection_chain_backward (2 GEMMs' FLOP)", 2 * flop, chain, nn + tn);
  std::printf("  %-15s %6lld  dispatched / default dW tile: tn %5.3f, chain backward %5.3f\n", layer.name,
              static_cast<long long>(tokens), tn / tn_default, chain / chain_default);
  EXPECT_TRUE(dx.finite_prefix(64 * kD));
}

// The projection backward with dz in pieces (the default) against the backward that gathers
// dz first (SEQMIX_CHAINS_BACKWARD_PIECES=0), alternated twice on the same operands.
void time_backward_pieces(const Layer& layer, int64_t tokens) {
  const int64_t W = layer.width();
  DeviceBf16 x(tokens * kD, 1.f), weight(W * kD, 0.03f), dy(tokens * W, 1.f), dx(tokens * kD, 0.f),
      dweight(W * kD, 0.f);
  const std::vector<Tensor> d_outputs = column_views(dy.view({tokens, W}), layer.segments);
  const Tensor xt = x.view({tokens, kD}), wt = weight.view({W, kD});
  const ProjectionChainGrads grads{dx.view({tokens, kD}), dweight.view({W, kD}), std::nullopt};
  const auto backward = [&] { projection_chain_backward(xt, wt, std::nullopt, layer.segments, d_outputs, grads); };
  float pieces[2], gathered[2];
  for (int round = 0; round < 2; ++round) {
    pieces[round] = median_ms(backward);
    setenv("SEQMIX_CHAINS_BACKWARD_PIECES", "0", 1);
    gathered[round] = median_ms(backward);
    unsetenv("SEQMIX_CHAINS_BACKWARD_PIECES");
  }
  const double flop = 4.0 * tokens * W * kD;
  std::printf("  %-15s %6lld  backward: pieces %.4f / %.4f ms (%.1f TFLOP/s), gathered %.4f / %.4f ms; "
              "pieces / gathered %.3f\n",
              layer.name, static_cast<long long>(tokens), pieces[0], pieces[1],
              flop / (std::min(pieces[0], pieces[1]) * 1e-3) / 1e12, gathered[0], gathered[1],
              (pieces[0] + pieces[1]) / (gathered[0] + gathered[1]));
  EXPECT_TRUE(dx.finite_prefix(64 * kD));
}

void time_output(const char* name, int64_t heads, int64_t dv, int64_t tokens) {
  const int64_t width = heads * dv;
  const double flop = 2.0 * tokens * width * kD;
  DeviceBf16 o(tokens * width, 1.f), g(tokens * width, 1.f), norm_weight(dv, 1.f), out_weight(kD * width, 0.03f),
      out_weight_kn(width * kD, 0.03f), y(tokens * kD, 0.f);
  using namespace seqmix::cuda;
  const float plain_nn = median_ms([&] {
    gemm_nn_bf16(tokens, kD, width, Rows{o.ptr, width}, Rows{out_weight_kn.ptr, kD}, MutableRows{y.ptr, kD}, nullptr);
  });
  const float plain = median_ms([&] {
    gemm_nt_bf16(tokens, kD, width, Rows{o.ptr, width}, Rows{out_weight.ptr, width}, MutableRows{y.ptr, kD}, nullptr);
  });
  print_row(name, tokens, "output: plain GEMM u·W_outᵀ", flop, plain, plain);
  print_row(name, tokens, "output: plain GEMM u·B (N-major B)", flop, plain_nn, plain);
  const float null_vectors = median_ms([&] {
    activation_gemm_bf16(tokens, kD, width, Rows{o.ptr, width}, Rows{out_weight.ptr, width}, MutableRows{y.ptr, kD},
                         {}, nullptr);
  });
  print_row(name, tokens, "output: activation GEMM, null vectors", flop, null_vectors, plain);
  y.poison();
  const OutputChainInputs in{o.view({tokens, heads, dv}), g.view({tokens, heads, dv}), norm_weight.view({dv}),
                             out_weight.view({kD, width})};
  const Tensor yt = y.view({tokens, kD});
  const float chain = median_ms([&] { output_chain_forward(in, yt); });
  print_row(name, tokens, "output_chain_forward (public API)", flop, chain, plain);
  EXPECT_TRUE(y.finite_prefix(64 * kD));
}

// GLA's low-rank gate as the bench runs it: u = the code segment of the main chain's
// output (a [tokens, 16] column view, row stride 6160), weight [1024, 16], logsigmoid / 16,
// bf16 out. The narrow kernel alone (vectors prepared once), the forward through the public
// API (the vectors filled per call) and the backward through the public API (gather, the
// derivative GEMM at K = 16, dx = dz·W at N = 16, dW = dzᵀ·u at N = 16). "floor": the
// forward's output bytes at 3 TB/s.
void time_low_rank_gate(int64_t tokens) {
  constexpr int64_t kMain = 6160, kRank = 16, kWidth = 1024;
  DeviceBf16 main_out(tokens * kMain, 1.f), weight(kWidth * kRank, 0.25f), gate(tokens * kWidth, 0.f);
  DeviceBf16 dgate(tokens * kWidth, 1.f), du(tokens * kRank, 0.f), dweight(kWidth * kRank, 0.f);
  const std::vector<ProjectionSegment> segments{{kWidth, Activation::logsigmoid, 16.0}};
  const Layer layer{"gate", segments};
  const ColumnVectors vectors(layer);
  using namespace seqmix::cuda;
  const Rows u{main_out.ptr + (kMain - kRank), kMain};
  const ColumnEpilogue columns{vectors.data, vectors.data + kWidth, vectors.data + 2 * kWidth};
  const double floor_ms = 2.0 * tokens * kWidth / 3e12 * 1e3;
  gate.poison();
  const float kernel = median_ms(
      [&] { narrow_projection_bf16(tokens, kWidth, kRank, u, Rows{weight.ptr, kRank}, MutableRows{gate.ptr, kWidth},
                                   columns, nullptr); });
  EXPECT_TRUE(gate.finite_prefix(64 * kWidth));
  Tensor ut = main_out.view({tokens, kMain});
  ut.data = main_out.ptr + (kMain - kRank);
  ut.shape = {tokens, kRank};
  const Tensor wt = weight.view({kWidth, kRank}), gt = gate.view({tokens, kWidth});
  const float forward = median_ms([&] { projection_chain_forward(ut, wt, std::nullopt, segments, {gt}); });
  const ProjectionChainGrads grads{du.view({tokens, kRank}), dweight.view({kWidth, kRank}), std::nullopt};
  // The separate path (default) and the one-pass backward (SEQMIX_CHAINS_NARROW_FUSED=1).
  setenv("SEQMIX_CHAINS_NARROW_FUSED", "0", 1);
  du.poison();
  const float backward_separate = median_ms(
      [&] { projection_chain_backward(ut, wt, std::nullopt, segments, {dgate.view({tokens, kWidth})}, grads); });
  EXPECT_TRUE(du.finite_prefix(64 * kRank));
  const std::vector<float> du_separate = first_rows(du, std::min<int64_t>(tokens, 256), kRank);
  setenv("SEQMIX_CHAINS_NARROW_FUSED", "1", 1);
  du.poison();
  const float one_pass = median_ms(
      [&] { projection_chain_backward(ut, wt, std::nullopt, segments, {dgate.view({tokens, kWidth})}, grads); });
  EXPECT_TRUE(du.finite_prefix(64 * kRank));
  unsetenv("SEQMIX_CHAINS_NARROW_FUSED");
  EXPECT_LT(relative_difference(first_rows(du, std::min<int64_t>(tokens, 256), kRank), du_separate), 1e-2);
  std::printf("  low-rank gate %6lld  backward (API): separate %8.4f ms, one pass %8.4f ms, one pass / separate "
              "%5.3f\n",
              static_cast<long long>(tokens), backward_separate, one_pass, one_pass / backward_separate);
  const float backward = backward_separate;
  std::printf("  low-rank gate %6lld  narrow kernel %8.4f ms  forward (API) %8.4f ms  backward (API) %8.4f ms  "
              "floor %8.4f ms  kernel / floor %5.2fx\n",
              static_cast<long long>(tokens), kernel, forward, backward, floor_ms, kernel / floor_ms);
  // The backward's parts, the CUTLASS GEMMs against the narrow kernels on the same operands.
  const Rows w{weight.ptr, kRank}, dz{dgate.ptr, kWidth};
  const MutableRows dz_out{dgate.ptr, kWidth}, du_out{du.ptr, kRank}, dw_out{dweight.ptr, kRank};
  const float gemm_derivative =
      median_ms([&] { derivative_gemm_bf16(tokens, kWidth, kRank, u, w, dz, dz_out, columns, nullptr); });
  const float narrow_derivative =
      median_ms([&] { narrow_derivative_bf16(tokens, kWidth, kRank, u, w, dz_out, columns, nullptr); });
  const float gemm_dx = median_ms([&] { gemm_nn_bf16(tokens, kRank, kWidth, dz, w, du_out, nullptr); });
  const float gemm_dw = median_ms([&] { gemm_tn_bf16(kWidth, kRank, tokens, dz, u, dw_out, nullptr); });
  const float narrow_grads =
      median_ms([&] { narrow_gradients_bf16(tokens, kWidth, kRank, u, w, dz, du_out, dw_out, nullptr); });
  std::printf("  low-rank gate %6lld  bwd parts: derivative GEMM %8.4f / narrow %8.4f ms;  dx (nn) %8.4f + dW (tn) "
              "%8.4f = %8.4f ms / narrow dx+dW %8.4f ms\n",
              static_cast<long long>(tokens), gemm_derivative, narrow_derivative, gemm_dx, gemm_dw, gemm_dx + gemm_dw,
              narrow_grads);
}

// ---- the forward GEMM's CUTLASS configuration per shape (NOTES.md, "Tile choice") ----

// Every tile × raster order × swizzle of one forward GEMM (nt, or the activation GEMM with
// `columns`) on out [M, N] = x [M, K]·weightᵀ; prints each against the default
// configuration and the fastest, and checks each output's first rows against the default's.
void time_tiles(const char* layer, const char* kernel, int64_t M, int64_t N, int64_t K, const DeviceBf16& x,
                const DeviceBf16& weight, DeviceBf16& out, const cuda::ColumnEpilogue* columns) {
  using namespace seqmix::cuda;
  const double flop = 2.0 * M * N * K;
  const Rows xr{x.ptr, K}, wr{weight.ptr, K};
  const MutableRows outr{out.ptr, N};
  auto launch = [&](GemmSchedule s) {
    if (columns) activation_gemm_bf16_scheduled(s, M, N, K, xr, wr, outr, *columns, nullptr);
    else gemm_nt_bf16_scheduled(s, M, N, K, xr, wr, outr, nullptr);
  };
  const int64_t sample = std::min<int64_t>(M, 128);
  out.poison();
  const float base = median_ms([&] { launch({}); });
  const std::vector<float> want = first_rows(out, sample, N);
  float best = base;
  GemmSchedule best_schedule{};
  for (int t = 0; t < kGemmTiles; ++t) {
    const auto tile = static_cast<GemmTile>(t);
    if (columns && !activation_tile_built(tile)) continue;
    for (Raster raster : {Raster::along_m, Raster::along_n})
      for (int swizzle : {1, 2, 8}) {
        const GemmSchedule s{tile, raster, swizzle};
        out.poison();
        const float ms = median_ms([&] { launch(s); });
        const double diff = relative_difference(first_rows(out, sample, N), want);
        EXPECT_LT(diff, 1e-2) << gemm_tile_name(tile);
        std::printf("  %-15s %6lld %5lld  %-10s %-32s %-9s swizzle %d  %8.4f ms  %6.1f TFLOP/s  %5.3fx default\n",
                    layer, static_cast<long long>(M), static_cast<long long>(N), kernel, gemm_tile_name(tile),
                    raster_name(raster), swizzle, ms, flop / (ms * 1e-3) / 1e12, ms / base);
        if (ms < best) best = ms, best_schedule = s;
      }
  }
  const GemmSchedule chosen = forward_schedule(M, N, K);
  out.poison();
  const float dispatched = median_ms([&] {
    if (columns) activation_gemm_bf16(M, N, K, xr, wr, outr, *columns, nullptr);
    else gemm_nt_bf16(M, N, K, xr, wr, outr, nullptr);
  });
  EXPECT_LT(relative_difference(first_rows(out, sample, N), want), 1e-2);
  std::printf("  %-15s %6lld %5lld  %-10s BEST %s, %s, swizzle %d: %.4f ms (%.1f TFLOP/s), %.3fx default; "
              "DISPATCH %s, %s, swizzle %d: %.4f ms, %.3fx default\n",
              layer, static_cast<long long>(M), static_cast<long long>(N), kernel, gemm_tile_name(best_schedule.tile),
              raster_name(best_schedule.raster), best_schedule.swizzle, best, flop / (best * 1e-3) / 1e12,
              best / base, gemm_tile_name(chosen.tile), raster_name(chosen.raster), chosen.swizzle, dispatched,
              dispatched / base);
}

// The projection chain's GEMM at issue 6's shapes (nt for GLA's all-identity chain, the
// activation GEMM for Gated DeltaNet's gates; both for GDN) and the output chain's o_proj
// (N = d = 2048 over K = H·Dv = 2048 at both layers).
TEST(ChainsCudaTiming, ForwardTiles) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) {
    for (const Layer* layer : {&kGla, &kGatedDeltaNet}) {
      const int64_t W = layer->width();
      DeviceBf16 x(tokens * kD, 1.f), weight(W * kD, 0.03f), out(tokens * W, 0.f);
      time_tiles(layer->name, "nt", tokens, W, kD, x, weight, out, nullptr);
      if (layer == &kGatedDeltaNet) {
        const ColumnVectors vectors(*layer);
        const cuda::ColumnEpilogue columns{vectors.data, vectors.data + W, vectors.data + 2 * W};
        time_tiles(layer->name, "activation", tokens, W, kD, x, weight, out, &columns);
      }
    }
    DeviceBf16 u(tokens * kD, 1.f), out_weight(kD * kD, 0.03f), y(tokens * kD, 0.f);
    time_tiles("output o_proj", "nt", tokens, kD, kD, u, out_weight, y, nullptr);
  }
}

TEST(ChainsCudaTiming, ProjectionForward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Layer* layer : {&kGla, &kGatedDeltaNet})
    for (int64_t tokens : {2048, 8192, 32768}) time_projection(*layer, tokens);
}

TEST(ChainsCudaTiming, ProjectionBackward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Layer* layer : {&kGla, &kGatedDeltaNet})
    for (int64_t tokens : {2048, 8192, 32768}) time_projection_backward(*layer, tokens);
}

TEST(ChainsCudaTiming, BackwardPieces) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const Layer* layer : {&kGla, &kGatedDeltaNet})
    for (int64_t tokens : {2048, 8192, 32768}) time_backward_pieces(*layer, tokens);
}

TEST(ChainsCudaTiming, LowRankGate) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) time_low_rank_gate(tokens);
}

// The output chain's backward through the public API against its two GEMMs alone (du =
// dy·W_out, dW_out = dyᵀ·u); the rest is the recompute of u and the norm-gate backward.
void time_output_backward(const char* name, int64_t heads, int64_t dv, int64_t tokens) {
  const int64_t width = heads * dv;
  const double flop = 2.0 * tokens * width * kD;
  DeviceBf16 o(tokens * width, 1.f), g(tokens * width, 1.f), norm_weight(dv, 1.f), out_weight(kD * width, 0.03f),
      dy(tokens * kD, 1.f), d_o(tokens * width, 0.f), dg(tokens * width, 0.f), dnorm(dv, 0.f),
      dout_weight(kD * width, 0.f), du(tokens * width, 0.f);
  using namespace seqmix::cuda;
  const float nn = median_ms([&] {
    gemm_nn_bf16(tokens, width, kD, Rows{dy.ptr, kD}, Rows{out_weight.ptr, width}, MutableRows{du.ptr, width},
                 nullptr);
  });
  const float tn = median_ms([&] {
    gemm_tn_bf16(kD, width, tokens, Rows{dy.ptr, kD}, Rows{o.ptr, width}, MutableRows{dout_weight.ptr, width},
                 nullptr);
  });
  const OutputChainInputs in{o.view({tokens, heads, dv}), g.view({tokens, heads, dv}), norm_weight.view({dv}),
                             out_weight.view({kD, width})};
  const OutputChainGrads grads{d_o.view({tokens, heads, dv}), dg.view({tokens, heads, dv}), dnorm.view({dv}),
                               dout_weight.view({kD, width})};
  // The norm-gate backward writing u on its pass (default) and the separate recompute pass
  // before it (SEQMIX_CHAINS_OUTPUT_FUSED=0), side by side.
  float chain[2];
  for (int fused = 0; fused < 2; ++fused) {
    setenv("SEQMIX_CHAINS_OUTPUT_FUSED", fused ? "1" : "0", 1);
    d_o.poison();
    chain[fused] = median_ms([&] { output_chain_backward(in, dy.view({tokens, kD}), grads); });
    EXPECT_TRUE(d_o.finite_prefix(64 * width));
  }
  unsetenv("SEQMIX_CHAINS_OUTPUT_FUSED");
  std::printf("  %-15s %6lld  output bwd: du (nn) %8.4f + dW_out (tn) %8.4f = %8.4f ms; output_chain_backward "
              "recompute pass %8.4f ms (%5.2fx the GEMMs), u from the norm-gate backward %8.4f ms (%5.2fx; "
              "%.1f TFLOP/s over 2 GEMMs); fused/recompute %5.3f\n",
              name, static_cast<long long>(tokens), nn, tn, nn + tn, chain[0], chain[0] / (nn + tn), chain[1],
              chain[1] / (nn + tn), 2 * flop / (chain[1] * 1e-3) / 1e12, chain[1] / chain[0]);
}

TEST(ChainsCudaTiming, OutputBackward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) {
    time_output_backward("gla", 4, 512, tokens);
    time_output_backward("gated_deltanet", 16, 256, tokens);
  }
}

TEST(ChainsCudaTiming, OutputForward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) {
    time_output("gla", 4, 512, tokens);
    time_output("gated_deltanet", 16, 256, tokens);
  }
}

// ---- the backward's tn GEMM (dW = dzᵀ·x, dW_out = dyᵀ·u) per tile (NOTES.md, "The dW GEMM") ----

// Every built tn tile × raster × swizzle on out [M, N] = aᵀ·b (a [K, M], b [K, N]), each
// against the default configuration and checked against its output's first rows.
void time_tn_tiles(const char* what, int64_t M, int64_t N, int64_t K) {
  using namespace seqmix::cuda;
  DeviceBf16 a(K * M, 1.f), b(K * N, 1.f), out(M * N, 0.f);
  const double flop = 2.0 * M * N * K;
  const Rows ar{a.ptr, M}, br{b.ptr, N};
  const MutableRows outr{out.ptr, N};
  const int64_t sample = std::min<int64_t>(M, 128);
  out.poison();
  const float base = median_ms([&] { gemm_tn_bf16_scheduled({}, M, N, K, ar, br, outr, nullptr); });
  const std::vector<float> want = first_rows(out, sample, N);
  float best = base;
  GemmSchedule best_schedule{};
  for (int t = 0; t < kGemmTiles; ++t) {
    const auto tile = static_cast<GemmTile>(t);
    if (!tn_tile_built(tile)) continue;
    for (Raster raster : {Raster::along_m, Raster::along_n})
      for (int swizzle : {1, 2}) {
        const GemmSchedule s{tile, raster, swizzle};
        out.poison();
        const float ms = median_ms([&] { gemm_tn_bf16_scheduled(s, M, N, K, ar, br, outr, nullptr); });
        EXPECT_LT(relative_difference(first_rows(out, sample, N), want), 1e-2) << gemm_tile_name(tile);
        std::printf("  %-22s %6lld %5lld %6lld  tn %-32s %-9s swizzle %d  %8.4f ms  %6.1f TFLOP/s  %5.3fx default\n",
                    what, static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                    gemm_tile_name(tile), raster_name(raster), swizzle, ms, flop / (ms * 1e-3) / 1e12, ms / base);
        if (ms < best) best = ms, best_schedule = s;
      }
  }
  float reference = NAN;
  if (cublas().ok) {
    out.poison();
    reference = median_ms([&] { cublas().tn(M, N, K, a.ptr, b.ptr, out.ptr); });
    EXPECT_LT(relative_difference(first_rows(out, sample, N), want), 1e-2) << "cuBLAS";
  }
  std::printf("  %-22s %6lld %5lld %6lld  tn BEST %s, %s, swizzle %d: %.4f ms (%.1f TFLOP/s), %.3fx default "
              "(%.1f TFLOP/s); cuBLAS %.4f ms (%.1f TFLOP/s), default ÷ cuBLAS %.3f, best ÷ cuBLAS %.3f\n",
              what, static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
              gemm_tile_name(best_schedule.tile), raster_name(best_schedule.raster), best_schedule.swizzle, best,
              flop / (best * 1e-3) / 1e12, best / base, flop / (base * 1e-3) / 1e12, reference,
              flop / (reference * 1e-3) / 1e12, base / reference, best / reference);
}

TEST(ChainsCudaTiming, BackwardTnTiles) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) {
    time_tn_tiles("gla dW", kGla.width(), kD, tokens);
    time_tn_tiles("gated_deltanet dW", kGatedDeltaNet.width(), kD, tokens);
    time_tn_tiles("gla dW_out", kD, 4 * 512, tokens);
    time_tn_tiles("gated_deltanet dW_out", kD, 16 * 256, tokens);
  }
}

// ---- Gated DeltaNet's gates on the narrow-column kernel (NOTES.md, "Narrow columns") ----

// The gate columns alone (32 bf16, 16 f32) on the activation GEMM and on the narrow kernel,
// and the whole GDN chain forward and backward with the narrow kernel on and off
// (SEQMIX_CHAINS_NARROW_COLUMNS), against the plain GEMM of the full width.
void time_narrow_columns(int64_t tokens) {
  using namespace seqmix::cuda;
  const Layer& layer = kGatedDeltaNet;
  const int64_t W = layer.width(), gates = 32, first = W - gates;
  const double flop = 2.0 * tokens * W * kD;
  DeviceBf16 x(tokens * kD, 1.f), weight(W * kD, 0.03f), out(tokens * W, 0.f), out32(tokens * gates * 2, 0.f);
  const ColumnVectors vectors(layer);
  const ColumnEpilogue gate_columns{vectors.data + first, vectors.data + W + first, vectors.data + 2 * W + first};
  const Rows xr{x.ptr, kD}, gate_weight{weight.ptr + first * kD, kD};
  const MutableRows gate_out{out.ptr + first, W}, gate_out32{out32.ptr, gates};
  const float plain = median_ms([&] { gemm_nt_bf16(tokens, W, kD, xr, Rows{weight.ptr, kD}, MutableRows{out.ptr, W},
                                                   nullptr); });
  const float cublas_ms =
      cublas().ok ? median_ms([&] { cublas().nt(tokens, W, kD, x.ptr, weight.ptr, out.ptr); }) : NAN;
  const float gemm_bf16 = median_ms(
      [&] { activation_gemm_bf16(tokens, gates, kD, xr, gate_weight, gate_out, gate_columns, nullptr); });
  const float narrow_bf16 =
      median_ms([&] { narrow_columns_bf16(tokens, gates, kD, xr, gate_weight, gate_out, gate_columns, nullptr); });
  const float gemm_f32 = median_ms([&] {
    activation_gemm_bf16_f32out(tokens, 16, kD, xr, gate_weight, gate_out32, gate_columns, nullptr);
  });
  const float narrow_f32 =
      median_ms([&] { narrow_columns_f32out(tokens, 16, kD, xr, gate_weight, gate_out32, gate_columns, nullptr); });
  const float x_floor = 2.0 * tokens * kD / 3e12 * 1e3;
  std::printf("  gates %6lld  32 bf16 columns: activation GEMM %8.4f ms, narrow %8.4f ms;  16 f32 columns: GEMM "
              "%8.4f ms, narrow %8.4f ms;  x read at 3 TB/s %8.4f ms\n",
              static_cast<long long>(tokens), gemm_bf16, narrow_bf16, gemm_f32, narrow_f32, x_floor);

  DeviceBf16 dy(tokens * W, 1.f), dx(tokens * kD, 0.f), dweight(W * kD, 0.f);
  const std::vector<Tensor> outputs = column_views(out.view({tokens, W}), layer.segments);
  const std::vector<Tensor> d_outputs = column_views(dy.view({tokens, W}), layer.segments);
  const Tensor xt = x.view({tokens, kD}), wt = weight.view({W, kD});
  const ProjectionChainGrads grads{dx.view({tokens, kD}), dweight.view({W, kD}), std::nullopt};
  // Off and on alternate three times (the 32768-token chain drifted by ~10% between two
  // back-to-back measurements in the first run); each is the median of its three medians.
  std::vector<float> times[2][2];
  for (int rep = 0; rep < 3; ++rep)
    for (int on = 0; on < 2; ++on) {
      setenv("SEQMIX_CHAINS_NARROW_COLUMNS", on ? "1" : "0", 1);
      out.poison();
      times[0][on].push_back(
          median_ms([&] { projection_chain_forward(xt, wt, std::nullopt, layer.segments, outputs); }));
      EXPECT_TRUE(out.finite_prefix(64 * W));
      times[1][on].push_back(median_ms(
          [&] { projection_chain_backward(xt, wt, std::nullopt, layer.segments, d_outputs, grads); }));
    }
  unsetenv("SEQMIX_CHAINS_NARROW_COLUMNS");
  float forward[2], backward[2];
  for (int on = 0; on < 2; ++on) {
    for (auto* v : {&times[0][on], &times[1][on]}) std::sort(v->begin(), v->end());
    forward[on] = times[0][on][1];
    backward[on] = times[1][on][1];
    std::printf("  gated_deltanet %6lld  narrow %s: fwd %8.4f %8.4f %8.4f ms, bwd %8.4f %8.4f %8.4f ms\n",
                static_cast<long long>(tokens), on ? "on " : "off", times[0][on][0], times[0][on][1],
                times[0][on][2], times[1][on][0], times[1][on][1], times[1][on][2]);
  }
  std::printf("  gated_deltanet %6lld  chain fwd: narrow off %8.4f ms (%5.3fx plain), on %8.4f ms (%5.3fx plain), "
              "on/off %5.3f;  bwd: off %8.4f ms, on %8.4f ms, on/off %5.3f;  plain GEMM %8.4f ms (%.1f TFLOP/s)\n",
              static_cast<long long>(tokens), forward[0], forward[0] / plain, forward[1], forward[1] / plain,
              forward[1] / forward[0], backward[0], backward[1], backward[1] / backward[0], plain,
              flop / (plain * 1e-3) / 1e12);
  std::printf("  gated_deltanet %6lld  cuBLAS GEMM of the full width %8.4f ms (%.1f TFLOP/s): chain fwd ÷ cuBLAS "
              "narrow off %5.3f, on %5.3f; plain CUTLASS ÷ cuBLAS %5.3f\n",
              static_cast<long long>(tokens), cublas_ms, flop / (cublas_ms * 1e-3) / 1e12, forward[0] / cublas_ms,
              forward[1] / cublas_ms, plain / cublas_ms);
}

TEST(ChainsCudaTiming, NarrowColumns) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int64_t tokens : {2048, 8192, 32768}) time_narrow_columns(tokens);
}

}  // namespace
}  // namespace seqmix::test
