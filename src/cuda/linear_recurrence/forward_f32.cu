// Explicit instantiation: dense linear recurrence forward, f32.
#include "cuda/linear_recurrence/launch.cuh"

namespace seqmix::cuda {

template <>
void linear_recurrence_forward<RecurrenceDtype::f32>(const LinearRecurrenceParams& p) {
  linrec::forward<float>(p);
}

}  // namespace seqmix::cuda
