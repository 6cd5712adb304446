// Gated delta rule on the CPU: gathers each (sequence, head) from the dense batch,
// applies the optional L2 norm of q and k, runs the per-head algorithm (the float64
// recurrence or the float32 chunked form) and scatters the results back. Sequences ×
// heads are independent, so they are the parallel work items.
#include "cpu/delta_rule.hpp"

#include <algorithm>
#include <cmath>

#include "core/dense.hpp"
#include "core/parallel.hpp"
#include "cpu/delta_rule_head.hpp"

namespace seqmix::cpu {
namespace {

// fla's in-kernel norm: x / sqrt(Σ x² + eps), eps inside the square root.
constexpr double kL2Eps = 1e-6;

template <class T>
struct Buffers {
  std::vector<T> q, k, v, g, beta, s0;
  Buffers(const DeltaRuleProblem& p, const DeltaRuleInputs& in)
      : q(core::to_dense<T>(in.q)),
        k(core::to_dense<T>(in.k)),
        v(core::to_dense<T>(in.v)),
        g(core::to_dense<T>(in.g)),
        beta(core::to_dense<T>(in.beta)),
        s0(core::to_dense_or_zeros<T>(in.initial_state, p.sequences.size() * p.H * p.K * p.V)) {}
};

// Where one (sequence, head) lives in the dense [B, T, H, ·] and [N, H, K, V] buffers.
struct HeadIndex {
  const DeltaRuleProblem& p;
  int64_t n, h;
  int64_t length() const { return p.sequences[n].length; }
  // Offset of token t's row of `width` channels.
  size_t row(int64_t t, int64_t width) const {
    return static_cast<size_t>(((p.sequences[n].row0(p.T) + t) * p.H + h) * width);
  }
  size_t state() const { return static_cast<size_t>((n * p.H + h) * p.K * p.V); }
};

// Copies `width` channels of every token of the head between the batch and a head buffer.
template <class T>
void gather_rows(const HeadIndex& at, const std::vector<T>& from, int64_t width, std::vector<T>& to) {
  to.resize(at.length() * width);
  for (int64_t t = 0; t < at.length(); ++t)
    std::copy_n(from.begin() + at.row(t, width), width, to.begin() + t * width);
}

template <class T>
void scatter_rows(const HeadIndex& at, const std::vector<T>& from, int64_t width, std::vector<T>& to) {
  for (int64_t t = 0; t < at.length(); ++t)
    std::copy_n(from.begin() + t * width, width, to.begin() + at.row(t, width));
}

// Normalises each row of x [rows, cols] in place; returns the divisors sqrt(Σ x² + eps).
template <class T>
std::vector<T> l2_normalize_rows(std::vector<T>& x, int64_t cols) {
  std::vector<T> norms(x.size() / cols);
  for (size_t r = 0; r < norms.size(); ++r) {
    T sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c] * x[r * cols + c];
    norms[r] = std::sqrt(sum + T(kL2Eps));
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] /= norms[r];
  }
  return norms;
}

// With x̂ = x / n, n = sqrt(Σ x² + eps): dx = (dx̂ − x̂ (x̂·dx̂)) / n. In place on dx.
template <class T>
void l2_normalize_backward(const std::vector<T>& x_hat, const std::vector<T>& norms, int64_t cols,
                           std::vector<T>& dx) {
  for (size_t r = 0; r < norms.size(); ++r) {
    T dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += x_hat[r * cols + c] * dx[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = (dx[r * cols + c] - x_hat[r * cols + c] * dot) / norms[r];
  }
}

// A head ready for the algorithm, with the norms its backward needs.
template <class T>
struct PreparedHead {
  DeltaRuleHead<T> head;
  std::vector<T> q_norms, k_norms;
};

template <class T>
PreparedHead<T> gather_head(const DeltaRuleProblem& p, const Buffers<T>& x, const HeadIndex& at) {
  PreparedHead<T> r;
  DeltaRuleHead<T>& head = r.head;
  head.L = at.length();
  head.K = p.K;
  head.V = p.V;
  gather_rows(at, x.q, p.K, head.q);
  gather_rows(at, x.k, p.K, head.k);
  gather_rows(at, x.v, p.V, head.v);
  gather_rows(at, x.g, 1, head.g);
  gather_rows(at, x.beta, 1, head.beta);
  head.s0.assign(x.s0.begin() + at.state(), x.s0.begin() + at.state() + p.K * p.V);
  if (p.use_qk_l2norm) {
    r.q_norms = l2_normalize_rows(head.q, p.K);
    r.k_norms = l2_normalize_rows(head.k, p.K);
  }
  return r;
}

// The per-head algorithm of each implementation, chosen by overload on the scalar.
void head_forward(const DeltaRuleHead<double>& x, double scale, std::vector<double>& o, std::vector<double>& s) {
  reference_forward(x, scale, o, s);
}
void head_forward(const DeltaRuleHead<float>& x, float scale, std::vector<float>& o, std::vector<float>& s) {
  chunked_forward(x, scale, o, s);
}
void head_backward(const DeltaRuleHead<double>& x, double scale, const std::vector<double>& d_o,
                   const std::vector<double>& d_s, DeltaRuleHeadGrads<double>& grads) {
  reference_backward(x, scale, d_o, d_s, grads);
}
void head_backward(const DeltaRuleHead<float>& x, float scale, const std::vector<float>& d_o,
                   const std::vector<float>& d_s, DeltaRuleHeadGrads<float>& grads) {
  chunked_backward(x, scale, d_o, d_s, grads);
}

int64_t num_heads(const DeltaRuleProblem& p) { return static_cast<int64_t>(p.sequences.size()) * p.H; }

template <class T>
void forward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const DeltaRuleOutputs& out) {
  const Buffers<T> x(p, in);
  std::vector<T> o(x.v.size()), final_state(x.s0.size());
  core::parallel_for(num_heads(p), [&](int64_t item) {
    const HeadIndex at{p, item / p.H, item % p.H};
    const PreparedHead<T> prepared = gather_head(p, x, at);
    std::vector<T> head_o, head_state;
    head_forward(prepared.head, static_cast<T>(p.scale), head_o, head_state);
    scatter_rows(at, head_o, p.V, o);
    std::copy(head_state.begin(), head_state.end(), final_state.begin() + at.state());
  });
  core::from_dense(o, out.o);
  core::from_dense(final_state, out.final_state);
}

template <class T>
void backward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const Tensor& d_o_view,
              const std::optional<Tensor>& d_final_state, const DeltaRuleGrads& grads) {
  const Buffers<T> x(p, in);
  const std::vector<T> d_o = core::to_dense<T>(d_o_view);
  const std::vector<T> d_final = core::to_dense_or_zeros<T>(d_final_state, x.s0.size());
  std::vector<T> dq(x.q.size()), dk(x.k.size()), dv(x.v.size()), dg(x.g.size()), dbeta(x.beta.size()),
      ds0(x.s0.size());
  core::parallel_for(num_heads(p), [&](int64_t item) {
    const HeadIndex at{p, item / p.H, item % p.H};
    const PreparedHead<T> prepared = gather_head(p, x, at);
    std::vector<T> head_d_o, head_d_final(d_final.begin() + at.state(), d_final.begin() + at.state() + p.K * p.V);
    gather_rows(at, d_o, p.V, head_d_o);
    DeltaRuleHeadGrads<T> head_grads;
    head_backward(prepared.head, static_cast<T>(p.scale), head_d_o, head_d_final, head_grads);
    if (p.use_qk_l2norm) {
      l2_normalize_backward(prepared.head.q, prepared.q_norms, p.K, head_grads.dq);
      l2_normalize_backward(prepared.head.k, prepared.k_norms, p.K, head_grads.dk);
    }
    scatter_rows(at, head_grads.dq, p.K, dq);
    scatter_rows(at, head_grads.dk, p.K, dk);
    scatter_rows(at, head_grads.dv, p.V, dv);
    scatter_rows(at, head_grads.dg, 1, dg);
    scatter_rows(at, head_grads.dbeta, 1, dbeta);
    std::copy(head_grads.ds0.begin(), head_grads.ds0.end(), ds0.begin() + at.state());
  });
  core::from_dense(dq, grads.dq);
  core::from_dense(dk, grads.dk);
  core::from_dense(dv, grads.dv);
  core::from_dense(dg, grads.dg);
  core::from_dense(dbeta, grads.dbeta);
  core::from_dense(ds0, grads.d_initial_state);
}

}  // namespace

void delta_rule_forward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const DeltaRuleOutputs& out,
                        Impl impl) {
  if (impl == Impl::reference) forward<double>(p, in, out);
  else forward<float>(p, in, out);
}

void delta_rule_backward(const DeltaRuleProblem& p, const DeltaRuleInputs& in, const Tensor& d_o,
                         const std::optional<Tensor>& d_final_state, const DeltaRuleGrads& grads, Impl impl) {
  if (impl == Impl::reference) backward<double>(p, in, d_o, d_final_state, grads);
  else backward<float>(p, in, d_o, d_final_state, grads);
}

}  // namespace seqmix::cpu
