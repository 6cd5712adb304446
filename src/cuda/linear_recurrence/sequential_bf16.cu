// Explicit instantiation: the sequential kernel's launcher, bf16 inputs.
#include "cuda/linear_recurrence/sequential_launch.cuh"

namespace seqmix::cuda::linrec {

template void launch_sequential<__nv_bfloat16>(const SeqParams&, int64_t, void*);

}  // namespace seqmix::cuda::linrec
