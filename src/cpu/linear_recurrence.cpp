// Dense linear recurrence on the CPU: dense buffers in, one chain per group through
// the chosen method, dense buffers out. Templated on the scalar: double with the
// sequential method is the oracle, float with any method the fast path.
#include "cpu/linear_recurrence.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <vector>

#include "core/dense.hpp"
#include "core/parallel.hpp"
#include "cpu/linear_recurrence_kernels.hpp"
#include "cpu/linear_recurrence_methods.hpp"

namespace seqmix::cpu {
namespace {

using recurrence::Chain;
using recurrence::Workers;

// How one call uses the cores: with at least one group per thread each group runs
// whole on one thread; with fewer groups they run one after the other and the
// method spreads its own independent pieces over the threads (never both, so
// threads never start threads). The float32 path flushes subnormals on every thread
// it computes on.
struct Plan {
  LinearRecurrenceMethod method;
  int64_t chunk_size;
  bool over_groups;
  Workers inner;

  Plan(const LinearRecurrenceProblem& p, Impl impl) {
    over_groups = p.G >= core::num_threads();
    inner.parallel = !over_groups;
    inner.flush_subnormals = impl != Impl::reference;
    if (impl == Impl::reference) method = LinearRecurrenceMethod::sequential;
    else if (p.method == LinearRecurrenceMethod::automatic) method = recurrence::choose_method(p.G, p.T, p.n, p.m);
    else method = p.method;
    chunk_size = p.chunk_size > 0 ? p.chunk_size : recurrence::choose_chunk_size(p.T, inner);
  }

  void for_each_group(int64_t G, const std::function<void(int64_t)>& body) const {
    if (over_groups) {
      core::parallel_for(G, [&](int64_t g) {
        recurrence::FlushSubnormals flush(inner.flush_subnormals);
        body(g);
      });
      return;
    }
    recurrence::FlushSubnormals flush(inner.flush_subnormals);
    for (int64_t g = 0; g < G; ++g) body(g);
  }
};

// True when t's memory already is a row-major array of S.
template <class S>
bool holds(const Tensor& t) {
  return t.dtype == (sizeof(S) == sizeof(float) ? DType::f32 : DType::f64) && t.is_contiguous();
}

// An input as a contiguous array of S: the tensor's own memory when it already is one
// (float32 inputs of the fast path, float64 ones of the oracle), else a converted copy.
// core::to_dense converts element by element through a dtype switch, which costs
// more than the whole sequential method at n = 32, m = 1.
template <class S>
class DenseIn {
 public:
  DenseIn(const std::optional<Tensor>& t, size_t count) {
    if (t && holds<S>(*t)) {
      data_ = static_cast<const S*>(t->data);
      return;
    }
    copy_ = core::to_dense_or_zeros<S>(t, count);
    data_ = copy_.data();
  }
  const S* data() const { return data_; }

 private:
  std::vector<S> copy_;
  const S* data_;
};

// Where an output is computed: in the tensor itself when it is a contiguous array of
// S, else in a buffer that write_back() converts into it (an absent output gets a
// scratch buffer and no write-back).
template <class S>
class DenseOut {
 public:
  DenseOut(const std::optional<Tensor>& t, size_t count) : target_(t) {
    if (t && holds<S>(*t)) {
      data_ = static_cast<S*>(t->data);
      return;
    }
    buffer_.assign(count, S(0));
    data_ = buffer_.data();
  }
  S* data() const { return data_; }
  void write_back() const {
    if (target_ && !buffer_.empty()) core::from_dense(buffer_, *target_);
  }

 private:
  std::optional<Tensor> target_;
  std::vector<S> buffer_;
  S* data_;
};

template <class S>
struct Inputs {
  const int64_t T, n, m;
  DenseIn<S> A, b, h0;  // [G, T, n, n], [G, T, n, m], [G, n, m]
  Inputs(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in)
      : T(p.T), n(p.n), m(p.m),
        A(in.A, p.G * p.T * p.n * p.n),
        b(in.b, p.G * p.T * p.n * p.m),
        h0(in.initial_state, p.G * p.n * p.m) {}
  const S* A_of(int64_t g) const { return A.data() + g * T * n * n; }
  const S* h0_of(int64_t g) const { return h0.data() + g * n * m; }
  Chain<S> chain(int64_t g) const { return {A_of(g), b.data() + g * T * n * m, h0_of(g), T, n, m}; }
};

template <class S>
void transpose(S* out, const S* A, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) out[k * n + i] = A[i * n + k];
}

template <class S>
void forward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in, const LinearRecurrenceOutputs& out,
             const Plan& plan) {
  const Inputs<S> x(p, in);
  const int64_t step = p.n * p.m;
  const DenseOut<S> h(out.h, p.G * p.T * step), final_state(out.final_state, p.G * step);
  plan.for_each_group(p.G, [&](int64_t g) {
    S* h_g = h.data() + g * p.T * step;
    recurrence::solve(plan.method, x.chain(g), h_g, plan.chunk_size, plan.inner);
    std::copy(h_g + (p.T - 1) * step, h_g + p.T * step, final_state.data() + g * step);
  });
  h.write_back();
  final_state.write_back();
}

// The gradient g_t = dL/dh_t (through h_t itself and through h_{t+1}) obeys
//   g_T = dh_T + d_final,   g_t = dh_t + A_{t+1}ᵀ g_{t+1},
// a linear recurrence run backwards in time. Reversed, u_s = g_{T-1-s} (0-based) is
//   u_s = A'_s u_{s-1} + dh_{T-1-s},  A'_0 = I, A'_s = A_{T-s}ᵀ,  u_{-1} = d_final,
// which the same method solves. Then db_t = g_t, dA_t = g_t h_{t-1}ᵀ, dh_0 = A_1ᵀ g_1.
template <class S>
void backward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in, const Tensor& dh_view,
              const std::optional<Tensor>& d_final_state, const LinearRecurrenceGrads& grads, const Plan& plan) {
  const Inputs<S> x(p, in);
  const int64_t T = p.T, n = p.n, m = p.m, nn = n * n, step = n * m;
  const DenseIn<S> dh(dh_view, p.G * T * step), d_final(d_final_state, p.G * step);
  const DenseOut<S> dA(grads.dA, p.G * T * nn), db(grads.db, p.G * T * step);
  const DenseOut<S> dh0(grads.d_initial_state, p.G * step);
  plan.for_each_group(p.G, [&](int64_t g) {
    std::vector<S> h(T * step);  // [T, n, m] recomputed states
    recurrence::solve(plan.method, x.chain(g), h.data(), plan.chunk_size, plan.inner);

    std::vector<S> reverse_A(T * nn, S(0)), reverse_b(T * step), u(T * step);
    for (int64_t i = 0; i < n; ++i) reverse_A[i * n + i] = S(1);
    for (int64_t s = 1; s < T; ++s) transpose(reverse_A.data() + s * nn, x.A_of(g) + (T - s) * nn, n);
    for (int64_t s = 0; s < T; ++s) {
      const S* dh_t = dh.data() + (g * T + T - 1 - s) * step;
      std::copy(dh_t, dh_t + step, reverse_b.data() + s * step);
    }
    const Chain<S> reverse{reverse_A.data(), reverse_b.data(), d_final.data() + g * step, T, n, m};
    recurrence::solve(plan.method, reverse, u.data(), plan.chunk_size, plan.inner);

    plan.inner.for_each(T, nn * m, [&](int64_t t) {
      const S* g_t = u.data() + (T - 1 - t) * step;
      const S* h_before = t == 0 ? x.h0_of(g) : h.data() + (t - 1) * step;
      std::copy(g_t, g_t + step, db.data() + (g * T + t) * step);
      S* dA_t = dA.data() + (g * T + t) * nn;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t k = 0; k < n; ++k) {
          S sum = 0;
          for (int64_t j = 0; j < m; ++j) sum += g_t[i * m + j] * h_before[k * m + j];
          dA_t[i * n + k] = sum;
        }
    });
    std::vector<S> A0_transposed(nn);
    transpose(A0_transposed.data(), x.A_of(g), n);
    recurrence::affine<S>(dh0.data() + g * step, A0_transposed.data(), u.data() + (T - 1) * step, nullptr, n, m);
  });
  dA.write_back();
  db.write_back();
  dh0.write_back();
}

}  // namespace

void linear_recurrence_forward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in,
                               const LinearRecurrenceOutputs& out, Impl impl) {
  const Plan plan(p, impl);
  if (impl == Impl::reference) forward<double>(p, in, out, plan);
  else forward<float>(p, in, out, plan);
}

void linear_recurrence_backward(const LinearRecurrenceProblem& p, const LinearRecurrenceInputs& in,
                                const Tensor& dh, const std::optional<Tensor>& d_final_state,
                                const LinearRecurrenceGrads& grads, Impl impl) {
  const Plan plan(p, impl);
  if (impl == Impl::reference) backward<double>(p, in, dh, d_final_state, grads, plan);
  else backward<float>(p, in, dh, d_final_state, grads, plan);
}

}  // namespace seqmix::cpu
