// One (sequence, head) of the gated delta rule, tokens contiguous: what the oracle and
// the chunked path compute on. src/cpu/delta_rule.cpp gathers these from the batch,
// applies the optional L2 norm around them and scatters the results back.
#pragma once

#include <cstdint>
#include <vector>

namespace seqmix::cpu {

template <class T>
struct DeltaRuleHead {
  int64_t L, K, V;           // tokens, key and value dimensions
  std::vector<T> q, k;       // [L, K] (already L2-normalised when asked)
  std::vector<T> v;          // [L, V]
  std::vector<T> g, beta;    // [L]
  std::vector<T> s0;         // [K, V] initial state (zeros when none is given)
};

template <class T>
struct DeltaRuleHeadGrads {
  std::vector<T> dq, dk, dv, dg, dbeta, ds0;  // shapes of the matching DeltaRuleHead fields
};

// Oracle: S_t = exp(g_t)·(I − β_t k_tᵀ k_t)·S_{t-1} + β_t k_tᵀ v_t, o_t = scale·q_t S_t,
// token by token in float64. Writes o [L, V] and the final state [K, V].
void reference_forward(const DeltaRuleHead<double>& x, double scale, std::vector<double>& o,
                       std::vector<double>& final_state);
// Its analytic backward: the reverse-time recurrence for dL/dS_t.
void reference_backward(const DeltaRuleHead<double>& x, double scale, const std::vector<double>& d_o,
                        const std::vector<double>& d_final_state, DeltaRuleHeadGrads<double>& grads);

// Fast path: chunks of kDeltaRuleChunk tokens in the WY/UT form, float32.
inline constexpr int64_t kDeltaRuleChunk = 64;
void chunked_forward(const DeltaRuleHead<float>& x, float scale, std::vector<float>& o,
                     std::vector<float>& final_state);
void chunked_backward(const DeltaRuleHead<float>& x, float scale, const std::vector<float>& d_o,
                      const std::vector<float>& d_final_state, DeltaRuleHeadGrads<float>& grads);

}  // namespace seqmix::cpu
