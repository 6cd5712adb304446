// Explicit instantiation: the projection chain's forward GEMM with the activation epilogue,
// bf16 operands and f32 output (the segments a consumer wants in f32, e.g. a log-decay gate).
#include "cuda/chains/projection_gemm.cuh"

namespace seqmix::cuda {

void activation_gemm_bf16_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                                 ColumnEpilogue columns, void* stream) {
  proj::activation_gemm<cutlass::bfloat16_t, float>(M, N, K, x, weight, out, columns, stream);
}

}  // namespace seqmix::cuda
