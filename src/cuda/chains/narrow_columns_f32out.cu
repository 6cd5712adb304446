// Explicit instantiation: the narrow-column kernel with f32 outputs (a gate a consumer wants
// in f32, as seqmix.nn's Gated DeltaNet asks for its decay input).
#include "cuda/chains/narrow_columns.cuh"

namespace seqmix::cuda {

void narrow_columns_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                           ColumnEpilogue columns, void* stream) {
  narrow_columns::launch<float>(M, N, K, x, weight, out, columns, stream);
}

}  // namespace seqmix::cuda
