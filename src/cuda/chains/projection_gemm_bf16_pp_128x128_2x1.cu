// Explicit instantiation: the projection chain's forward GEMM with the activation epilogue,
// bf16, in the tile pingpong_128x128_cluster2x1 (gemm_tiles.hpp; gemm_dispatch.cu chooses).
#include "cuda/chains/projection_gemm.cuh"

namespace seqmix::cuda {

template void activation_gemm_bf16_tiled<GemmTile::pingpong_128x128_cluster2x1>(
    int64_t, int64_t, int64_t, Rows, Rows, MutableRows, ColumnEpilogue, GemmSchedule, void*);

}  // namespace seqmix::cuda
