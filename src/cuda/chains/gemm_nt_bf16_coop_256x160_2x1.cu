// Explicit instantiation: out = a·bᵀ (a [M, K], b [N, K] row-major), bf16, no fusion, in
// the tile cooperative_256x160_cluster2x1 (gemm_tiles.hpp; gemm_dispatch.cu chooses).
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

template void gemm_nt_bf16_tiled<GemmTile::cooperative_256x160_cluster2x1>(
    int64_t, int64_t, int64_t, Rows, Rows, MutableRows, GemmSchedule, void*);

}  // namespace seqmix::cuda
