// Explicit instantiation: the projection chain's forward GEMM with the activation epilogue, bf16.
#include "cuda/chains/projection_gemm.cuh"

namespace seqmix::cuda {

void activation_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                          ColumnEpilogue columns, void* stream) {
  proj::activation_gemm<cutlass::bfloat16_t, cutlass::bfloat16_t>(M, N, K, x, weight, out, columns, stream);
}

}  // namespace seqmix::cuda
