// CPU backend of gated linear attention: the float64 oracle (Impl::reference) and the
// threaded float32 chunkwise path (Impl::fast), both on dense buffers.
#pragma once

#include <vector>

#include "core/check.hpp"
#include "seqmix/gla.hpp"

namespace seqmix::cpu {

struct GlaProblem {
  int64_t B, T, H, K, V;
  std::vector<core::Sequence> sequences;
  double scale;
};

void gla_forward(const GlaProblem& p, const GlaInputs& in, const GlaOutputs& out, Impl impl);
void gla_backward(const GlaProblem& p, const GlaInputs& in, const Tensor& d_o,
                  const std::optional<Tensor>& d_final_state, const GlaGrads& grads, Impl impl);

}  // namespace seqmix::cpu
