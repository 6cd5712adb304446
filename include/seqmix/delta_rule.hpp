// Gated delta rule (DESIGN.md §1 "gated delta rule", fla `chunk_gated_delta_rule`).
// Per sequence and head, with k_t a row vector of length K and S_t a [K, V] matrix:
//   S_t = exp(g_t)·(I − β_t k_tᵀ k_t)·S_{t-1} + β_t k_tᵀ v_t,   o_t = scale·q_t S_t.
// With use_qk_l2norm, q_t and k_t are first replaced by x / sqrt(Σ x² + 1e-6).
//
// Layouts: q, k  [B, T, H, K];  v, o  [B, T, H, V];  g (log decay, ≤ 0) and beta  [B, T, H]
//          (bf16, f16, f32 or f64, all the same dtype; o in that dtype);
//          initial_state, final_state  [N, H, K, V] f32 (f64 allowed with f64 inputs),
//          N = B, or N = len(cu_seqlens) - 1 with B = 1 for variable length.
#pragma once

#include <optional>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

struct DeltaRuleOptions : CommonOptions {
  // Factor on q·S. The Python surface passes K^-0.5 when the caller gives none; a C++
  // caller sets it explicitly (0, the default, also means K^-0.5).
  double scale = 0.0;
  // L2-normalise q and k per token and head inside the op (fla's use_qk_l2norm_in_kernel).
  bool use_qk_l2norm = false;
};

struct DeltaRuleInputs {
  Tensor q;                              // [B, T, H, K]
  Tensor k;                              // [B, T, H, K]
  Tensor v;                              // [B, T, H, V]
  Tensor g;                              // [B, T, H] log decay
  Tensor beta;                           // [B, T, H] write strength
  std::optional<Tensor> initial_state;   // [N, H, K, V]
  std::optional<Tensor> cu_seqlens;      // [N + 1] int32/int64 offsets (CPU), B must be 1
};

struct DeltaRuleOutputs {
  Tensor o;                              // [B, T, H, V], dtype of the inputs
  std::optional<Tensor> final_state;     // [N, H, K, V]
};

// Forward. Writes o and, when given, final_state.
void delta_rule_forward(const DeltaRuleInputs& in, const DeltaRuleOutputs& out,
                        const DeltaRuleOptions& options = {});

struct DeltaRuleGrads {
  Tensor dq, dk;                         // [B, T, H, K], dtype of the inputs
  Tensor dv;                             // [B, T, H, V]
  Tensor dg, dbeta;                      // [B, T, H]
  std::optional<Tensor> d_initial_state; // [N, H, K, V], required when initial_state is given
};

// Backward: from do (and the gradient of the final state, optional) to the gradient of
// every differentiable input. Recomputes the states from the inputs.
void delta_rule_backward(const DeltaRuleInputs& in, const Tensor& d_o,
                         const std::optional<Tensor>& d_final_state, const DeltaRuleGrads& grads,
                         const DeltaRuleOptions& options = {});

}  // namespace seqmix
