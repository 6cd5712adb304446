// Explicit instantiation: dense linear recurrence backward, bf16.
#include "cuda/linear_recurrence/launch.cuh"

namespace seqmix::cuda {

template <>
void linear_recurrence_backward<RecurrenceDtype::bf16>(const LinearRecurrenceParams& p) {
  linrec::backward<__nv_bfloat16>(p);
}

}  // namespace seqmix::cuda
