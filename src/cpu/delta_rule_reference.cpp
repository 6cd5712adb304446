// The float64 oracle of the gated delta rule: the recurrence of the definition, one
// token at a time, and its analytic backward (checked against finite differences).
#include <cmath>

#include "cpu/delta_rule_head.hpp"

namespace seqmix::cpu {
namespace {

// S ← exp(g_t)·(I − β_t k_tᵀ k_t)·S + β_t k_tᵀ v_t, with the transition matrix built
// explicitly so the code reads as the definition.
void step(const DeltaRuleHead<double>& x, int64_t t, std::vector<double>& S) {
  const int64_t K = x.K, V = x.V;
  const double* k = &x.k[t * K];
  const double* v = &x.v[t * V];
  const double a = std::exp(x.g[t]), beta = x.beta[t];
  std::vector<double> next(K * V, 0.0);
  for (int64_t i = 0; i < K; ++i) {
    for (int64_t m = 0; m < K; ++m) {
      const double transition = (i == m ? 1.0 : 0.0) - beta * k[i] * k[m];
      for (int64_t j = 0; j < V; ++j) next[i * V + j] += a * transition * S[m * V + j];
    }
    for (int64_t j = 0; j < V; ++j) next[i * V + j] += beta * k[i] * v[j];
  }
  S = std::move(next);
}

// o_t = scale·q_t S_t.
void readout(const DeltaRuleHead<double>& x, int64_t t, double scale, const std::vector<double>& S, double* o) {
  for (int64_t j = 0; j < x.V; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < x.K; ++i) sum += x.q[t * x.K + i] * S[i * x.V + j];
    o[j] = scale * sum;
  }
}

}  // namespace

void reference_forward(const DeltaRuleHead<double>& x, double scale, std::vector<double>& o,
                       std::vector<double>& final_state) {
  o.assign(x.L * x.V, 0.0);
  final_state = x.s0;
  for (int64_t t = 0; t < x.L; ++t) {
    step(x, t, final_state);
    readout(x, t, scale, final_state, &o[t * x.V]);
  }
}

// With M = dL/dS_t (from o_t, and from S_{t+1} or the final state), P = S_{t-1},
// a = exp(g_t), w = k_t M and u = k_t P (rows of length V), since
//   S_t = a·P − a·β k_tᵀ u + β k_tᵀ v_t:
//   dq_t = scale·S_t do_tᵀ            dv_t = β w
//   dβ_t = w·(v_t − a u)              dg_t = ⟨M, S_t⟩ − β w·v_t   (∂S_t/∂g_t = S_t − β k_tᵀ v_t)
//   dk_t = M (β(v_t − a u))ᵀ − a β P wᵀ
//   dL/dS_{t-1} = a (M − β k_tᵀ w)    (then plus scale·q_{t-1}ᵀ do_{t-1})
void reference_backward(const DeltaRuleHead<double>& x, double scale, const std::vector<double>& d_o,
                        const std::vector<double>& d_final_state, DeltaRuleHeadGrads<double>& grads) {
  const int64_t L = x.L, K = x.K, V = x.V;
  std::vector<std::vector<double>> states{x.s0};  // states[t] = S_t, states[0] the initial state
  for (int64_t t = 0; t < L; ++t) {
    states.push_back(states.back());
    step(x, t, states.back());
  }
  grads.dq.assign(L * K, 0.0);
  grads.dk.assign(L * K, 0.0);
  grads.dv.assign(L * V, 0.0);
  grads.dg.assign(L, 0.0);
  grads.dbeta.assign(L, 0.0);
  std::vector<double> M = d_final_state, w(V), u(V);
  for (int64_t t = L - 1; t >= 0; --t) {
    const double* q = &x.q[t * K];
    const double* k = &x.k[t * K];
    const double* v = &x.v[t * V];
    const double* dot = &d_o[t * V];
    const std::vector<double>& P = states[t];
    const std::vector<double>& S = states[t + 1];
    const double a = std::exp(x.g[t]), beta = x.beta[t];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) M[i * V + j] += scale * q[i] * dot[j];
    for (int64_t j = 0; j < V; ++j) {
      w[j] = u[j] = 0;
      for (int64_t i = 0; i < K; ++i) {
        w[j] += k[i] * M[i * V + j];
        u[j] += k[i] * P[i * V + j];
      }
    }
    double dg = 0;
    for (int64_t i = 0; i < K; ++i) {
      double dq = 0, dk = 0;
      for (int64_t j = 0; j < V; ++j) {
        dq += S[i * V + j] * dot[j];
        dk += M[i * V + j] * beta * (v[j] - a * u[j]) - a * beta * P[i * V + j] * w[j];
        dg += M[i * V + j] * S[i * V + j];
      }
      grads.dq[t * K + i] = scale * dq;
      grads.dk[t * K + i] = dk;
    }
    double dbeta = 0;
    for (int64_t j = 0; j < V; ++j) {
      grads.dv[t * V + j] = beta * w[j];
      dbeta += w[j] * (v[j] - a * u[j]);
      dg -= beta * w[j] * v[j];
    }
    grads.dg[t] = dg;
    grads.dbeta[t] = dbeta;
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) M[i * V + j] = a * (M[i * V + j] - beta * k[i] * w[j]);
  }
  grads.ds0 = std::move(M);
}

}  // namespace seqmix::cpu
