// Explicit instantiation: the one-pass backward of a narrow-K run (GLA's rank-16 gate).
#include "cuda/chains/narrow_fused_backward.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {

void narrow_fused_backward_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy,
                                ColumnEpilogue columns, MutableRows dx, MutableRows dweight, void* dbias,
                                void* stream) {
  narrow_fused::launch(M, N, K, x, weight, dy, columns, dx, dweight, dbias, stream);
}

// Off unless SEQMIX_CHAINS_NARROW_FUSED=1: measured slower than the separate path on the
// H100 (NOTES.md, "Narrow K: one pass").
bool narrow_fused_backward_enabled() { return flag_from_environment("SEQMIX_CHAINS_NARROW_FUSED", false); }

}  // namespace seqmix::cuda
