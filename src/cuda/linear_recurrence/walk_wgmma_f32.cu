// Explicit instantiation: the sequential walk of matrix states on tensor cores, f32 inputs.
#include "cuda/linear_recurrence/walk_wgmma.cuh"

namespace seqmix::cuda::linrec {

template bool launch_walk_on_tensor_cores<float>(const SeqParams&, int64_t, void*);

}  // namespace seqmix::cuda::linrec
