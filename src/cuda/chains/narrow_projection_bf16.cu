// Explicit instantiations: the narrow-K projection kernel with bf16 outputs, forward and
// the backward's in-place derivative.
#include "cuda/chains/narrow_projection.cuh"

namespace seqmix::cuda {

void narrow_projection_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                            ColumnEpilogue columns, void* stream, bool weights_before_wait) {
  narrow::launch<__nv_bfloat16>(M, N, K, x, weight, out, columns, stream, weights_before_wait);
}

void narrow_derivative_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows dz,
                            ColumnEpilogue columns, void* stream) {
  narrow::launch<__nv_bfloat16, narrow::Mode::derivative>(M, N, K, x, weight, dz, columns, stream);
}

}  // namespace seqmix::cuda
