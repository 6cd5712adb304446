// Explicit instantiation: out = aᵀ·b with a stored [K, M] in pieces along M (the segments'
// gradients), b [K, N] row-major, bf16, no fusion, in the tile cooperative_128x256_cluster1x2
// (gemm_dispatch.cu chooses per shape).
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

template void gemm_tn_bf16_pieces_tiled<GemmTile::cooperative_128x256_cluster1x2>(int64_t, int64_t, int64_t,
                                                                                  const RowPieces&, Rows, MutableRows,
                                                                                  GemmSchedule, void*);

}  // namespace seqmix::cuda
