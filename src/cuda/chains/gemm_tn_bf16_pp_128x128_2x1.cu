// Explicit instantiation: out = aᵀ·b (a stored [K, M], b [K, N] row-major), bf16, no
// fusion, in the tile pingpong_128x128_cluster2x1 (gemm_tiles.hpp; gemm_dispatch.cu chooses).
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

template void gemm_tn_bf16_tiled<GemmTile::pingpong_128x128_cluster2x1>(int64_t, int64_t, int64_t, Rows, Rows, MutableRows,
                                                                        GemmSchedule, void*);

}  // namespace seqmix::cuda
