// Explicit instantiation: out = aᵀ·b (a stored [K, M], b [K, N] row-major), bf16, no
// fusion, in the tile cooperative_128x256_cluster1x2 (gemm_tiles.hpp; gemm_dispatch.cu chooses).
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

template void gemm_tn_bf16_tiled<GemmTile::cooperative_128x256_cluster1x2>(int64_t, int64_t, int64_t, Rows, Rows, MutableRows,
                                                                           GemmSchedule, void*);

}  // namespace seqmix::cuda
