// Explicit instantiation: the chunked method of f32 matrix states, whole states a block.
#include "cuda/linear_recurrence/chunked_wide.cuh"

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
namespace seqmix::cuda::linrec {

template void solve_chunked_wide<float>(const SeqChain*, int, int64_t, int64_t, int64_t, int64_t, int64_t, float*,
                                        void*);

}  // namespace seqmix::cuda::linrec
#endif
