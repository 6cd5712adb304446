// The attention oracle, written from the definition in float64: for each query row the
// whole score row is materialised, masked, and put through a naive softmax.
#include <cmath>
#include <limits>

#include "core/parallel.hpp"
#include "cpu/attention.hpp"

namespace seqmix::cpu {
namespace {

using Row = std::vector<double>;

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// probs[j] = softmax_j(scale·q_i·k_j + mask) over the k_len keys of the sequence;
// returns the row's log-sum-exp. A row that sees no key gets probs = 0 and −inf.
double softmax_row(const AttentionProblem& p, const AttentionBuffers<double>& x, const AttentionSequence& s,
                   int64_t h, int64_t i, Row& probs) {
  const double minus_inf = -std::numeric_limits<double>::infinity();
  const int64_t visible = p.visible_keys(s, i);
  Row scores(s.k_len, minus_inf);
  for (int64_t j = 0; j < visible; ++j)
    scores[j] = p.scale * dot(&x.q[p.q_at(s, i, h)], &x.k[p.k_at(s, j, p.kv_head(h))], p.D);
  probs.assign(s.k_len, 0.0);
  if (visible == 0) return minus_inf;
  double max = minus_inf, sum = 0;
  for (double v : scores) max = std::max(max, v);
  for (int64_t j = 0; j < s.k_len; ++j) sum += std::exp(scores[j] - max);
  for (int64_t j = 0; j < s.k_len; ++j) probs[j] = std::exp(scores[j] - max) / sum;
  return max + std::log(sum);
}

}  // namespace

void reference_forward(const AttentionProblem& p, const AttentionBuffers<double>& x, Row& out, Row& lse) {
  out.assign(p.rows_q * p.Hq * p.Dv, 0.0);
  lse.assign(p.rows_q * p.Hq, 0.0);
  const int64_t items = static_cast<int64_t>(p.sequences.size()) * p.Hq;
  core::parallel_for(items, [&](int64_t item) {
    const AttentionSequence& s = p.sequences[item / p.Hq];
    const int64_t h = item % p.Hq, g = p.kv_head(h);
    Row probs;
    for (int64_t i = 0; i < s.q_len; ++i) {
      lse[p.lse_index(s, h, i)] = softmax_row(p, x, s, h, i, probs);
      double* o = &out[p.o_at(s, i, h)];
      for (int64_t j = 0; j < s.k_len; ++j)
        for (int64_t e = 0; e < p.Dv; ++e) o[e] += probs[j] * x.v[p.v_at(s, j, g) + e];
    }
  });
}

// With P the probabilities of a row, dP_j = dO·v_j and ℓ its log-sum-exp:
//   dv_j += P_j·dO,   dS_j = P_j·(dP_j − Σ_l P_l·dP_l) + P_j·dℓ   (softmax and LSE Jacobians),
//   dq   += scale·Σ_j dS_j·k_j,   dk_j += scale·dS_j·q.
// One work item per (sequence, kv head) owns its dk, dv and the dq of its query heads.
void reference_backward(const AttentionProblem& p, const AttentionBuffers<double>& x, const Row& dout,
                        const Row& d_lse, Row& dq, Row& dk, Row& dv) {
  dq.assign(x.q.size(), 0.0);
  dk.assign(x.k.size(), 0.0);
  dv.assign(x.v.size(), 0.0);
  const int64_t items = static_cast<int64_t>(p.sequences.size()) * p.Hkv;
  core::parallel_for(items, [&](int64_t item) {
    const AttentionSequence& s = p.sequences[item / p.Hkv];
    const int64_t g = item % p.Hkv;
    Row probs, dP(s.k_len);
    for (int64_t h = g * p.group(); h < (g + 1) * p.group(); ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        softmax_row(p, x, s, h, i, probs);
        const double* dO = &dout[p.o_at(s, i, h)];
        double expected_dP = 0;
        for (int64_t j = 0; j < s.k_len; ++j) {
          dP[j] = dot(dO, &x.v[p.v_at(s, j, g)], p.Dv);
          expected_dP += probs[j] * dP[j];
          for (int64_t e = 0; e < p.Dv; ++e) dv[p.v_at(s, j, g) + e] += probs[j] * dO[e];
        }
        const double dL = d_lse[p.lse_index(s, h, i)];
        for (int64_t j = 0; j < s.k_len; ++j) {
          const double dS = probs[j] * (dP[j] - expected_dP + dL);
          for (int64_t d = 0; d < p.D; ++d) {
            dq[p.q_at(s, i, h) + d] += p.scale * dS * x.k[p.k_at(s, j, g) + d];
            dk[p.k_at(s, j, g) + d] += p.scale * dS * x.q[p.q_at(s, i, h) + d];
          }
        }
      }
    }
  });
}

}  // namespace seqmix::cpu
