// Chunkwise gated linear attention in float32, the form the GPU kernels use. Within a
// chunk of tokens 0..L-1 entering with state S_0, with b the cumulative log decay:
//   o_i   = scale·[(q_i ⊙ e^{b_i}) S_0 + Σ_{j≤i} A_ij v_j],  A_ij = Σ_c q_ic k_jc e^{b_ic − b_jc}
//   S_end = e^{b_last} ⊙ S_0 + Σ_j (k_j ⊙ e^{b_last − b_j})ᵀ v_j
// The inter-chunk part is a product with the carried state, the intra-chunk part a
// causal decay-weighted attention (gla_chunk.cpp); every exponent evaluated is ≤ 0.
#include <algorithm>
#include <vector>

#include "cpu/gla_chunk.hpp"

namespace seqmix::cpu::gla {
namespace {

int64_t chunk_count(const HeadShape& s) { return (s.length + kChunk - 1) / kChunk; }
int64_t chunk_length(const HeadShape& s, int64_t chunk) { return std::min(kChunk, s.length - chunk * kChunk); }

Mat load_state(const HeadShape& s, const float* data) {
  Mat S(s.K, s.V);
  std::copy(data, data + s.K * s.V, S.data.begin());
  return S;
}

// Each row c of m (a key channel) times factor[c].
void scale_rows(Mat& m, const float* factor) {
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) m[r][c] *= factor[r];
}

// S ← e^{b_last} ⊙ S + (k ⊙ e^{b_last − b})ᵀ v: the state after the chunk.
void advance_state(const Chunk& c, Mat& S) {
  const Mat whole = c.decay_from_start();
  scale_rows(S, whole[c.length() - 1]);
  gemm_acc(S, hadamard(c.k, c.decay_to_end()), true, c.v, false);
}

Mat load_rows(Rows<const float> rows, int64_t start, int64_t length, int64_t cols) {
  Mat m(length, cols);
  for (int64_t i = 0; i < length; ++i) std::copy(rows[start + i], rows[start + i] + cols, m[i]);
  return m;
}

void store_rows(const Mat& m, Rows<float> rows, int64_t start) {
  for (int64_t i = 0; i < m.rows; ++i) std::copy(m[i], m[i] + m.cols, rows[start + i]);
}

}  // namespace

void chunked_forward(const HeadShape& s, const HeadInputs<float>& in, const HeadForward<float>& out) {
  Mat S = load_state(s, in.h0);  // [K, V]
  const float scale = static_cast<float>(s.scale);
  for (int64_t chunk = 0; chunk < chunk_count(s); ++chunk) {
    const int64_t start = chunk * kChunk;
    const Chunk c = load_chunk(s, in, start, chunk_length(s, chunk));
    Mat o(c.length(), s.V);
    gemm_acc(o, hadamard(c.q, c.decay_from_start()), false, S, false, scale);  // inter-chunk
    gemm_acc(o, causal_scores(c, c.q, c.k), false, c.v, false, scale);        // intra-chunk
    store_rows(o, out.o, start);
    advance_state(c, S);
  }
  std::copy(S.data.begin(), S.data.end(), out.hT);
}

namespace {

// The gradients of one chunk's tokens. dq and dk are kept in parts because the decay
// gradient needs them apart (see decay_gradient).
struct ChunkGrads {
  Mat dq_pairs, dk_pairs;   // intra-chunk pairs j < i
  Mat dq_state, dk_state;   // through S_0 (queries) and through S_end (keys)
  std::vector<float> dA_diagonal;  // the i = j pairs, which carry no decay
};

// dg_t collects every term whose decay spans token t: the q-side terms of tokens i ≥ t,
// the pairs j < t ≤ i, and the S_end terms of keys j < t plus the carried S_0. Summing
// q ⊙ dq − k ⊙ dk over i ≥ t gives the same in exact arithmetic, but there the i = j
// pairs and the last key's state term cancel as O(1) values, which in float32 swamps a
// gradient of size e^{g} when decays are strong; this form never forms them.
Mat decay_gradient(const Chunk& c, const ChunkGrads& d, const Mat& S0, const Mat& H, const Mat& from_start) {
  const int64_t L = c.length(), K = c.q.cols, V = S0.cols;
  Mat dg(L, K);
  std::vector<float> queries_after(L + 1);  // Σ_{i≥t} q ⊙ (dq_pairs + dq_state) − k ⊙ dk_pairs
  for (int64_t ch = 0; ch < K; ++ch) {
    float spans_chunk = 0;  // e^{b_last} ⊙ Σ_v H ⊙ S_0: the carried state crosses every token
    for (int64_t j = 0; j < V; ++j) spans_chunk += H[ch][j] * S0[ch][j];
    spans_chunk *= from_start[L - 1][ch];
    queries_after[L] = 0;
    for (int64_t i = L - 1; i >= 0; --i)
      queries_after[i] = queries_after[i + 1] + c.q[i][ch] * (d.dq_pairs[i][ch] + d.dq_state[i][ch]) -
                         c.k[i][ch] * d.dk_pairs[i][ch];
    float keys_before = 0;  // Σ_{j<t} k ⊙ dk_state
    for (int64_t t = 0; t < L; ++t) {
      dg[t][ch] = queries_after[t] + keys_before + spans_chunk;
      keys_before += c.k[t][ch] * d.dk_state[t][ch];
    }
  }
  return dg;
}

}  // namespace

// Backward chunk by chunk in reverse, with H = dL/dS_end flowing in from later chunks
// (the final-state gradient at the last one) and the entering states recomputed by a
// forward pass over the chunks. With dA_ij = scale·do_i·v_j (j ≤ i):
//   dq = scale·e^{b} ⊙ (do S_0ᵀ) + gather_past(dA, k)
//   dk = gather_future(dA, q) + e^{b_last − b} ⊙ (v Hᵀ)
//   dv = scale·Aᵀ do + (k ⊙ e^{b_last − b}) H
//   dL/dS_0 = scale·(q ⊙ e^{b})ᵀ do + e^{b_last} ⊙ H,   H for the chunk before.
void chunked_backward(const HeadShape& s, const HeadInputs<float>& in, const HeadBackward<float>& grads) {
  const int64_t chunks = chunk_count(s);
  const float scale = static_cast<float>(s.scale);
  std::vector<Mat> states{load_state(s, in.h0)};  // states[c] enters chunk c
  for (int64_t chunk = 0; chunk + 1 < chunks; ++chunk) {
    states.push_back(states.back());
    advance_state(load_chunk(s, in, chunk * kChunk, chunk_length(s, chunk)), states.back());
  }
  Mat H = load_state(s, grads.dhT);  // [K, V]
  for (int64_t chunk = chunks - 1; chunk >= 0; --chunk) {
    const int64_t start = chunk * kChunk, L = chunk_length(s, chunk);
    const Chunk c = load_chunk(s, in, start, L);
    const Mat d_o = load_rows(grads.d_o, start, L, s.V);
    const Mat& S0 = states[chunk];
    const Mat from_start = c.decay_from_start(), to_end = c.decay_to_end();

    ChunkGrads d{Mat(), Mat(), Mat(L, s.K), Mat(L, s.K), std::vector<float>(L)};
    Mat dA(L, L);
    gemm_acc(dA, d_o, false, c.v, true, scale);
    for (int64_t i = 0; i < L; ++i) std::swap(d.dA_diagonal[i], dA[i][i]);  // dA now strictly causal
    d.dq_pairs = gather_past(c, dA, c.k);
    d.dk_pairs = gather_future(c, dA, c.q);
    gemm_acc(d.dq_state, d_o, false, S0, true, scale);
    d.dq_state = hadamard(d.dq_state, from_start);
    gemm_acc(d.dk_state, c.v, false, H, true);
    d.dk_state = hadamard(d.dk_state, to_end);

    Mat dq(L, s.K), dk(L, s.K);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t ch = 0; ch < s.K; ++ch) {
        dq[i][ch] = d.dq_pairs[i][ch] + d.dq_state[i][ch] + d.dA_diagonal[i] * c.k[i][ch];
        dk[i][ch] = d.dk_pairs[i][ch] + d.dk_state[i][ch] + d.dA_diagonal[i] * c.q[i][ch];
      }
    Mat dv(L, s.V);
    gemm_acc(dv, causal_scores(c, c.q, c.k), true, d_o, false, scale);
    gemm_acc(dv, hadamard(c.k, to_end), false, H, false);
    store_rows(dq, grads.dq, start);
    store_rows(dk, grads.dk, start);
    store_rows(dv, grads.dv, start);
    store_rows(decay_gradient(c, d, S0, H, from_start), grads.dg, start);

    scale_rows(H, from_start[L - 1]);
    gemm_acc(H, hadamard(c.q, from_start), true, d_o, false, scale);
  }
  std::copy(H.data.begin(), H.data.end(), grads.dh0);
}

}  // namespace seqmix::cpu::gla
