// The forward GEMMs' choice of CUTLASS configuration per shape (gemm_tiles.hpp), and the
// switch from a runtime GemmTile to its instantiation. No CUTLASS here: each tile's kernel
// is compiled once, in its own .cu.
#include <string>

#include "cuda/chains/gemm_tiles.hpp"
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
  }
  return "unknown tile";
}

// Measured on the H100 (ChainsCudaTiming.ForwardTiles, NOTES.md "Tile choice, measured"),
// d = 2048: up to ~3k tokens, 256 × 128 along M fills the 132 SMs in 3 rounds where
// 128 × 256 needs a fourth, nearly empty one at GLA's width (0.78× the default's time);
// up to 16k tokens, 256 × 128 along N with a swizzle of 2 was 0.89-0.95× at both layer
// widths; beyond, the default was best. Differences under ~5% are within run-to-run noise.
GemmSchedule forward_schedule(int64_t M, int64_t /*N*/, int64_t /*K*/) {
  if (M <= 3072) return {GemmTile::cooperative_256x128_cluster2x1, Raster::along_m, 1};
  if (M <= 16384) return {GemmTile::cooperative_256x128_cluster2x1, Raster::along_n, 2};
  return {GemmTile::cooperative_128x256_cluster2x1, Raster::heuristic, 1};
}

void gemm_nt_bf16_scheduled(GemmSchedule s, int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out,
                            void* stream) {
  switch (s.tile) {
    case GemmTile::cooperative_128x256_cluster2x1:
      return gemm_nt_bf16_tiled<GemmTile::cooperative_128x256_cluster2x1>(M, N, K, a, b, out, s, stream);
    case GemmTile::cooperative_128x256_cluster1x2:
      return gemm_nt_bf16_tiled<GemmTile::cooperative_128x256_cluster1x2>(M, N, K, a, b, out, s, stream);
    case GemmTile::cooperative_256x128_cluster2x1:
      return gemm_nt_bf16_tiled<GemmTile::cooperative_256x128_cluster2x1>(M, N, K, a, b, out, s, stream);
    case GemmTile::cooperative_256x128_cluster1x2:
      return gemm_nt_bf16_tiled<GemmTile::cooperative_256x128_cluster1x2>(M, N, K, a, b, out, s, stream);
    case GemmTile::pingpong_128x128_cluster2x1:
      return gemm_nt_bf16_tiled<GemmTile::pingpong_128x128_cluster2x1>(M, N, K, a, b, out, s, stream);
    case GemmTile::pingpong_128x128_cluster1x1:
      return gemm_nt_bf16_tiled<GemmTile::pingpong_128x128_cluster1x1>(M, N, K, a, b, out, s, stream);
  }
  throw Error(std::string("seqmix: chain GEMM (nt): no kernel for ") + gemm_tile_name(s.tile));
}

bool activation_tile_built(GemmTile tile) {
  return tile == GemmTile::cooperative_128x256_cluster2x1 || tile == GemmTile::cooperative_256x128_cluster2x1 ||
         tile == GemmTile::pingpong_128x128_cluster2x1;
}

void activation_gemm_bf16_scheduled(GemmSchedule s, int64_t M, int64_t N, int64_t K, Rows x, Rows weight,
                                    MutableRows out, ColumnEpilogue columns, void* stream) {
  switch (s.tile) {
    case GemmTile::cooperative_128x256_cluster2x1:
      return activation_gemm_bf16_tiled<GemmTile::cooperative_128x256_cluster2x1>(M, N, K, x, weight, out, columns,
                                                                                  s, stream);
    case GemmTile::cooperative_256x128_cluster2x1:
      return activation_gemm_bf16_tiled<GemmTile::cooperative_256x128_cluster2x1>(M, N, K, x, weight, out, columns,
                                                                                  s, stream);
    case GemmTile::pingpong_128x128_cluster2x1:
      return activation_gemm_bf16_tiled<GemmTile::pingpong_128x128_cluster2x1>(M, N, K, x, weight, out, columns, s,
                                                                               stream);
    default: break;
  }
  throw Error(std::string("seqmix: projection chain GEMM: no activation kernel for ") + gemm_tile_name(s.tile));
}

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream) {
  gemm_nt_bf16_scheduled(forward_schedule(M, N, K), M, N, K, a, b, out, stream);
}

void activation_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                          ColumnEpilogue columns, void* stream) {
  GemmSchedule s = forward_schedule(M, N, K);
  if (!activation_tile_built(s.tile)) s.tile = GemmTile::cooperative_128x256_cluster2x1;
  activation_gemm_bf16_scheduled(s, M, N, K, x, weight, out, columns, stream);
}

}  // namespace seqmix::cuda
