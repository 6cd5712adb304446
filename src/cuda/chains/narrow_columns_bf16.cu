// Explicit instantiations: the narrow-column kernel with bf16 outputs, forward and the
// backward's in-place derivative.
#include "cuda/chains/narrow_columns.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {

void narrow_columns_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                         ColumnEpilogue columns, void* stream) {
  narrow_columns::launch<__nv_bfloat16>(M, N, K, x, weight, out, columns, stream);
}

void narrow_columns_derivative_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows dz,
                                    ColumnEpilogue columns, void* stream) {
  narrow_columns::launch<__nv_bfloat16, narrow::Mode::derivative>(M, N, K, x, weight, dz, columns, stream);
}

bool narrow_columns_enabled() { return flag_from_environment("SEQMIX_CHAINS_NARROW_COLUMNS", true); }

}  // namespace seqmix::cuda
