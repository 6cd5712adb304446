// Explicit instantiation: out = a·b with a [M, K] in pieces along K (the segments'
// gradients), b [K, N] row-major, bf16, no fusion, in the default tile.
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

void gemm_nn_bf16_pieces(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                         void* stream) {
  plain::gemm_pieces<cutlass::layout::RowMajor, gemm::Split::along_k>(M, N, K, a, b, out, stream,
                                                                      "chain gradient GEMM (nn, pieces)");
}

}  // namespace seqmix::cuda
