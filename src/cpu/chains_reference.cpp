// The float64 oracle of both chains, written from the definitions in seqmix/chains.hpp with
// naive loops (one dot product per output element), single threaded: obviously right, and
// slow on purpose. The backward formulas are checked against finite differences.
#include <vector>

#include "core/dense.hpp"
#include "cpu/chains.hpp"
#include "cpu/chains_math.hpp"

namespace seqmix::cpu::reference {
namespace {

using core::from_dense;
using core::to_dense;

// z[t][c] = bias[c] + Σ_k x[t][k]·weight[c][k].
std::vector<double> pre_activation(const ProjectionProblem& p, const std::vector<double>& x,
                                   const std::vector<double>& weight, const std::vector<double>& bias) {
  std::vector<double> z(p.tokens * p.columns);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t c = 0; c < p.columns; ++c) {
      double sum = bias[c];
      for (int64_t k = 0; k < p.d; ++k) sum += x[t * p.d + k] * weight[c * p.d + k];
      z[t * p.columns + c] = sum;
    }
  return z;
}

// u [tokens, heads·dv]: the RMS-normalised, SiLU-gated heads laid side by side.
std::vector<double> gated_heads(const OutputChainProblem& p, const std::vector<double>& o,
                                const std::vector<double>& g, const std::vector<double>& w) {
  std::vector<double> u(o.size());
  for (int64_t row = 0; row < p.tokens * p.heads; ++row)
    gated_rms_row(&o[row * p.dv], &g[row * p.dv], w.data(), p.dv, p.eps, &u[row * p.dv]);
  return u;
}

}  // namespace

void projection_chain_forward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                              const std::optional<Tensor>& bias, const std::vector<Tensor>& outputs) {
  const auto z = pre_activation(p, to_dense<double>(x), to_dense<double>(weight),
                                core::to_dense_or_zeros<double>(bias, p.columns));
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const ProjectionSegment& seg = p.segments[s];
    std::vector<double> y(p.tokens * seg.width);
    for (int64_t t = 0; t < p.tokens; ++t)
      for (int64_t j = 0; j < seg.width; ++j)
        y[t * seg.width + j] = activate(seg.activation, seg.tau, z[t * p.columns + p.offsets[s] + j]);
    from_dense(y, outputs[s]);
  }
}

// dz = dy ⊙ act'(z) per segment; dx = dz·weight, dweight = dzᵀ·x, dbias = Σ_t dz.
void projection_chain_backward(const ProjectionProblem& p, const Tensor& x_view, const Tensor& weight_view,
                               const std::optional<Tensor>& bias, const std::vector<Tensor>& d_outputs,
                               const ProjectionChainGrads& grads) {
  const auto x = to_dense<double>(x_view), weight = to_dense<double>(weight_view);
  const auto z = pre_activation(p, x, weight, core::to_dense_or_zeros<double>(bias, p.columns));
  std::vector<double> dz(z.size());
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const ProjectionSegment& seg = p.segments[s];
    const auto dy = to_dense<double>(d_outputs[s]);
    for (int64_t t = 0; t < p.tokens; ++t)
      for (int64_t j = 0; j < seg.width; ++j) {
        const int64_t i = t * p.columns + p.offsets[s] + j;
        dz[i] = dy[t * seg.width + j] * activation_derivative(seg.activation, seg.tau, z[i]);
      }
  }
  std::vector<double> dx(x.size(), 0.0), dweight(weight.size(), 0.0), dbias(p.columns, 0.0);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t c = 0; c < p.columns; ++c) {
      const double dzc = dz[t * p.columns + c];
      dbias[c] += dzc;
      for (int64_t k = 0; k < p.d; ++k) {
        dx[t * p.d + k] += dzc * weight[c * p.d + k];
        dweight[c * p.d + k] += dzc * x[t * p.d + k];
      }
    }
  from_dense(dx, grads.dx);
  from_dense(dweight, grads.dweight);
  from_dense(dbias, grads.dbias);
}

void output_chain_forward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& y_view) {
  const auto u = gated_heads(p, to_dense<double>(in.o), to_dense<double>(in.g), to_dense<double>(in.norm_weight));
  const auto out_weight = to_dense<double>(in.out_weight);
  const int64_t width = p.heads * p.dv;
  std::vector<double> y(p.tokens * p.d_out);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t n = 0; n < p.d_out; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < width; ++k) sum += u[t * width + k] * out_weight[n * width + k];
      y[t * p.d_out + n] = sum;
    }
  from_dense(y, y_view);
}

// du = dy·out_weight, dout_weight = dyᵀ·u, then each (token, head) row backward.
void output_chain_backward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& dy_view,
                           const OutputChainGrads& grads) {
  const auto o = to_dense<double>(in.o), g = to_dense<double>(in.g), w = to_dense<double>(in.norm_weight);
  const auto out_weight = to_dense<double>(in.out_weight), dy = to_dense<double>(dy_view);
  const auto u = gated_heads(p, o, g, w);
  const int64_t width = p.heads * p.dv;
  std::vector<double> du(u.size(), 0.0), dout_weight(out_weight.size(), 0.0);
  for (int64_t t = 0; t < p.tokens; ++t)
    for (int64_t n = 0; n < p.d_out; ++n)
      for (int64_t k = 0; k < width; ++k) {
        du[t * width + k] += dy[t * p.d_out + n] * out_weight[n * width + k];
        dout_weight[n * width + k] += dy[t * p.d_out + n] * u[t * width + k];
      }
  std::vector<double> d_o(o.size()), dg(g.size()), dw(p.dv, 0.0);
  for (int64_t row = 0; row < p.tokens * p.heads; ++row) {
    const int64_t i = row * p.dv;
    gated_rms_row_backward(&o[i], &g[i], w.data(), &du[i], p.dv, p.eps, &d_o[i], &dg[i], dw.data());
  }
  from_dense(d_o, grads.d_o);
  from_dense(dg, grads.dg);
  from_dense(dw, grads.dnorm_weight);
  from_dense(dout_weight, grads.dout_weight);
}

}  // namespace seqmix::cpu::reference
