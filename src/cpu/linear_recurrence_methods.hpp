// The four methods that solve one chain h_t = A_t h_{t-1} + b_t (t = 0..T-1, from a
// given start state) on dense row-major buffers. The forward runs them on the input
// chain; the backward runs the same code on the reverse-time chain through A_tᵀ.
#pragma once

#include <cstdint>
#include <functional>

#include "seqmix/linear_recurrence.hpp"

namespace seqmix::cpu::recurrence {

template <class S>
struct Chain {
  const S* A;        // [T, n, n]
  const S* b;        // [T, n, m]
  const S* h_start;  // [n, m], the state before step 0
  int64_t T, n, m;
};

// While alive, float arithmetic on this thread flushes subnormal results and inputs
// to zero (x86 FTZ and DAZ; a no-op elsewhere or when `active` is false). Products of
// many contracting transitions, which the chunked, scan and cyclic-reduction methods
// form, underflow into the subnormal range, where x86 arithmetic is about 100× slower;
// GPU float32 kernels flush them too. Values below 1e-38 do not change a result
// whose norm is order one.
class FlushSubnormals {
 public:
  explicit FlushSubnormals(bool active);
  ~FlushSubnormals();
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  bool active_;
  unsigned saved_ = 0;
};

// Runs the independent pieces of a method (pairs, chunks, time steps, column blocks)
// on all cores, or serially when the caller already spreads groups over the cores.
// Pieces too small to pay for starting threads run serially too. Threads it starts
// flush subnormals when asked (the calling thread sets its own FlushSubnormals).
struct Workers {
  bool parallel = false;
  bool flush_subnormals = false;
  int count() const;  // threads a for_each may use
  void for_each(int64_t items, int64_t flops_per_item, const std::function<void(int64_t)>& body) const;
};

// Writes h [T, n, m]. chunk_size (chunked only) is resolved already (≥ 1).
template <class S>
void solve_sequential(const Chain<S>& chain, S* h, const Workers& workers);
template <class S>
void solve_chunked(const Chain<S>& chain, S* h, int64_t chunk_size, const Workers& workers);
template <class S>
void solve_scan(const Chain<S>& chain, S* h, const Workers& workers);
template <class S>
void solve_cyclic_reduction(const Chain<S>& chain, S* h, const Workers& workers);

// Dispatch on a resolved method (never `automatic`).
template <class S>
void solve(LinearRecurrenceMethod method, const Chain<S>& chain, S* h, int64_t chunk_size, const Workers& workers);

// The automatic rule, from measurements on the CPU (bench/cpu_linear_recurrence.md).
LinearRecurrenceMethod choose_method(int64_t G, int64_t T, int64_t n, int64_t m);
// Steps per chunk when the caller leaves it at 0.
int64_t choose_chunk_size(int64_t T, const Workers& workers);

}  // namespace seqmix::cpu::recurrence
