// CPU backend of the gated delta rule: the float64 oracle (Impl::reference, a token by
// token recurrence) and the threaded float32 path (Impl::fast, the chunkwise WY form
// the GPU kernels use), both on dense buffers.
#pragma once

#include <vector>

#include "core/check.hpp"
#include "seqmix/delta_rule.hpp"

namespace seqmix::cpu {

struct DeltaRuleProblem {
  int64_t B, T, H, K, V;
  std::vector<core::Sequence> sequences;
  double scale;        // resolved: never 0
  bool use_qk_l2norm;
};

void delta_rule_forward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const DeltaRuleOutputs& out,
                        Impl impl);
void delta_rule_backward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const Tensor& d_o,
                         const std::optional<Tensor>& d_final_state, const DeltaRuleGrads& grads, Impl impl);

}  // namespace seqmix::cpu
