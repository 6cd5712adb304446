// Elementwise math of the chains, templated on the scalar so the float64 oracle and the
// float32 path evaluate the very same formulas: the segment activations with their
// derivatives, and one (token, head) row of the gated RMSNorm.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "seqmix/chains.hpp"

namespace seqmix::cpu {

// 1 / (1 + exp(−z)) without overflowing exp for large |z|.
template <class T>
T sigmoid(T z) {
  if (z >= T(0)) return T(1) / (T(1) + std::exp(-z));
  const T e = std::exp(z);
  return e / (T(1) + e);
}

// log(1 + exp(z)) = max(z, 0) + log1p(exp(−|z|)), exact for large |z| in either sign.
template <class T>
T softplus(T z) {
  return std::max(z, T(0)) + std::log1p(std::exp(-std::abs(z)));
}

// The segment activation at the pre-activation z (tau only divides logsigmoid).
template <class T>
T activate(Activation activation, T tau, T z) {
  switch (activation) {
    case Activation::identity: return z;
    case Activation::silu: return z * sigmoid(z);
    case Activation::sigmoid: return sigmoid(z);
    case Activation::logsigmoid: return -softplus(-z) / tau;  // log σ(z) = −log(1 + e^{−z})
    case Activation::softplus: return softplus(z);
  }
  return z;
}

// d activate / dz at z.
template <class T>
T activation_derivative(Activation activation, T tau, T z) {
  switch (activation) {
    case Activation::identity: return T(1);
    case Activation::silu: {
      const T s = sigmoid(z);
      return s * (T(1) + z * (T(1) - s));
    }
    case Activation::sigmoid: {
      const T s = sigmoid(z);
      return s * (T(1) - s);
    }
    case Activation::logsigmoid: return sigmoid(-z) / tau;
    case Activation::softplus: return sigmoid(z);
  }
  return T(1);
}

// One head of one token in the output chain: with r = 1/sqrt(mean_j o_j² + eps),
//   u_j = o_j·r·w_j·SiLU(g_j),   j < dv.
template <class T>
void gated_rms_row(const T* o, const T* g, const T* w, int64_t dv, T eps, T* u) {
  T sum_squares = 0;
  for (int64_t j = 0; j < dv; ++j) sum_squares += o[j] * o[j];
  const T r = T(1) / std::sqrt(sum_squares / T(dv) + eps);
  for (int64_t j = 0; j < dv; ++j) u[j] = o[j] * r * w[j] * activate(Activation::silu, T(1), g[j]);
}

// Backward of gated_rms_row from du. With ô = o·r, n = ô·w, a_j = du_j·SiLU(g_j)·w_j:
//   dg_j = du_j·n_j·SiLU'(g_j),   dw_j += du_j·SiLU(g_j)·ô_j,
//   do_j = r·(a_j − ô_j·mean_k(a_k·ô_k))   (r depends on every o_k through the mean square).
template <class T>
void gated_rms_row_backward(const T* o, const T* g, const T* w, const T* du, int64_t dv, T eps, T* d_o, T* dg,
                            T* dw) {
  T sum_squares = 0;
  for (int64_t j = 0; j < dv; ++j) sum_squares += o[j] * o[j];
  const T r = T(1) / std::sqrt(sum_squares / T(dv) + eps);
  T a_dot_normed = 0;
  for (int64_t j = 0; j < dv; ++j) {
    const T normed = o[j] * r, gate = activate(Activation::silu, T(1), g[j]);
    dg[j] = du[j] * normed * w[j] * activation_derivative(Activation::silu, T(1), g[j]);
    dw[j] += du[j] * gate * normed;
    d_o[j] = du[j] * gate * w[j];  // a_j for now
    a_dot_normed += d_o[j] * normed;
  }
  const T mean = a_dot_normed / T(dv);
  for (int64_t j = 0; j < dv; ++j) d_o[j] = r * (d_o[j] - o[j] * r * mean);
}

}  // namespace seqmix::cpu
