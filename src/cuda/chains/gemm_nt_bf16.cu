// Explicit instantiation: out = a·bᵀ (a [M, K], b [N, K] row-major), bf16, no fusion.
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream) {
  plain::gemm<cutlass::bfloat16_t, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>(M, N, K, a, b, out,
                                                                                           stream, "chain GEMM (nt)");
}

}  // namespace seqmix::cuda
