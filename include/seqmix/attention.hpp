// Exact attention with an LSE output, GQA and variable length (DESIGN.md §1 "attention"),
// matching flash-attn's flash_attn_func / flash_attn_varlen_func. Per (sequence, query head):
//   O   = softmax(scale·QKᵀ + mask)·V
//   LSE = log Σ_j exp(scale·q_i·k_j + mask_ij)   (natural log, one value per query row)
// Query head h reads kv head h / (Hq / Hkv) (GQA, MQA when Hkv = 1).
// The causal mask is aligned to the bottom-right corner, as in flash-attn ≥ 2.1: query i
// sees key j iff j ≤ i + Sk − Sq. A row that sees no key gives O = 0 and LSE = −inf.
//
// Layouts (all of q, k, v, out, dout, dq, dk, dv share one dtype: bf16, f16, f32 or f64):
//   padded:  q, out [B, Sq, Hq, D] / [B, Sq, Hq, Dv]; k [B, Sk, Hkv, D]; v [B, Sk, Hkv, Dv];
//            lse [B, Hq, Sq]
//   varlen:  q, out [total_q, Hq, D] / [total_q, Hq, Dv]; k [total_k, Hkv, D];
//            v [total_k, Hkv, Dv]; lse [Hq, total_q]; sequence n holds the rows
//            [cu_seqlens_q[n], cu_seqlens_q[n+1]) of q and [cu_seqlens_k[n], cu_seqlens_k[n+1]) of k, v.
//   lse is f32 (f64 is also accepted, and is what f64 inputs get from the Python surface).
// Only the innermost dimension must be contiguous; other strides are free.
#pragma once

#include <optional>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

struct AttentionOptions : CommonOptions {
  // Multiplies QKᵀ before the softmax. 0 stands for D^-0.5 (D = head dim of q and k);
  // any other finite value is used as given (the Python surface always passes one).
  double scale = 0.0;
  // Bottom-right aligned causal mask (see above).
  bool causal = false;
  // Backward only. The CPU backward is always deterministic. On CUDA, false (the default)
  // runs the Hopper backward, whose dQ is summed with float atomics (dK, dV repeat bit for
  // bit, dQ to rounding); true makes each query block's dQ adds in a fixed order, so all
  // three gradients repeat bit for bit, at some cost in speed.
  bool deterministic = false;
};

struct AttentionInputs {
  Tensor q;  // [B, Sq, Hq, D], or [total_q, Hq, D] with cu_seqlens
  Tensor k;  // [B, Sk, Hkv, D], or [total_k, Hkv, D]
  Tensor v;  // [B, Sk, Hkv, Dv], or [total_k, Hkv, Dv]
  // Variable length: both or neither; [N + 1] int32/int64 offsets on the CPU (for CUDA
  // inputs: contiguous, on q's device; read back to the host for validation), no empty sequence.
  std::optional<Tensor> cu_seqlens_q;
  std::optional<Tensor> cu_seqlens_k;
  // Variable length only: upper bounds on the sequence lengths (checked to be ≥ the real
  // maxima, as flash-attn's kernels size their grids from them). Ignored when padded.
  int64_t max_seqlen_q = 0;
  int64_t max_seqlen_k = 0;
};

struct AttentionOutputs {
  Tensor out;  // [B, Sq, Hq, Dv] or [total_q, Hq, Dv], dtype of q
  Tensor lse;  // [B, Hq, Sq] or [Hq, total_q], f32 or f64
};

// Forward: writes out and lse.
void attention_forward(const AttentionInputs& in, const AttentionOutputs& out,
                       const AttentionOptions& options = {});

struct AttentionGrads {
  Tensor dq;  // like q
  Tensor dk;  // like k (summed over the query heads of each GQA group)
  Tensor dv;  // like v (likewise)
};

// Backward: from dout (like out) to dq, dk, dv. `forward` holds the out and lse the
// forward wrote for these inputs (the fast path recomputes the probabilities from lse
// and uses rowsum(dout ⊙ out); the reference recomputes everything from q, k, v).
// `d_lse` (like lse, optional) is the gradient reaching lse itself, for callers that
// use the log-sum-exp downstream; absent means zero.
void attention_backward(const AttentionInputs& in, const AttentionOutputs& forward, const Tensor& dout,
                        const std::optional<Tensor>& d_lse, const AttentionGrads& grads,
                        const AttentionOptions& options = {});

}  // namespace seqmix
