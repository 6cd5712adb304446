// Explicit instantiation: the sequential kernel's launcher, f32 inputs (also the float
// summary chain of the chunked method).
#include "cuda/linear_recurrence/sequential_launch.cuh"

namespace seqmix::cuda::linrec {

template void launch_sequential<float>(const SeqParams&, int64_t, void*);

}  // namespace seqmix::cuda::linrec
