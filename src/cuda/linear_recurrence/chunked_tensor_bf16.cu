// Explicit instantiation: the chunked method on tensor cores, bf16 inputs.
#include "cuda/linear_recurrence/chunked_tensor.cuh"

namespace seqmix::cuda::linrec {

template void solve_chunked_on_tensor_cores<__nv_bfloat16>(const SeqChain*, int, int64_t, int64_t, int64_t, int64_t,
                                                  int64_t, float*, void*);
template void solve_fused_chunked<__nv_bfloat16>(const SeqChain*, int, int64_t, int64_t, int64_t, int64_t, float*,
                                           void*, bool);

}  // namespace seqmix::cuda::linrec
