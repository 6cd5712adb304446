// Gated linear attention (DESIGN.md §1 "gla"), per sequence and head:
//   S_t = diag(exp g_t)·S_{t-1} + k_tᵀ v_t,    o_t = scale · q_t S_t
// with S a [K, V] state, g_t ≤ 0 a log decay per key channel. Matches fla's chunk_gla.
//
// Layouts: q, k, g  [B, T, H, K];  v, o  [B, T, H, V]  (bf16, f16, f32 or f64, all the
//          same dtype; o in that dtype);
//          initial_state, final_state  [N, H, K, V] f32 (f64 allowed with f64 inputs),
//          N = B, or N = len(cu_seqlens) - 1 with B = 1 for variable length.
// g must be ≤ 0: the fast path relies on it to keep every exponent it evaluates ≤ 0.
#pragma once

#include <optional>
#include <vector>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

struct GlaOptions : CommonOptions {
  // Multiplies q_t S_t. Python's chunk_gla passes K^-0.5 unless told otherwise; here it
  // is explicit and must be finite.
  double scale = 1.0;
};

struct GlaInputs {
  Tensor q;                              // [B, T, H, K] queries
  Tensor k;                              // [B, T, H, K] keys
  Tensor v;                              // [B, T, H, V] values
  Tensor g;                              // [B, T, H, K] log decays (≤ 0)
  std::optional<Tensor> initial_state;   // [N, H, K, V]
  std::optional<Tensor> cu_seqlens;      // [N + 1] int32/int64 offsets (CPU), B must be 1
  // Backward only, CUDA only: the chunk states a forward on these same inputs saved
  // (GlaOutputs::chunk_states). The backward reads them instead of recomputing them.
  std::optional<Tensor> chunk_states;
  // Backward only, CUDA only, with chunk_states: the chunk scores that forward saved
  // (GlaOutputs::chunk_scores). The backward reads them instead of forming them again.
  std::optional<Tensor> chunk_scores;
};

struct GlaOutputs {
  Tensor o;                              // [B, T, H, V], dtype of q
  std::optional<Tensor> final_state;     // [N, H, K, V], the state after each sequence's last token
  // CUDA only: the state entering every 64-token chunk, [N, H, C, K, V] contiguous in q's
  // dtype (C = gla_chunk_states_shape), for a backward on the same inputs. A training
  // forward keeps it; it costs a few percent of the forward and saves the backward a walk
  // over the sequence.
  std::optional<Tensor> chunk_states;
  // CUDA only, with chunk_states and K <= 128: every chunk's scores A (the causal,
  // decay-weighted q·kᵀ block of its 64 tokens, zero above the diagonal), [N, H, C, 64, 64]
  // contiguous in q's dtype (gla_chunk_scores_shape), for the same backward: it saves that
  // backward forming them again, at 64·64/(K·V) of the states' memory (a quarter at
  // K = V = 128). Only the default forward form writes them; the others refuse the tensor.
  std::optional<Tensor> chunk_scores;
};

// Forward. Writes o and, when given, final_state, chunk_states and chunk_scores.
void gla_forward(const GlaInputs& in, const GlaOutputs& out, const GlaOptions& options = {});

// The shape of GlaOutputs::chunk_states for these inputs: {N, H, C, K, V}, C the chunks of
// the longest sequence.
std::vector<int64_t> gla_chunk_states_shape(const GlaInputs& in, const GlaOptions& options = {});

// The shape of GlaOutputs::chunk_scores for these inputs: {N, H, C, 64, 64}.
std::vector<int64_t> gla_chunk_scores_shape(const GlaInputs& in, const GlaOptions& options = {});

struct GlaGrads {
  Tensor dq, dk, dv, dg;                 // shapes and dtype of q, k, v, g
  std::optional<Tensor> d_initial_state; // required when initial_state is given
};

// Backward: from do (and the gradient of the final state, optional) to the gradient of
// every differentiable input. Recomputes the states from the inputs, or reads the chunk
// states of in.chunk_states (and the chunk scores of in.chunk_scores).
void gla_backward(const GlaInputs& in, const Tensor& d_o, const std::optional<Tensor>& d_final_state,
                  const GlaGrads& grads, const GlaOptions& options = {});

}  // namespace seqmix
