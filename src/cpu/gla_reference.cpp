// The float64 oracle of gated linear attention: the recurrence of the definition, one
// token at a time, and its backward written analytically as a reverse-time recurrence.
#include <cmath>
#include <vector>

#include "cpu/gla_head.hpp"

namespace seqmix::cpu::gla {
namespace {

// S ← diag(exp g_t)·S + k_tᵀ v_t on a dense [K, V] state.
void step(const HeadShape& s, const HeadInputs<double>& in, int64_t t, double* S) {
  for (int64_t i = 0; i < s.K; ++i) {
    const double decay = std::exp(in.g[t][i]), key = in.k[t][i];
    for (int64_t j = 0; j < s.V; ++j) S[i * s.V + j] = decay * S[i * s.V + j] + key * in.v[t][j];
  }
}

// o_t = scale · q_t S_t.
void read_out(const HeadShape& s, const double* q, const double* S, double* o) {
  for (int64_t j = 0; j < s.V; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < s.K; ++i) sum += q[i] * S[i * s.V + j];
    o[j] = s.scale * sum;
  }
}

}  // namespace

void reference_forward(const HeadShape& s, const HeadInputs<double>& in, const HeadForward<double>& out) {
  std::vector<double> S(in.h0, in.h0 + s.K * s.V);
  for (int64_t t = 0; t < s.length; ++t) {
    step(s, in, t, S.data());
    read_out(s, in.q[t], S.data(), out.o[t]);
  }
  std::copy(S.begin(), S.end(), out.hT);
}

// With dS_t = dL/dS_t through o_t and S_{t+1}:
//   dS_t = scale·q_tᵀ do_t + diag(exp g_{t+1})·dS_{t+1},   dS_T also gets dL/d(final state);
//   dq_t = scale·do_t S_tᵀ,   dk_t = v_t dS_tᵀ,   dv_t = k_t dS_t,
//   dg_t[i] = exp(g_t[i]) Σ_j dS_t[i, j]·S_{t-1}[i, j],   dL/dS_0 = diag(exp g_1)·dS_1.
void reference_backward(const HeadShape& s, const HeadInputs<double>& in, const HeadBackward<double>& grads) {
  const int64_t KV = s.K * s.V;
  std::vector<double> states((s.length + 1) * KV);  // states[t·KV ...] = S_t, S_0 the initial state
  std::copy(in.h0, in.h0 + KV, states.begin());
  for (int64_t t = 0; t < s.length; ++t) {
    std::copy(states.begin() + t * KV, states.begin() + (t + 1) * KV, states.begin() + (t + 1) * KV);
    step(s, in, t, states.data() + (t + 1) * KV);
  }
  std::vector<double> dS(grads.dhT, grads.dhT + KV);
  for (int64_t t = s.length - 1; t >= 0; --t) {
    const double* S_before = states.data() + t * KV;
    const double* S_after = states.data() + (t + 1) * KV;
    const double *q = in.q[t], *k = in.k[t], *v = in.v[t], *g = in.g[t], *d_o = grads.d_o[t];
    for (int64_t i = 0; i < s.K; ++i)
      for (int64_t j = 0; j < s.V; ++j) dS[i * s.V + j] += s.scale * q[i] * d_o[j];
    for (int64_t i = 0; i < s.K; ++i) {
      double dq = 0, dk = 0, dg = 0;
      for (int64_t j = 0; j < s.V; ++j) {
        dq += d_o[j] * S_after[i * s.V + j];
        dk += dS[i * s.V + j] * v[j];
        dg += dS[i * s.V + j] * S_before[i * s.V + j];
      }
      grads.dq[t][i] = s.scale * dq;
      grads.dk[t][i] = dk;
      grads.dg[t][i] = std::exp(g[i]) * dg;
    }
    for (int64_t j = 0; j < s.V; ++j) {
      double dv = 0;
      for (int64_t i = 0; i < s.K; ++i) dv += k[i] * dS[i * s.V + j];
      grads.dv[t][j] = dv;
    }
    for (int64_t i = 0; i < s.K; ++i)
      for (int64_t j = 0; j < s.V; ++j) dS[i * s.V + j] *= std::exp(g[i]);
  }
  std::copy(dS.begin(), dS.end(), grads.dh0);
}

}  // namespace seqmix::cpu::gla
