// Explicit instantiation: dense linear recurrence backward, f32.
#include "cuda/linear_recurrence/launch.cuh"

namespace seqmix::cuda {

template <>
void linear_recurrence_backward<RecurrenceDtype::f32>(const LinearRecurrenceParams& p) {
  linrec::backward<float>(p);
}

}  // namespace seqmix::cuda
