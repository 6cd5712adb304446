// Where the projection chain's forward time goes, at issue 6's shapes (d = 2048; GLA:
// W_total 6160, all identity; Gated DeltaNet: W_total 12320, the last 32 columns softplus
// and sigmoid; tokens 2048, 8192, 32768; bf16): the bare CUTLASS GEMMs with a plain
// epilogue against the activation GEMM (null vectors and the layer's vectors) and the
// whole chain call, all on the same operands in one process; and the output chain's parts.
// Printed as a table; run with --gtest_filter='*ChainsCudaTiming*'. Asserts only that every
// time was measured and the outputs are finite: the numbers are for NOTES.md.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/chains/narrow_projection.hpp"
#include "cuda/chains/params.hpp"
#include "cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {
namespace {

// A device buffer of `count` bf16 values drawn from U(-scale, scale): a random host block
// copied over and over (generating hundreds of millions of values on the host would take
// longer than the whole measurement). Never zeros: they run faster than real data.
struct DeviceBf16 {
  __nv_bfloat16* ptr = nullptr;
  int64_t count = 0;
  DeviceBf16(int64_t n, float scale) : count(n) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(__nv_bfloat16)));
    const int64_t block = std::min<int64_t>(n, int64_t(1) << 22);
    std::vector<__nv_bfloat16> host(block);
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (auto& v : host) v = __float2bfloat16(dist(rng));
    for (int64_t at = 0; at < n; at += block)
      cuda_ok(cudaMemcpy(ptr + at, host.data(), std::min(block, n - at) * sizeof(__nv_bfloat16),
                         cudaMemcpyHostToDevice));
  }
  ~DeviceBf16() { cudaFree(ptr); }
  DeviceBf16(const DeviceBf16&) = delete;
  DeviceBf16& operator=(const DeviceBf16&) = delete;
  Tensor view(std::vector<int64_t> shape) const {
    return Tensor::contiguous(ptr, DType::bf16, std::move(shape), Device::cuda(0));
  }
  // Every value finite (a sample of the first rows is enough to catch an unwritten buffer).
  bool finite_prefix(int64_t n) const {
    std::vector<__nv_bfloat16> host(std::min(n, count));
    if (cudaMemcpy(host.data(), ptr, host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost) != cudaSuccess)
      return false;
    return std::all_of(host.begin(), host.end(), [](auto v) { return std::isfinite(__bfloat162float(v)); });
  }
  void poison() { cuda_ok(cudaMemset(ptr, 0xff, count * sizeof(__nv_bfloat16))); }  // bf16 NaN
};

// Median of CUDA-event times of `run` (3 warm-up calls, 10 timed), the L2 cache flushed
// (256 MiB written) before each timed call, outside the timed region.
float median_ms(const std::function<void()>& run) { return test::median_ms(run, {.reps = 10, .warmups = 3}); }

struct Layer {
  const char* name;
  std::vector<ProjectionSegment> segments;
  int64_t width() const {
    int64_t n = 0;
    for (const auto& s : segments) n += s.width;
    return n;
  }
};

const Layer kGla{"gla", {{1024, Activation::identity, 1.0}, {1024, Activation::identity, 1.0},
                         {2048, Activation::identity, 1.0}, {2048, Activation::identity, 1.0},
                         {16, Activation::identity, 1.0}}};
const Layer kGatedDeltaNet{"gated_deltanet", {{2048, Activation::identity, 1.0}, {2048, Activation::identity, 1.0},
                                              {4096, Activation::identity, 1.0}, {4096, Activation::identity, 1.0},
                                              {16, Activation::softplus, 1.0}, {16, Activation::sigmoid, 1.0}}};
constexpr int64_t kD = 2048;

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
  std::vector<Tensor> outputs;
  int64_t first = 0;
  for (const auto& s : layer.segments) {
    Tensor v = out.view({tokens, W});
    v.data = out.ptr + first;
    v.shape = {tokens, s.width};
    outputs.push_back(v);
    first += s.width;
  }
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
  std::vector<Tensor> d_outputs;
  int64_t first = 0;
  for (const auto& s : layer.segments) {
    Tensor v = dy.view({tokens, W});
    v.data = dy.ptr + first;
    v.shape = {tokens, s.width};
    d_outputs.push_back(v);
    first += s.width;
  }
  const Tensor xt = x.view({tokens, kD}), wt = weight.view({W, kD});
  const ProjectionChainGrads grads{dx.view({tokens, kD}), dweight.view({W, kD}), std::nullopt};
  const float chain =
      median_ms([&] { projection_chain_backward(xt, wt, std::nullopt, layer.segments, d_outputs, grads); });
  print_row(layer.name, tokens, "projection_chain_backward (2 GEMMs' FLOP)", 2 * flop, chain, nn + tn);
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
  const float backward = median_ms(
      [&] { projection_chain_backward(ut, wt, std::nullopt, segments, {dgate.view({tokens, kWidth})}, grads); });
  EXPECT_TRUE(du.finite_prefix(64 * kRank));
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

// The first rows of a bf16 device matrix [rows, width], on the host.
std::vector<float> first_rows(const DeviceBf16& m, int64_t rows, int64_t width) {
  std::vector<__nv_bfloat16> host(rows * width);
  cuda_ok(cudaMemcpy(host.data(), m.ptr, host.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  std::vector<float> values(host.size());
  for (size_t i = 0; i < host.size(); ++i) values[i] = __bfloat162float(host[i]);
  return values;
}

double relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

const char* raster_name(cuda::Raster r) {
  return r == cuda::Raster::along_m ? "along M" : r == cuda::Raster::along_n ? "along N" : "heuristic";
}

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
  d_o.poison();
  const float chain = median_ms([&] { output_chain_backward(in, dy.view({tokens, kD}), grads); });
  std::printf("  %-15s %6lld  output bwd: du (nn) %8.4f + dW_out (tn) %8.4f = %8.4f ms; output_chain_backward "
              "%8.4f ms (%5.2fx the GEMMs; %.1f TFLOP/s over 2 GEMMs)\n",
              name, static_cast<long long>(tokens), nn, tn, nn + tn, chain, chain / (nn + tn),
              2 * flop / (chain * 1e-3) / 1e12);
  EXPECT_TRUE(d_o.finite_prefix(64 * width));
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

}  // namespace
}  // namespace seqmix::test
