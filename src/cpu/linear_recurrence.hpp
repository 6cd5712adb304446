// CPU backend of the dense linear recurrence: the float64 sequential oracle
// (Impl::reference) and the float32 path running any of the four methods
// (Impl::fast), both on dense buffers.
#pragma once

#include <cstdint>

#include "seqmix/common.hpp"
#include "seqmix/linear_recurrence.hpp"

namespace seqmix::cpu {

struct LinearRecurrenceProblem {
  int64_t G, T, n, m;
  LinearRecurrenceMethod method;  // may be automatic: resolved here from the shape
  int64_t chunk_size;             // 0: chosen from T and the threads
};

void linear_recurrence_forward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in,
                               const LinearRecurrenceOutputs& out, Impl impl);
void linear_recurrence_backward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in,
                                const Tensor& dh, const std::optional<Tensor>& d_final_state,
                                const LinearRecurrenceGrads& grads, Impl impl);

}  // namespace seqmix::cpu
