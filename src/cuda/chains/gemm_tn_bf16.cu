// Explicit instantiation: out = aᵀ·b (a stored [K, M], b [K, N] row-major), bf16.
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream) {
  plain::gemm<cutlass::bfloat16_t, cutlass::layout::ColumnMajor>(M, N, K, a, b, out, stream,
                                                                 "chain gradient GEMM (tn)");
}

}  // namespace seqmix::cuda
