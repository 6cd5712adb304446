// The float32 gated delta rule in the chunkwise WY/UT form the GPU kernels use.
//
// Within a chunk of L ≤ 64 tokens with in-chunk cumulative log decay G_i = Σ_{s≤i} g_s,
// write the state update as S_i = a_i S_{i-1} + k_iᵀ δ_i with the "new value"
// δ_i = β_i (v_i − a_i k_i S_{i-1}). Unrolling S_{i-1} from the chunk's start state S
// gives a triangular system for the rows δ_i:
//   (I + A) Δ = diag(β) V − diag(β e^G) K S,   A_ij = β_i (k_i·k_j) e^{G_i − G_j}, j < i,
// so with T = (I + A)⁻¹ (forward substitution), U = T diag(β) V and W = T diag(β e^G) K:
//   Δ = U − W S,
//   O = scale·(diag(e^G) Q S + (Q Kᵀ ⊙ Γ) Δ),        Γ_ij = e^{G_i − G_j} for j ≤ i, else 0
//   S ← e^{G_last} S + Kᵀ diag(e^{G_last − G}) Δ.
// G is non-increasing, so every exponent evaluated here is ≤ 0: nothing overflows when
// a decay is very negative, the factors just flush to zero.
#include <algorithm>
#include <cmath>

#include "cpu/delta_rule_head.hpp"

namespace seqmix::cpu {
namespace {

// A small row-major float matrix, enough for the chunk algebra.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> a;
  Mat() = default;
  Mat(int64_t r, int64_t c) : rows(r), cols(c), a(static_cast<size_t>(r * c), 0.0f) {}
  float& operator()(int64_t i, int64_t j) { return a[i * cols + j]; }
  float operator()(int64_t i, int64_t j) const { return a[i * cols + j]; }
  const float* row(int64_t i) const { return &a[i * cols]; }
};

Mat transpose(const Mat& m) {
  Mat t(m.cols, m.rows);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) t(j, i) = m(i, j);
  return t;
}

// x·y, i-k-j order so the inner loop runs along rows.
Mat matmul(const Mat& x, const Mat& y) {
  Mat z(x.rows, y.cols);
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t m = 0; m < x.cols; ++m) {
      const float s = x(i, m);
      if (s == 0.0f) continue;
      for (int64_t j = 0; j < y.cols; ++j) z(i, j) += s * y(m, j);
    }
  return z;
}
Mat matmul_tn(const Mat& x, const Mat& y) { return matmul(transpose(x), y); }  // xᵀ·y
Mat matmul_nt(const Mat& x, const Mat& y) { return matmul(x, transpose(y)); }  // x·yᵀ

Mat hadamard(Mat x, const Mat& y) {
  for (size_t i = 0; i < x.a.size(); ++i) x.a[i] *= y.a[i];
  return x;
}

// diag(d)·x
Mat scale_rows(Mat x, const std::vector<float>& d) {
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < x.cols; ++j) x(i, j) *= d[i];
  return x;
}

float dot(const float* x, const float* y, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

Mat rows_of(const std::vector<float>& x, int64_t t0, int64_t L, int64_t width) {
  Mat m(L, width);
  std::copy_n(x.begin() + t0 * width, L * width, m.a.begin());
  return m;
}

// Everything about one chunk that does not depend on the state entering it.
struct Chunk {
  int64_t t0, L;
  Mat q, k, v;                       // [L, K], [L, K], [L, V]
  std::vector<float> beta;           // [L]
  std::vector<float> gamma;          // [L] e^{G_i}: decay from the chunk start to token i
  std::vector<float> lambda;         // [L] e^{G_last − G_j}: decay from token j to the chunk end
  Mat decay;                         // [L, L] Γ
  Mat kk, qk_decay;                  // [L, L] K Kᵀ and Q Kᵀ ⊙ Γ
  Mat a, t;                          // [L, L] A (strictly lower) and T = (I + A)⁻¹
  Mat u, w;                          // [L, V] and [L, K] WY factors
  float gamma_last() const { return gamma[L - 1]; }
};

Chunk make_chunk(const DeltaRuleHead<float>& x, int64_t t0) {
  Chunk c;
  c.t0 = t0;
  c.L = std::min(kDeltaRuleChunk, x.L - t0);
  const int64_t L = c.L;
  c.q = rows_of(x.q, t0, L, x.K);
  c.k = rows_of(x.k, t0, L, x.K);
  c.v = rows_of(x.v, t0, L, x.V);
  c.beta.assign(x.beta.begin() + t0, x.beta.begin() + t0 + L);
  // The running sum is kept in double: with strong decays G reaches hundreds within a
  // chunk, and a float sum would leave the differences G_i − G_j few correct bits.
  std::vector<double> G(L);
  double running = 0;
  for (int64_t i = 0; i < L; ++i) G[i] = running += x.g[t0 + i];
  c.gamma.resize(L);
  c.lambda.resize(L);
  c.decay = Mat(L, L);
  for (int64_t i = 0; i < L; ++i) {
    c.gamma[i] = static_cast<float>(std::exp(G[i]));
    c.lambda[i] = static_cast<float>(std::exp(G[L - 1] - G[i]));
    for (int64_t j = 0; j <= i; ++j) c.decay(i, j) = static_cast<float>(std::exp(G[i] - G[j]));
  }
  c.kk = matmul_nt(c.k, c.k);
  c.qk_decay = hadamard(matmul_nt(c.q, c.k), c.decay);
  c.a = Mat(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) c.a(i, j) = c.beta[i] * c.kk(i, j) * c.decay(i, j);
  // (I + A)·T = I row by row: T_i = e_i − Σ_{m<i} A_im T_m (forward substitution).
  c.t = Mat(L, L);
  for (int64_t i = 0; i < L; ++i) {
    c.t(i, i) = 1.0f;
    for (int64_t m = 0; m < i; ++m) {
      const float s = c.a(i, m);
      for (int64_t j = 0; j <= m; ++j) c.t(i, j) -= s * c.t(m, j);
    }
  }
  c.u = matmul(c.t, scale_rows(c.v, c.beta));
  std::vector<float> beta_gamma(L);
  for (int64_t i = 0; i < L; ++i) beta_gamma[i] = c.beta[i] * c.gamma[i];
  c.w = matmul(c.t, scale_rows(c.k, beta_gamma));
  return c;
}

// Δ = U − W S for the state S entering the chunk.
Mat new_values(const Chunk& c, const Mat& S) {
  Mat delta = c.u;
  const Mat ws = matmul(c.w, S);
  for (size_t i = 0; i < delta.a.size(); ++i) delta.a[i] -= ws.a[i];
  return delta;
}

// Writes the chunk's outputs (when o is given) and carries S to the chunk's end.
void advance(const Chunk& c, float scale, Mat& S, float* o) {
  const Mat delta = new_values(c, S);
  if (o) {
    const Mat inter = scale_rows(matmul(c.q, S), c.gamma);  // diag(e^G) Q S
    const Mat intra = matmul(c.qk_decay, delta);
    for (size_t i = 0; i < inter.a.size(); ++i) o[i] = scale * (inter.a[i] + intra.a[i]);
  }
  Mat next = matmul_tn(c.k, scale_rows(delta, c.lambda));
  for (size_t i = 0; i < next.a.size(); ++i) next.a[i] += c.gamma_last() * S.a[i];
  S = std::move(next);
}

Mat state_of(const std::vector<float>& s, int64_t K, int64_t V) {
  Mat S(K, V);
  S.a = s;
  return S;
}

// Gradient with respect to e^{G_i − G_j}·x_ij for the pairs of `p` (p_ij = that term times
// its upstream gradient): +p_ij on G_i, −p_ij on G_j. The diagonal cancels exactly and is
// skipped: adding and removing a large p_ii would cost dG_i its low bits when the decays
// are strong and the true dG_i is small.
void add_pair_decay_grads(const Mat& p, std::vector<float>& dG) {
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t j = 0; j < i; ++j) {
      dG[i] += p(i, j);
      dG[j] -= p(i, j);
    }
}

// Backward through one chunk, from dO [L, V] and dL/dS at the chunk's end; writes the
// chunk's rows of grads and returns dL/dS at the chunk's start. Each block differentiates
// one step of advance / make_chunk, last step first (dX names dL/dX).
Mat chunk_backward(const Chunk& c, float scale, const Mat& S, const Mat& dO, const Mat& dS_end,
                   DeltaRuleHeadGrads<float>& grads) {
  const int64_t L = c.L, K = c.k.cols, V = c.v.cols;
  const Mat delta = new_values(c, S);
  std::vector<float> dG(L, 0.0f), dbeta(L, 0.0f);

  // S_end = e^{G_last} S + Kᵀ diag(λ) Δ and O = scale·(diag(e^G) Q S + (Q Kᵀ ⊙ Γ) Δ).
  const Mat k_dS = matmul(c.k, dS_end);                                    // [L, V]
  Mat d_delta = matmul_tn(c.qk_decay, dO);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < V; ++j) d_delta(i, j) = scale * d_delta(i, j) + c.lambda[i] * k_dS(i, j);
  Mat dS = matmul_tn(c.q, scale_rows(dO, c.gamma));
  for (size_t i = 0; i < dS.a.size(); ++i) dS.a[i] = scale * dS.a[i] + c.gamma_last() * dS_end.a[i];
  const Mat dO_delta = matmul_nt(dO, delta);                              // [L, L]
  const Mat d_qk_decay = hadamard(dO_delta, c.decay);                     // scale applied below
  Mat dq = matmul(d_qk_decay, c.k), dk = matmul_tn(d_qk_decay, c.q);
  const Mat dO_St = matmul_nt(dO, S);                                     // dO Sᵀ [L, K]
  const Mat delta_dSt = matmul_nt(scale_rows(delta, c.lambda), dS_end);   // diag(λ) Δ dS_endᵀ
  const Mat qS = matmul(c.q, S);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t m = 0; m < K; ++m) {
      dq(i, m) = scale * (dq(i, m) + c.gamma[i] * dO_St(i, m));
      dk(i, m) = scale * dk(i, m) + delta_dSt(i, m);
    }
    dG[i] += scale * c.gamma[i] * dot(dO.row(i), qS.row(i), V);
    if (i < L - 1) {  // through λ_i = e^{G_last − G_i} (constant 1 for the last token)
      const float r = c.lambda[i] * dot(k_dS.row(i), delta.row(i), V);
      dG[L - 1] += r;
      dG[i] -= r;
    }
  }
  dG[L - 1] += c.gamma_last() * dot(S.a.data(), dS_end.a.data(), K * V);
  Mat pair = hadamard(dO_delta, c.qk_decay);
  for (float& x : pair.a) x *= scale;
  add_pair_decay_grads(pair, dG);

  // Δ = U − W S.
  const Mat& dU = d_delta;
  Mat dW = matmul_nt(d_delta, S);
  for (float& x : dW.a) x = -x;
  const Mat wt_d_delta = matmul_tn(c.w, d_delta);
  for (size_t i = 0; i < dS.a.size(); ++i) dS.a[i] -= wt_d_delta.a[i];

  // U = T diag(β) V and W = T diag(β e^G) K.
  std::vector<float> beta_gamma(L);
  for (int64_t i = 0; i < L; ++i) beta_gamma[i] = c.beta[i] * c.gamma[i];
  Mat dT = matmul_nt(dU, scale_rows(c.v, c.beta));
  const Mat dT_w = matmul_nt(dW, scale_rows(c.k, beta_gamma));
  for (size_t i = 0; i < dT.a.size(); ++i) dT.a[i] += dT_w.a[i];
  const Mat d_beta_v = matmul_tn(c.t, dU);          // dL/d(diag(β) V)
  const Mat d_beta_gamma_k = matmul_tn(c.t, dW);    // dL/d(diag(β e^G) K)
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < V; ++j) grads.dv[(c.t0 + i) * V + j] = c.beta[i] * d_beta_v(i, j);
    dbeta[i] += dot(d_beta_v.row(i), c.v.row(i), V);
    const float dk_dot_k = dot(d_beta_gamma_k.row(i), c.k.row(i), K);
    dbeta[i] += c.gamma[i] * dk_dot_k;
    dG[i] += beta_gamma[i] * dk_dot_k;
    for (int64_t m = 0; m < K; ++m) dk(i, m) += beta_gamma[i] * d_beta_gamma_k(i, m);
  }

  // T = (I + A)⁻¹ gives dA = −Tᵀ dT Tᵀ, kept on the strictly lower entries A is made of:
  // A_ij = β_i (k_i·k_j) Γ_ij.
  const Mat tt_dT_tt = matmul_nt(matmul_tn(c.t, dT), c.t);
  Mat d_kk(L, L), pair_a(L, L);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) {
      const float dA = -tt_dT_tt(i, j);
      dbeta[i] += dA * c.kk(i, j) * c.decay(i, j);
      d_kk(i, j) = dA * c.beta[i] * c.decay(i, j);
      pair_a(i, j) = dA * c.a(i, j);
    }
  add_pair_decay_grads(pair_a, dG);
  const Mat dk_rows = matmul(d_kk, c.k), dk_cols = matmul_tn(d_kk, c.k);  // k_i·k_j feeds both rows
  for (size_t i = 0; i < dk.a.size(); ++i) dk.a[i] += dk_rows.a[i] + dk_cols.a[i];

  // G_i = Σ_{s≤i} g_s, so dg_s = Σ_{i≥s} dG_i.
  float suffix = 0;
  for (int64_t i = L - 1; i >= 0; --i) {
    suffix += dG[i];
    grads.dg[c.t0 + i] = suffix;
    grads.dbeta[c.t0 + i] = dbeta[i];
  }
  std::copy(dq.a.begin(), dq.a.end(), grads.dq.begin() + c.t0 * K);
  std::copy(dk.a.begin(), dk.a.end(), grads.dk.begin() + c.t0 * K);
  return dS;
}

}  // namespace

void chunked_forward(const DeltaRuleHead<float>& x, float scale, std::vector<float>& o,
                     std::vector<float>& final_state) {
  o.assign(x.L * x.V, 0.0f);
  Mat S = state_of(x.s0, x.K, x.V);
  for (int64_t t0 = 0; t0 < x.L; t0 += kDeltaRuleChunk) advance(make_chunk(x, t0), scale, S, &o[t0 * x.V]);
  final_state = std::move(S.a);
}

void chunked_backward(const DeltaRuleHead<float>& x, float scale, const std::vector<float>& d_o,
                      const std::vector<float>& d_final_state, DeltaRuleHeadGrads<float>& grads) {
  grads.dq.assign(x.L * x.K, 0.0f);
  grads.dk.assign(x.L * x.K, 0.0f);
  grads.dv.assign(x.L * x.V, 0.0f);
  grads.dg.assign(x.L, 0.0f);
  grads.dbeta.assign(x.L, 0.0f);
  // The states entering each chunk, recomputed by the forward sweep without outputs.
  std::vector<Mat> starts;
  Mat S = state_of(x.s0, x.K, x.V);
  for (int64_t t0 = 0; t0 < x.L; t0 += kDeltaRuleChunk) {
    starts.push_back(S);
    advance(make_chunk(x, t0), scale, S, nullptr);
  }
  Mat dS = state_of(d_final_state, x.K, x.V);
  for (int64_t n = static_cast<int64_t>(starts.size()) - 1; n >= 0; --n) {
    const Chunk c = make_chunk(x, n * kDeltaRuleChunk);
    dS = chunk_backward(c, scale, starts[n], rows_of(d_o, c.t0, c.L, x.V), dS, grads);
  }
  grads.ds0 = std::move(dS.a);
}

}  // namespace seqmix::cpu
