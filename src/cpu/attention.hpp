// CPU backend of attention: the float64 oracle (attention_reference.cpp), the float32
// FlashAttention-form path (attention_flash.cpp), and the dispatch between them
// (attention.cpp), all on dense row-major buffers:
//   q [rows_q, Hq, D], k [rows_k, Hkv, D], v [rows_k, Hkv, Dv], out [rows_q, Hq, Dv],
//   lse indexed by AttentionSequence::lse_index.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "seqmix/attention.hpp"

namespace seqmix::cpu {

// One (query sequence, key sequence) pair: a batch row when padded, a cu_seqlens entry when varlen.
struct AttentionSequence {
  int64_t q0, q_len;  // first row and length in q / out
  int64_t k0, k_len;  // first row and length in k / v
  int64_t lse0;       // lse index of (head 0, query 0)
};

struct AttentionProblem {
  int64_t Hq, Hkv, D, Dv;
  int64_t rows_q, rows_k;   // B·Sq and B·Sk, or total_q and total_k
  int64_t lse_head_stride;  // Sq when padded ([B, Hq, Sq]), total_q when varlen ([Hq, total_q])
  double scale;
  bool causal;
  std::vector<AttentionSequence> sequences;

  int64_t group() const { return Hq / Hkv; }  // query heads per kv head
  int64_t kv_head(int64_t h) const { return h / group(); }
  int64_t lse_index(const AttentionSequence& s, int64_t h, int64_t i) const {
    return s.lse0 + h * lse_head_stride + i;
  }
  // Offsets of one row of one head in the dense buffers.
  int64_t q_at(const AttentionSequence& s, int64_t i, int64_t h) const { return ((s.q0 + i) * Hq + h) * D; }
  int64_t o_at(const AttentionSequence& s, int64_t i, int64_t h) const { return ((s.q0 + i) * Hq + h) * Dv; }
  int64_t k_at(const AttentionSequence& s, int64_t j, int64_t g) const { return ((s.k0 + j) * Hkv + g) * D; }
  int64_t v_at(const AttentionSequence& s, int64_t j, int64_t g) const { return ((s.k0 + j) * Hkv + g) * Dv; }
  // Keys 0 .. visible_keys − 1 are the ones query i sees (bottom-right causal alignment).
  int64_t visible_keys(const AttentionSequence& s, int64_t i) const {
    if (!causal) return s.k_len;
    return std::clamp<int64_t>(i + s.k_len - s.q_len + 1, 0, s.k_len);
  }
};

// Dense inputs of one run, in the compute scalar T (double for the oracle, float for the fast path).
template <class T>
struct AttentionBuffers {
  std::vector<T> q, k, v;
};

void attention_forward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& out,
                       Impl impl);
void attention_backward(const AttentionProblem& p, const AttentionInputs& in, const AttentionOutputs& forward,
                        const Tensor& dout, const std::optional<Tensor>& d_lse, const AttentionGrads& grads,
                        Impl impl);

// The oracle: score rows materialised, naive softmax, float64 throughout.
void reference_forward(const AttentionProblem& p, const AttentionBuffers<double>& x, std::vector<double>& out,
                       std::vector<double>& lse);
// Backward of the oracle from its own recomputed probabilities (ignores the forward's out/lse).
void reference_backward(const AttentionProblem& p, const AttentionBuffers<double>& x,
                        const std::vector<double>& dout, const std::vector<double>& d_lse,
                        std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv);

// The FlashAttention form: key tiles with an online softmax; the backward recomputes
// the probabilities from lse tile by tile. float32 throughout.
void flash_forward(const AttentionProblem& p, const AttentionBuffers<float>& x, std::vector<float>& out,
                   std::vector<float>& lse);
void flash_backward(const AttentionProblem& p, const AttentionBuffers<float>& x, const std::vector<float>& out,
                    const std::vector<float>& lse, const std::vector<float>& dout, const std::vector<float>& d_lse,
                    std::vector<float>& dq, std::vector<float>& dk, std::vector<float>& dv);

}  // namespace seqmix::cpu
