// The CUTLASS configurations the chains' forward GEMMs can run in, and the per-shape choice
// between them (gemm_dispatch.cu). Plain C++ (no CUDA or CUTLASS types): the timing test
// names the candidates through it. NOTES.md ("Tile choice") has the measurements.
#pragma once

#include <cstdint>

#include "cuda/chains/params.hpp"

namespace seqmix::cuda {

// CTA tile (M × N, K step 64), kernel schedule and cluster (M × N CTAs). Cooperative: both
// consumer warpgroups share one tile and then run its epilogue together; pingpong: each
// warpgroup owns a tile, so one's epilogue runs under the other's mainloop. A cluster of
// two along M multicasts the weight tile (B) to both CTAs, along N the token tile (A).
enum class GemmTile : int {
  cooperative_128x256_cluster2x1,  // the default of every chain GEMM
  cooperative_128x256_cluster1x2,
  cooperative_256x128_cluster2x1,
  cooperative_256x128_cluster1x2,
  pingpong_128x128_cluster2x1,
  pingpong_128x128_cluster1x1,
  // cuBLAS's nvjet kernels take 192- and 256-wide tiles at these widths; 256 × 192 reads the
  // least shared memory a MAC of the cooperative tiles whose accumulators fit (192 floats a
  // consumer thread). NOTES.md, "The 256 × 192 tile".
  cooperative_256x192_cluster2x1,
  // cuBLAS's choice at Gated DeltaNet's 12320 columns (nvjet 160 × 256, 4 stages, clusters of
  // 2 along the tokens): 77 column tiles with no padding. NOTES.md, "The 256 × 160 tile".
  cooperative_256x160_cluster2x1,
};
constexpr int kGemmTiles = 8;
const char* gemm_tile_name(GemmTile tile);

// A tile's shape in plain numbers (the tile scheduler's arithmetic on the host): CTA tile
// rows × columns, cluster CTAs along M × along N, in GemmTile's order.
struct TileGeometry {
  int rows, columns, cluster_m, cluster_n;
};
inline constexpr TileGeometry kTileGeometry[kGemmTiles] = {
    {128, 256, 2, 1}, {128, 256, 1, 2}, {256, 128, 2, 1}, {256, 128, 1, 2}, {128, 128, 2, 1}, {128, 128, 1, 1},
    {256, 192, 2, 1}, {256, 160, 2, 1},
};
inline constexpr TileGeometry tile_geometry(GemmTile tile) { return kTileGeometry[static_cast<int>(tile)]; }

// The persistent tile scheduler's order: which index of the tile grid runs fastest
// (heuristic: along M when there are more column tiles than row tiles), and the swizzle
// (1, 2, 4 or 8 tiles of the other index visited together, for L2 reuse).
enum class Raster : int { heuristic, along_m, along_n };
struct GemmSchedule {
  GemmTile tile = GemmTile::cooperative_128x256_cluster2x1;
  Raster raster = Raster::heuristic;
  int swizzle = 1;
  // Launched as a programmatic dependent of the stream's previous kernel (PDL): its CTAs may
  // start, set up and wait while that kernel finishes (dependent_launch.cuh).
  bool programmatic = false;
};

// The schedule the forward GEMMs (gemm_nt_bf16, activation_gemm_bf16) use for a problem
// of M rows (tokens), N columns and depth K. It may name the 256 × 192 tile, which only the
// nt GEMM has: the activation GEMM then takes the schedule the dispatch would give without it.
GemmSchedule forward_schedule(int64_t M, int64_t N, int64_t K);

// Rounds of tiles a schedule takes over out [M, N] on `sms` SMs: its clusters, the tile grid
// padded as CUTLASS's persistent scheduler pads it (gemm_dispatch.cu), over the clusters the
// SMs hold at a time.
int64_t schedule_rounds(GemmSchedule schedule, int64_t M, int64_t N, int sms);

// The SM count forward_schedule counts rounds on: the current device's, or an H100's 132
// where none can be asked.
int dispatch_sm_count();

// out [M, N] = a·bᵀ (as gemm_nt_bf16) in a given schedule; every GemmTile is built.
void gemm_nt_bf16_scheduled(GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows a, Rows b,
                            MutableRows out, void* stream);
// out = act(x·weightᵀ + bias)·scale (as activation_gemm_bf16) in a given schedule; built
// for the tiles activation_tile_built says (a seqmix::Error names the others).
void activation_gemm_bf16_scheduled(GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows x, Rows weight,
                                    MutableRows out, ColumnEpilogue columns, void* stream);
bool activation_tile_built(GemmTile tile);

// The backward's tn GEMM (out [M, N] = aᵀ·b, as gemm_tn_bf16: dW = dzᵀ·x with K = tokens)
// in a given schedule; built for the tiles tn_tile_built says.
void gemm_tn_bf16_scheduled(GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows a, Rows b,
                            MutableRows out, void* stream);
bool tn_tile_built(GemmTile tile);
// The schedule gemm_tn_bf16 uses for out [M, N] over depth K. SEQMIX_CHAINS_TN_TILE=<n>
// (a GemmTile's number; raster and swizzle the heuristic's) overrides it, for tests.
GemmSchedule backward_tn_schedule(int64_t M, int64_t N, int64_t K);

// One instantiation per tile, each in its own .cu (gemm_nt_bf16*.cu, gemm_tn_bf16*.cu,
// gemm_tn_bf16_pieces*.cu, projection_gemm_bf16*.cu).
template <GemmTile kTile>
void gemm_nt_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, GemmSchedule schedule,
                        void* stream);
template <GemmTile kTile>
void gemm_tn_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, GemmSchedule schedule,
                        void* stream);
template <GemmTile kTile>
void gemm_tn_bf16_pieces_tiled(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                               GemmSchedule schedule, void* stream);
template <GemmTile kTile>
void activation_gemm_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                                ColumnEpilogue columns, GemmSchedule schedule, void* stream);

}  // namespace seqmix::cuda
