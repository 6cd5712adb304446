// Explicit instantiation: dense linear recurrence forward, bf16.
#include "cuda/linear_recurrence/launch.cuh"

namespace seqmix::cuda {

template <>
void linear_recurrence_forward<RecurrenceDtype::bf16>(const LinearRecurrenceParams& p) {
  linrec::forward<__nv_bfloat16>(p);
}

}  // namespace seqmix::cuda
