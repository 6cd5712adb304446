// Explicit instantiation: the backward's gradient products on tensor cores, f32 inputs.
#include "cuda/linear_recurrence/grad_wgmma.cuh"

namespace seqmix::cuda::linrec {

template bool launch_gradients_on_tensor_cores<float>(const GradParams<float>&, int64_t, void*);

}  // namespace seqmix::cuda::linrec
