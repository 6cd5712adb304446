// Gated scan on the CPU. One algorithm, templated on the scalar: T = double is the
// oracle, T = float the fast path. The GPU form is the same sequential scan over time,
// parallel over channels, so the float path shares it.
#include "cpu/gated_scan.hpp"

#include <cmath>

#include "core/dense.hpp"
#include "core/parallel.hpp"

namespace seqmix::cpu {
namespace {

template <class T>
T silu(T x) { return x / (T(1) + std::exp(-x)); }

template <class T>
T silu_grad(T x) {
  T s = T(1) / (T(1) + std::exp(-x));
  return s * (T(1) + x * (T(1) - s));
}

template <class T>
struct Buffers {
  std::vector<T> a, b, z, h0;
  bool gated;
  Buffers(const GatedScanProblem& p, const GatedScanInputs& in)
      : a(core::to_dense<T>(in.a)),
        b(core::to_dense<T>(in.b)),
        z(in.z ? core::to_dense<T>(*in.z) : std::vector<T>()),
        h0(core::to_dense_or_zeros<T>(in.initial_state, p.sequences.size() * p.D)),
        gated(in.z.has_value()) {}
  T decay(const GatedScanProblem& p, size_t i) const {
    switch (p.decay) {
      case Decay::log: return std::exp(a[i]);
      case Decay::logit: return T(1) / (T(1) + std::exp(-a[i]));
      default: return a[i];
    }
  }
  // d(decay)/d(a_i), given the decay value.
  T decay_grad(const GatedScanProblem& p, T decay_value) const {
    switch (p.decay) {
      case Decay::log: return decay_value;
      case Decay::logit: return decay_value * (T(1) - decay_value);
      default: return T(1);
    }
  }
};

template <class T>
void forward(const GatedScanProblem& p, const GatedScanInputs& in, const GatedScanOutputs& out) {
  Buffers<T> x(p, in);
  std::vector<T> y(x.b.size()), hT(p.sequences.size() * p.D);
  const int64_t D = p.D;
  core::parallel_for(static_cast<int64_t>(p.sequences.size()) * D, [&](int64_t item) {
    const int64_t n = item / D, d = item % D;
    const core::Sequence& s = p.sequences[n];
    T h = x.h0[n * D + d];
    for (int64_t t = 0; t < s.length; ++t) {
      const size_t i = (s.row0(p.T) + t) * D + d;
      h = x.decay(p, i) * h + x.b[i];
      y[i] = x.gated ? h * silu(x.z[i]) : h;
    }
    hT[n * D + d] = h;
  });
  core::from_dense(y, out.y);
  core::from_dense(hT, out.final_state);
}

// Reverse-time recurrence: with g_t = dL/dh_t (through y_t and h_{t+1}),
//   g_t = dy_t·SiLU(z_t) + a_{t+1}·g_{t+1},  g_T += dL/dh_T (final state),
//   db_t = g_t,  da_t = g_t·h_{t-1}·d(decay)/d(a_t),
//   dz_t = dy_t·h_t·SiLU'(z_t),  dh_0 = a_1·g_1.
template <class T>
void backward(const GatedScanProblem& p, const GatedScanInputs& in, const Tensor& dy_view,
              const std::optional<Tensor>& d_final_state, const GatedScanGrads& grads) {
  Buffers<T> x(p, in);
  const std::vector<T> dy = core::to_dense<T>(dy_view);
  const std::vector<T> dhT = core::to_dense_or_zeros<T>(d_final_state, p.sequences.size() * p.D);
  std::vector<T> da(x.a.size()), db(x.b.size()), dz(x.z.size()), dh0(x.h0.size());
  const int64_t D = p.D;
  core::parallel_for(static_cast<int64_t>(p.sequences.size()) * D, [&](int64_t item) {
    const int64_t n = item / D, d = item % D;
    const core::Sequence& s = p.sequences[n];
    std::vector<T> h(s.length + 1);  // h[t + 1] = h_t, h[0] = initial state
    h[0] = x.h0[n * D + d];
    for (int64_t t = 0; t < s.length; ++t) {
      const size_t i = (s.row0(p.T) + t) * D + d;
      h[t + 1] = x.decay(p, i) * h[t] + x.b[i];
    }
    // Past the last token the "next" step carries dL/dh_T with unit decay.
    T g_next = dhT[n * D + d], a_next = T(1);
    for (int64_t t = s.length - 1; t >= 0; --t) {
      const size_t i = (s.row0(p.T) + t) * D + d;
      const T g = a_next * g_next + (x.gated ? dy[i] * silu(x.z[i]) : dy[i]);
      if (x.gated) dz[i] = dy[i] * h[t + 1] * silu_grad(x.z[i]);
      const T a = x.decay(p, i);
      db[i] = g;
      da[i] = g * h[t] * x.decay_grad(p, a);
      g_next = g;
      a_next = a;
    }
    dh0[n * D + d] = a_next * g_next;
  });
  core::from_dense(da, grads.da);
  core::from_dense(db, grads.db);
  core::from_dense(dz, grads.dz);
  core::from_dense(dh0, grads.d_initial_state);
}

}  // namespace

void gated_scan_forward(const GatedScanProblem& p, const GatedScanInputs& in,
                        const GatedScanOutputs& out, Impl impl) {
  if (impl == Impl::reference) forward<double>(p, in, out);
  else forward<float>(p, in, out);
}

void gated_scan_backward(const GatedScanProblem& p, const GatedScanInputs& in, const Tensor& dy,
                         const std::optional<Tensor>& d_final_state, const GatedScanGrads& grads,
                         Impl impl) {
  if (impl == Impl::reference) backward<double>(p, in, dy, d_final_state, grads);
  else backward<float>(p, in, dy, d_final_state, grads);
}

}  // namespace seqmix::cpu
