// Explicit instantiation: the projection chain's backward GEMM with the derivative epilogue, bf16.
#include "cuda/chains/projection_gemm.cuh"

namespace seqmix::cuda {

void derivative_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy, MutableRows dz,
                          ColumnEpilogue columns, void* stream) {
  proj::derivative_gemm<cutlass::bfloat16_t>(M, N, K, x, weight, dy, dz, columns, stream);
}

}  // namespace seqmix::cuda
