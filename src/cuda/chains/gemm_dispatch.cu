// The chain GEMMs' choice of CUTLASS configuration per shape (gemm_tiles.hpp), and the
// switch from a runtime GemmTile to its instantiation. No CUTLASS here: each tile's kernel
// is compiled once, in its own .cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/chains/dependent_launch.hpp"
#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/common/environment.hpp"
#include "seqmix/error.hpp"

namespace seqmix::cuda {

const char* gemm_tile_name(GemmTile tile) {
  switch (tile) {
    case GemmTile::cooperative_128x256_cluster2x1: return "cooperative 128x256 cluster 2x1";
    case GemmTile::cooperative_128x256_cluster1x2: return "cooperative 128x256 cluster 1x2";
    case GemmTile::cooperative_256x128_cluster2x1: return "cooperative 256x128 cluster 2x1";
    case GemmTile::cooperative_256x128_cluster1x2: return "cooperative 256x128 cluster 1x2";
    case GemmTile::pingpong_128x128_cluster2x1: return "pingpong 128x128 cluster 2x1";
    case GemmTile::pingpong_128x128_cluster1x1: return "pingpong 128x128 cluster 1x1";
    case GemmTile::cooperative_256x192_cluster2x1: return "cooperative 256x192 cluster 2x1";
    case GemmTile::cooperative_256x160_cluster2x1: return "cooperative 256x160 cluster 2x1";
  }
  return "unknown tile";
}

namespace {

// The tiles one GEMM has a kernel for (each instantiated in its own .cu): whether a runtime
// tile is among them, and the call of its instantiation. One list per GEMM, so the check
// and the switch cannot disagree.
template <GemmTile... kTiles>
struct BuiltTiles {
  static constexpr bool contains(GemmTile tile) { return ((tile == kTiles) || ...); }
  // Calls launch(std::integral_constant<GemmTile, tile>) for a built tile; false otherwise.
  template <class Launch>
  static bool launch(GemmTile tile, Launch&& launch) {
    return ((tile == kTiles && (launch(std::integral_constant<GemmTile, kTiles>{}), true)) || ...);
  }
};

using NtTiles = BuiltTiles<GemmTile::cooperative_128x256_cluster2x1, GemmTile::cooperative_128x256_cluster1x2,
                           GemmTile::cooperative_256x128_cluster2x1, GemmTile::cooperative_256x128_cluster1x2,
                           GemmTile::pingpong_128x128_cluster2x1, GemmTile::pingpong_128x128_cluster1x1,
                           GemmTile::cooperative_256x192_cluster2x1, GemmTile::cooperative_256x160_cluster2x1>;
using ActivationTiles = BuiltTiles<GemmTile::cooperative_128x256_cluster2x1, GemmTile::cooperative_256x128_cluster2x1,
                                   GemmTile::pingpong_128x128_cluster2x1>;
using TnTiles = BuiltTiles<GemmTile::cooperative_128x256_cluster2x1, GemmTile::cooperative_256x128_cluster2x1,
                           GemmTile::cooperative_128x256_cluster1x2, GemmTile::pingpong_128x128_cluster2x1>;
// The two tiles backward_tn_schedule picks between.
using TnPiecesTiles = BuiltTiles<GemmTile::cooperative_128x256_cluster2x1, GemmTile::cooperative_128x256_cluster1x2>;

}  // namespace

void gemm_nt_bf16_scheduled(GemmSchedule s, int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out,
                            void* stream) {
  const bool built = NtTiles::launch(s.tile, [&](auto tile) {
    gemm_nt_bf16_tiled<decltype(tile)::value>(M, N, K, a, b, out, s, stream);
  });
  if (!built) throw Error(std::string("seqmix: chain GEMM (nt): no kernel for ") + gemm_tile_name(s.tile));
}

bool activation_tile_built(GemmTile tile) { return ActivationTiles::contains(tile); }

void activation_gemm_bf16_scheduled(GemmSchedule s, int64_t M, int64_t N, int64_t K, Rows x, Rows weight,
                                    MutableRows out, ColumnEpilogue columns, void* stream) {
  const bool built = ActivationTiles::launch(s.tile, [&](auto tile) {
    activation_gemm_bf16_tiled<decltype(tile)::value>(M, N, K, x, weight, out, columns, s, stream);
  });
  if (!built)
    throw Error(std::string("seqmix: projection chain GEMM: no activation kernel for ") + gemm_tile_name(s.tile));
}

bool tn_tile_built(GemmTile tile) { return TnTiles::contains(tile); }

void gemm_tn_bf16_scheduled(GemmSchedule s, int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out,
                            void* stream) {
  const bool built = TnTiles::launch(s.tile, [&](auto tile) {
    gemm_tn_bf16_tiled<decltype(tile)::value>(M, N, K, a, b, out, s, stream);
  });
  if (!built) throw Error(std::string("seqmix: chain gradient GEMM (tn): no kernel for ") + gemm_tile_name(s.tile));
}

// CUTLASS's scheduler pads each index of the tile grid to a multiple of swizzle × cluster,
// and the SMs hold sms / (cm·cn) clusters at a time.
int64_t schedule_rounds(GemmSchedule s, int64_t M, int64_t N, int sms) {
  const TileGeometry g = tile_geometry(s.tile);
  const auto padded = [](int64_t tiles, int64_t multiple) { return (tiles + multiple - 1) / multiple * multiple; };
  const int64_t clusters = padded((M + g.rows - 1) / g.rows, int64_t(s.swizzle) * g.cluster_m) / g.cluster_m *
                           (padded((N + g.columns - 1) / g.columns, int64_t(s.swizzle) * g.cluster_n) / g.cluster_n);
  const int64_t slots = std::max(1, sms / (g.cluster_m * g.cluster_n));
  return (clusters + slots - 1) / slots;
}

int dispatch_sm_count() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 132;
  return sms;
}

// Measured on the H100 (ChainsCudaTiming.BackwardTnTiles, NOTES.md "The dW GEMM"): at GLA's
// width (6160 rows: 49 row tiles) the default's clusters of 2 along M pad the grid to 50 row
// tiles, 400 tiles: 3.03 rounds on 132 SMs, so a fourth round of 4 tiles; clusters of 2
// along N keep 392 tiles, 3 rounds, and ran 0.77-0.79× the default's time at 2048-32768
// tokens (552-637 -> 715-807 TFLOP/s). Where both take as many rounds (Gated DeltaNet's
// width, the output chain's dW_out) the default was as fast or faster, so it stays.
GemmSchedule backward_tn_schedule(int64_t M, int64_t N, int64_t /*K*/) {
  if (const char* forced = std::getenv("SEQMIX_CHAINS_TN_TILE")) {
    const int t = std::atoi(forced);
    if (t >= 0 && t < kGemmTiles && tn_tile_built(static_cast<GemmTile>(t))) return {static_cast<GemmTile>(t)};
  }
  const int sms = dispatch_sm_count();
  const GemmSchedule along_n{GemmTile::cooperative_128x256_cluster1x2, Raster::along_n, 1};
  if (schedule_rounds(along_n, M, N, sms) < schedule_rounds({}, M, N, sms)) return along_n;
  return {};
}

void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream,
                  bool programmatic) {
  GemmSchedule s = backward_tn_schedule(M, N, K);
  s.programmatic = programmatic && programmatic_launch_enabled();
  gemm_tn_bf16_scheduled(s, M, N, K, a, b, out, stream);
}

// A tile forced by SEQMIX_CHAINS_TN_TILE that has no pieces kernel runs in the default.
void gemm_tn_bf16_pieces(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                         void* stream) {
  GemmSchedule s = backward_tn_schedule(M, N, K);
  if (!TnPiecesTiles::contains(s.tile)) s = {};
  TnPiecesTiles::launch(s.tile, [&](auto tile) {
    gemm_tn_bf16_pieces_tiled<decltype(tile)::value>(M, N, K, a, b, out, s, stream);
  });
}

// Measured on the H100 (ChainsCudaTiming.ForwardTiles, NOTES.md "Tile choice, measured"),
// d = 2048: up to ~3k tokens, 256 × 128 along M fills the 132 SMs in 3 rounds where
// 128 × 256 needs a fourth, nearly empty one at GLA's width (0.78× the default's time);
// up to 16k tokens, 256 × 128 along N with a swizzle of 2 was 0.89-0.95× at both layer
// widths; beyond, the default was best. Differences under ~5% are within run-to-run noise.
// With SEQMIX_CHAINS_FORWARD_ROUNDS=1 the rounds decide (NOTES.md, "Where the forward's gap
// is"): the swizzle of 2 pads the column tiles to an even count, which at GLA's 49 column
// tiles of 128 (6160 columns) and 8192 tokens made 1600 tiles, 13 rounds instead of 12, so
// it is taken only where it costs no round; above 16k tokens 256 × 128 along N replaces the
// default where it needs fewer rounds (GLA 32768: 48 against 49).
bool programmatic_launch_enabled() { return flag_from_environment("SEQMIX_CHAINS_PDL", true); }

bool forward_rounds_enabled() { return flag_from_environment("SEQMIX_CHAINS_FORWARD_ROUNDS", true); }

namespace {

// The schedule of the tall and default tiles (every forward GEMM has kernels for both).
GemmSchedule tall_or_default_schedule(int64_t M, int64_t N) {
  constexpr GemmTile kTall = GemmTile::cooperative_256x128_cluster2x1;
  if (M <= 3072) return {kTall, Raster::along_m, 1};
  const bool by_rounds = forward_rounds_enabled();
  const int sms = by_rounds ? dispatch_sm_count() : 132;
  const auto tall_rounds = [&](int swizzle) { return schedule_rounds({kTall, Raster::along_n, swizzle}, M, N, sms); };
  if (M <= 16384) return {kTall, Raster::along_n, !by_rounds || tall_rounds(2) <= tall_rounds(1) ? 2 : 1};
  if (by_rounds && tall_rounds(1) < schedule_rounds({}, M, N, sms)) return {kTall, Raster::along_n, 1};
  return {GemmTile::cooperative_128x256_cluster2x1, Raster::heuristic, 1};
}

// The projections' GEMMs (N ≥ 4096) above 3k tokens on the 256 × 192 tile along N (below,
// along M where its rounds allow: schedule_without_160), measured
// on the H100 (NOTES.md, "The 256 × 192 tile"; replays interleaved): up to 16k tokens 0.96×
// the tall tile's time at GLA's width (no swizzle: its 33 column tiles padded to 34 would add
// a round) and 0.98–0.99× at GDN's (a swizzle of 2, which adds no round there); above, only
// where the weights stay in L2 while the bands of rows go by (GLA's 25 MB: 0.99× at 32768
// tokens; GDN's 50 MB: 1.01–1.02× without a swizzle, 0.99–1.00× with one), so those keep the
// tall or default tile. Only the nt GEMM has this tile. SEQMIX_CHAINS_WIDE_TILE=0 turns it off.
bool wide_tile_enabled() { return flag_from_environment("SEQMIX_CHAINS_WIDE_TILE", true); }

// Above 3k tokens, 256 × 160 along N where the work its rounds hold (rounds × tile area) is
// less than the choice by the rules above: cuBLAS's tile at GDN's 12320 columns (77 column
// tiles, none padded), measured on the H100 at 0.988× the 256 × 192 tile at 8192 tokens and
// 0.983× the tall tile at 32768 (NOTES.md, "The 256 × 160 tile"), and within 0.1 % of 256 × 192
// at GLA's 32768, where the count ties. SEQMIX_CHAINS_TILE_160=0 turns it off.
bool tile_160_enabled() { return flag_from_environment("SEQMIX_CHAINS_TILE_160", true); }

// A wide tile along N above 3k tokens: a swizzle of 2 up to 16k tokens where it adds no round
// (for L2 reuse across the band of rows), none beyond.
GemmSchedule along_n_schedule(GemmTile tile, int64_t M, int64_t N, int sms) {
  const auto rounds = [&](int swizzle) { return schedule_rounds({tile, Raster::along_n, swizzle}, M, N, sms); };
  return {tile, Raster::along_n, M <= 16384 && rounds(2) <= rounds(1) ? 2 : 1};
}

// The choice by the rules above, before forward_schedule weighs the 256 × 160 tile against it.
GemmSchedule schedule_without_160(int64_t M, int64_t N, int64_t K) {
  constexpr GemmTile kWide = GemmTile::cooperative_256x192_cluster2x1;
  constexpr int64_t kL2ResidentWeightBytes = int64_t(32) << 20;
  if (M <= 3072 && N >= 4096 && forward_rounds_enabled() && wide_tile_enabled()) {
    // Up to 3k tokens: along M, where its rounds hold no more work than the tall tile's (one
    // 256 × 192 tile is 1.5 tall ones). At 2048 tokens that is 2 rounds against 3 for GLA's
    // 6160 columns and 4 against 6 for GDN's 12320, measured 0.987–0.995× the tall tile on
    // the H100; at a few hundred tokens one round of fewer, larger tiles would leave SMs idle.
    const int sms = dispatch_sm_count();
    const GemmSchedule wide{kWide, Raster::along_m, 1};
    const GemmSchedule tall = tall_or_default_schedule(M, N);
    if (3 * schedule_rounds(wide, M, N, sms) <= 2 * schedule_rounds(tall, M, N, sms)) return wide;
    return tall;
  }
  if (M > 3072 && N >= 4096 && forward_rounds_enabled() && wide_tile_enabled() &&
      (M <= 16384 || N * K * 2 <= kL2ResidentWeightBytes))
    return along_n_schedule(kWide, M, N, dispatch_sm_count());
  return tall_or_default_schedule(M, N);
}

}  // namespace

GemmSchedule forward_schedule(int64_t M, int64_t N, int64_t K) {
  const GemmSchedule chosen = schedule_without_160(M, N, K);
  if (M <= 3072 || N < 4096 || !forward_rounds_enabled() || !tile_160_enabled()) return chosen;
  const int sms = dispatch_sm_count();
  const GemmSchedule narrow = along_n_schedule(GemmTile::cooperative_256x160_cluster2x1, M, N, sms);
  const auto work = [&](GemmSchedule s) {
    const TileGeometry g = tile_geometry(s.tile);
    return schedule_rounds(s, M, N, sms) * g.rows * g.columns;
  };
  return work(narrow) < work(chosen) ? narrow : chosen;
}

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream,
                  bool programmatic) {
  GemmSchedule s = forward_schedule(M, N, K);
  s.programmatic = programmatic && programmatic_launch_enabled();
  gemm_nt_bf16_scheduled(s, M, N, K, a, b, out, stream);
}

void activation_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                          ColumnEpilogue columns, void* stream) {
  GemmSchedule s = forward_schedule(M, N, K);
  if (!activation_tile_built(s.tile)) s = tall_or_default_schedule(M, N);
  activation_gemm_bf16_scheduled(s, M, N, K, x, weight, out, columns, stream);
}

}  // namespace seqmix::cuda
