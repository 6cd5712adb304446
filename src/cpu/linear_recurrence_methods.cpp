// The four methods of the dense linear recurrence on one chain, templated on the
// scalar (double for the oracle, float for the fast path).
//
// Multiply-adds per chain with n×n transitions and n×m states:
//   sequential        T·n²·m                                critical path T steps
//   chunked           T·n³ + 2·T·n²·m                       critical path C + T/C steps
//   scan              (T·log2 T − 2T)·n³ + T·log2 T·n²·m    critical path log2 T rounds
//   cyclic_reduction  T·n³ + 2·T·n²·m                       critical path 2·log2 T levels
// The parallel methods buy a short critical path with at least n/m + 2 times the
// work of the sequential one, which is why the sequential method wins on a CPU.
#include "cpu/linear_recurrence_methods.hpp"

#include <algorithm>
#include <vector>

#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#endif

#include "core/parallel.hpp"
#include "cpu/linear_recurrence_kernels.hpp"

namespace seqmix::cpu::recurrence {

#if defined(__SSE__) || defined(_M_X64)
FlushSubnormals::FlushSubnormals(bool active) : active_(active) {
  if (!active_) return;
  saved_ = _mm_getcsr();
  _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON | 0x0040 /* denormals are zero */);
}
FlushSubnormals::~FlushSubnormals() {
  if (active_) _mm_setcsr(saved_);
}
#else
FlushSubnormals::FlushSubnormals(bool active) : active_(active) {}
FlushSubnormals::~FlushSubnormals() {}
#endif

int Workers::count() const { return parallel ? core::num_threads() : 1; }

void Workers::for_each(int64_t items, int64_t flops_per_item, const std::function<void(int64_t)>& body) const {
  // Starting the threads of one parallel_for costs tens of microseconds: below this
  // much arithmetic a single thread is done sooner.
  constexpr int64_t kMinParallelFlops = 1 << 16;
  if (parallel && items > 1 && items * flops_per_item >= kMinParallelFlops) {
    core::parallel_for(items, [&](int64_t i) {
      FlushSubnormals flush(flush_subnormals);
      body(i);
    });
    return;
  }
  for (int64_t i = 0; i < items; ++i) body(i);
}

// Step by step. The columns of a matrix state evolve independently under the same
// A_t, so blocks of columns run on separate threads.
template <class S>
void solve_sequential(const Chain<S>& c, S* h, const Workers& workers) {
  const int64_t n = c.n, m = c.m, step = n * m;
  const int64_t blocks = std::min<int64_t>(m, workers.count());
  workers.for_each(blocks, c.T * n * n * (m / blocks), [&](int64_t block) {
    const int64_t j0 = block * m / blocks, cols = (block + 1) * m / blocks - j0;
    const S* previous = c.h_start + j0;
    for (int64_t t = 0; t < c.T; ++t) {
      S* current = h + t * step + j0;
      affine(current, c.A + t * n * n, previous, c.b + t * step + j0, n, cols, m);
      previous = current;
    }
  });
}

// Chunks of C steps computed independently from a zero start: the prefix products
// P_t = A_t···A_{t0} and local states; then the true start of every chunk by a short
// sequential pass over chunk ends; then h_t = local_t + P_t·start(chunk of t).
template <class S>
void solve_chunked(const Chain<S>& c, S* h, int64_t C, const Workers& workers) {
  const int64_t n = c.n, m = c.m, nn = n * n, step = n * m;
  const int64_t chunks = (c.T + C - 1) / C;
  std::vector<S> P(c.T * nn);  // [T, n, n] chunk-local prefix products
  workers.for_each(chunks, C * (nn * n + nn * m), [&](int64_t chunk) {
    const int64_t t0 = chunk * C, t1 = std::min(c.T, t0 + C);
    std::copy(c.A + t0 * nn, c.A + (t0 + 1) * nn, P.data() + t0 * nn);
    std::copy(c.b + t0 * step, c.b + (t0 + 1) * step, h + t0 * step);  // local state, zero start
    for (int64_t t = t0 + 1; t < t1; ++t) {
      compose_transitions(P.data() + t * nn, c.A + t * nn, P.data() + (t - 1) * nn, n);
      affine(h + t * step, c.A + t * nn, h + (t - 1) * step, c.b + t * step, n, m);
    }
  });
  std::vector<S> starts(chunks * step);  // [chunks, n, m] the state before each chunk
  std::copy(c.h_start, c.h_start + step, starts.data());
  for (int64_t chunk = 1; chunk < chunks; ++chunk) {
    const int64_t last = chunk * C - 1;  // the previous chunk's last step
    affine(starts.data() + chunk * step, P.data() + last * nn, starts.data() + (chunk - 1) * step, h + last * step,
           n, m);
  }
  workers.for_each(c.T, nn * m, [&](int64_t t) {
    affine(h + t * step, P.data() + t * nn, starts.data() + (t / C) * step, h + t * step, n, m);
  });
}

// Hillis–Steele prefix scan of the affine maps x ↦ A_t x + b_t. Round k composes
// every map with the one d = 2^k steps back, so after the round map t covers steps
// t-2d+1..t. The start state is folded into step 0 (b_0 ← A_0 h_start + b_0), which
// makes map 0 constant: a map that reaches back to step 0 is complete, its offset is
// the state h_t, and its transition is no longer needed.
template <class S>
void solve_scan(const Chain<S>& c, S* h, const Workers& workers) {
  const int64_t n = c.n, m = c.m, nn = n * n, step = n * m;
  std::vector<S> offsets(c.T * step), next_offsets(c.T * step);            // [T, n, m]
  std::vector<S> transitions(c.T * nn), next_transitions(c.T * nn);        // [T, n, n]
  std::copy(c.b, c.b + c.T * step, offsets.begin());
  std::copy(c.A, c.A + c.T * nn, transitions.begin());
  affine(offsets.data(), c.A, c.h_start, c.b, n, m);
  for (int64_t d = 1; d < c.T; d *= 2) {
    std::copy(offsets.begin(), offsets.begin() + d * step, next_offsets.begin());  // complete already
    workers.for_each(c.T - d, nn * n + nn * m, [&](int64_t i) {
      const int64_t t = d + i;
      const S* A_t = transitions.data() + t * nn;
      affine(next_offsets.data() + t * step, A_t, offsets.data() + (t - d) * step, offsets.data() + t * step, n, m);
      if (t >= 2 * d)  // still short of step 0 after this round
        compose_transitions(next_transitions.data() + t * nn, A_t, transitions.data() + (t - d) * nn, n);
    });
    offsets.swap(next_offsets);
    transitions.swap(next_transitions);
  }
  std::copy(offsets.begin(), offsets.end(), h);
}

// Cyclic (odd–even) reduction. Pairing steps 2i and 2i+1 gives a chain of half the
// length over the odd states: h_{2i+1} = (A_{2i+1}A_{2i}) h_{2i-1} + (A_{2i+1}b_{2i} + b_{2i+1}),
// with the same start state. Solve it recursively, then every even state follows
// from the odd state before it: h_{2i} = A_{2i} h_{2i-1} + b_{2i} (h_{-1} = h_start).
// An odd T leaves the last step unpaired; it is back-substituted like the others.
template <class S>
void solve_cyclic_reduction(const Chain<S>& c, S* h, const Workers& workers) {
  const int64_t n = c.n, m = c.m, nn = n * n, step = n * m;
  if (c.T == 1) {
    affine(h, c.A, c.h_start, c.b, n, m);
    return;
  }
  const int64_t pairs = c.T / 2;
  std::vector<S> A2(pairs * nn), b2(pairs * step), h2(pairs * step);
  workers.for_each(pairs, nn * n + nn * m, [&](int64_t i) {
    const S* A_odd = c.A + (2 * i + 1) * nn;
    compose_transitions(A2.data() + i * nn, A_odd, c.A + 2 * i * nn, n);
    affine(b2.data() + i * step, A_odd, c.b + 2 * i * step, c.b + (2 * i + 1) * step, n, m);
  });
  solve_cyclic_reduction(Chain<S>{A2.data(), b2.data(), c.h_start, pairs, n, m}, h2.data(), workers);
  workers.for_each((c.T + 1) / 2, nn * m, [&](int64_t i) {
    const S* before = i == 0 ? c.h_start : h2.data() + (i - 1) * step;  // h_{2i-1}
    affine(h + 2 * i * step, c.A + 2 * i * nn, before, c.b + 2 * i * step, n, m);
    if (i < pairs) std::copy(h2.data() + i * step, h2.data() + (i + 1) * step, h + (2 * i + 1) * step);
  });
}

template <class S>
void solve(LinearRecurrenceMethod method, const Chain<S>& chain, S* h, int64_t chunk_size, const Workers& workers) {
  switch (method) {
    case LinearRecurrenceMethod::chunked: return solve_chunked(chain, h, chunk_size, workers);
    case LinearRecurrenceMethod::scan: return solve_scan(chain, h, workers);
    case LinearRecurrenceMethod::cyclic_reduction: return solve_cyclic_reduction(chain, h, workers);
    case LinearRecurrenceMethod::sequential:
    case LinearRecurrenceMethod::automatic: return solve_sequential(chain, h, workers);
  }
}

// Measured (bench/cpu_linear_recurrence.md): the sequential method is the fastest
// for every shape tried, from n = 1 to 128, m = 1 to 32, T up to 65536, one group or
// many. Its work is T·n²·m against at least T·n³ for the others, and it is already
// parallel over groups and over the columns of a matrix state; the others would need
// more than about n/m + 2 otherwise idle cores to catch up, which no measurement here
// had. The shape stays in the signature for a rule measured on a larger machine.
LinearRecurrenceMethod choose_method(int64_t /*G*/, int64_t /*T*/, int64_t /*n*/, int64_t /*m*/) {
  return LinearRecurrenceMethod::sequential;
}

int64_t choose_chunk_size(int64_t T, const Workers& workers) {
  // A few chunks per thread balance the load; the pass over chunk ends stays short.
  const int64_t chunks = 4 * static_cast<int64_t>(workers.count());
  return std::max<int64_t>(1, (T + chunks - 1) / chunks);
}

#define SEQMIX_INSTANTIATE(S)                                                                                 \
  template void solve_sequential<S>(const Chain<S>&, S*, const Workers&);                                  \
  template void solve_chunked<S>(const Chain<S>&, S*, int64_t, const Workers&);                            \
  template void solve_scan<S>(const Chain<S>&, S*, const Workers&);                                        \
  template void solve_cyclic_reduction<S>(const Chain<S>&, S*, const Workers&);                            \
  template void solve<S>(LinearRecurrenceMethod, const Chain<S>&, S*, int64_t, const Workers&);
SEQMIX_INSTANTIATE(float)
SEQMIX_INSTANTIATE(double)
#undef SEQMIX_INSTANTIATE

}  // namespace seqmix::cpu::recurrence
