// Explicit instantiation: the narrow-K projection kernel with f32 outputs (the segments a
// consumer wants in f32).
#include "cuda/chains/narrow_projection.cuh"

namespace seqmix::cuda {

void narrow_projection_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                              ColumnEpilogue columns, void* stream, bool weights_before_wait) {
  narrow::launch<float>(M, N, K, x, weight, out, columns, stream, weights_before_wait);
}

}  // namespace seqmix::cuda
