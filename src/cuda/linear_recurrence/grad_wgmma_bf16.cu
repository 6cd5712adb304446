// Explicit instantiation: the backward's gradient products on tensor cores, bf16 inputs.
#include "cuda/linear_recurrence/grad_wgmma.cuh"

namespace seqmix::cuda::linrec {

template bool launch_gradients_on_tensor_cores<__nv_bfloat16>(const GradParams<__nv_bfloat16>&, int64_t, void*);

}  // namespace seqmix::cuda::linrec
