// The parallel methods on float copies of a chain (maps [G, T, n, n], states [G, T, n, m]
// holding the offsets b_t on entry and the states h_t on exit), built from batched
// compositions of affine maps (compose.cuh) and, for the chunked method's pass over
// chunk summaries, the sequential kernel.
#include <algorithm>
#include <vector>

#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/compose.cuh"
#include "cuda/linear_recurrence/methods.hpp"
#include "cuda/linear_recurrence/sequential.cuh"

namespace seqmix::cuda::linrec {
namespace {

// Cyclic reduction's top level: at most this many elements, walked sequentially.
constexpr int64_t kCyclicWalkLength = 32;

struct Refs {
  const FloatChain& c;
  int64_t nn() const { return c.n * c.n; }
  int64_t nm() const { return c.n * c.m; }
  // Item i ↦ position off + (i / div)·stride of the maps or the states.
  MapRef maps(int64_t off, int64_t stride, int64_t div = 1) const {
    return {c.maps, off, stride, div, nn(), c.T * nn(), nullptr, 0};
  }
  MapRef states(int64_t off, int64_t stride, int64_t div = 1) const {
    return {c.states, off, stride, div, nm(), c.T * nm(), c.start, nm()};
  }
};

void launch_compose(const ComposeParams& p, int64_t G, cudaStream_t stream) {
  if (p.items <= 0) return;
  const int smem = compose_smem_floats(p.n) * static_cast<int>(sizeof(float));
  check(cudaFuncSetAttribute(compose_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (compose)");
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.items, 4096)), static_cast<unsigned>(G));
  compose_kernel<0><<<grid, kThreads, smem, stream>>>(p);
  check_launch("linear_recurrence compose");
}

// out = X·y + x (apply) or the full composition (when Y is given), items [0, count).
ComposeParams compose(const FloatChain& c, MapRef X, MapRef x, MapRef Y, MapRef y, MapRef out_M, MapRef out_v,
                      int64_t count) {
  ComposeParams p;
  p.X = X, p.x = x, p.Y = Y, p.y = y, p.out_M = out_M, p.out_v = out_v;
  p.items = count;
  p.n = static_cast<int>(c.n), p.m = static_cast<int>(c.m);
  return p;
}

}  // namespace

// Chunks of C steps: (1) chunk-local prefix maps in place (M_t = A_t···A_{t0}, v_t the
// state from a zero start), (2) the state entering every chunk by the sequential kernel
// over the chunk summaries (M, v at each chunk's last step), (3) h_t = M_t·start + v_t.
void solve_chunked(const FloatChain& c, int64_t C, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Refs r{c};
  const int64_t chunks = (c.T + C - 1) / C, nm = r.nm();
  float* starts = c.extra;  // [G, chunks, n, m]
  {
    ChunkPrefixParams p{c.maps, c.states, c.T, C, static_cast<int>(c.n), static_cast<int>(c.m)};
    const int smem = compose_smem_floats(p.n) * static_cast<int>(sizeof(float));
    check(cudaFuncSetAttribute(chunk_prefix_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute (chunk prefix)");
    chunk_prefix_kernel<0><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(c.G)), kThreads, smem, stream>>>(p);
    check_launch("linear_recurrence chunk prefix");
  }
  check(cudaMemcpy2DAsync(starts, chunks * nm * sizeof(float), c.start, nm * sizeof(float), nm * sizeof(float), c.G,
                          cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpy2DAsync (chunk starts)");
  if (chunks > 1) {
    SeqParams p;
    SeqChain& s = p.chains[0];
    s.A = c.maps + (C - 1) * r.nn(), s.a_step = C * r.nn(), s.a_group = c.T * r.nn();
    s.b = c.states + (C - 1) * nm, s.b_step = C * nm, s.b_group = c.T * nm;
    s.start = c.start, s.start_group = nm;
    s.out = starts + nm, s.out_step = nm, s.out_group = chunks * nm, s.out_float = true;
    s.steps = chunks - 1;
    p.n = c.n, p.m = c.m;
    launch_sequential<float>(p, c.G, stream_ptr);
  }
  MapRef chunk_start{starts, 0, 1, C, nm, chunks * nm, nullptr, 0};
  launch_compose(compose(c, r.maps(0, 1), r.states(0, 1), MapRef{}, chunk_start, MapRef{}, r.states(0, 1), c.T),
                 c.G, stream);
}

// Hillis–Steele: round d composes map t with map t-d, so map t then covers steps
// t-2d+1..t. The start state is folded into map 0 first, which makes every map that
// reaches step 0 constant: its offset is the state and its transition is dropped.
void solve_scan(const FloatChain& c, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t nn = c.n * c.n, nm = c.n * c.m;
  FloatChain cur = c, next = c;
  next.maps = c.extra;
  next.states = c.extra + c.G * c.T * nn;
  {  // v_0 ← M_0·start + v_0
    const Refs r{cur};
    launch_compose(compose(c, r.maps(0, 1), r.states(0, 1), MapRef{}, r.states(-1, 1), MapRef{}, r.states(0, 1), 1),
                   c.G, stream);
  }
  for (int64_t d = 1; d < c.T; d *= 2) {
    const Refs from{cur}, to{next};
    check(cudaMemcpy2DAsync(next.states, c.T * nm * sizeof(float), cur.states, c.T * nm * sizeof(float),
                            d * nm * sizeof(float), c.G, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpy2DAsync (complete states)");
    // Maps d..2d-1 reach step 0 this round: offsets only.
    launch_compose(compose(c, from.maps(d, 1), from.states(d, 1), MapRef{}, from.states(0, 1), MapRef{},
                           to.states(d, 1), std::min(d, c.T - d)),
                   c.G, stream);
    if (c.T > 2 * d)
      launch_compose(compose(c, from.maps(2 * d, 1), from.states(2 * d, 1), from.maps(d, 1), from.states(d, 1),
                             to.maps(2 * d, 1), to.states(2 * d, 1), c.T - 2 * d),
                     c.G, stream);
    std::swap(cur, next);
  }
  if (cur.states != c.states)
    check(cudaMemcpyAsync(c.states, cur.states, c.G * c.T * nm * sizeof(float), cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpyAsync (scan states)");
}

// Odd–even elimination in place. Element j of level L lives at position (j+1)·2^L − 1;
// pairing elements 2i, 2i+1 writes their composition over element 2i+1, which is
// element i of level L+1. The elimination stops at the first level of at most
// kCyclicWalkLength elements, whose states the sequential kernel walks from the start in
// one launch (each of the levels it replaces is a launch of a few tiny products, a
// launch's latency each: at T = 1024 the walk replaces 11 of 21 launches). Going down,
// every even element's state follows from the odd state before it, which the level above
// already wrote at its own position.
void solve_cyclic_reduction(const FloatChain& c, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Refs r{c};
  std::vector<int64_t> lengths{c.T};
  while (lengths.back() > kCyclicWalkLength) {
    const int64_t L = static_cast<int64_t>(lengths.size()) - 1, len = lengths.back(), span = int64_t(1) << L;
    const int64_t pairs = len / 2;
    const MapRef odd_M = r.maps(2 * span - 1, 2 * span), odd_v = r.states(2 * span - 1, 2 * span);
    launch_compose(compose(c, odd_M, odd_v, r.maps(span - 1, 2 * span), r.states(span - 1, 2 * span), odd_M, odd_v,
                           pairs),
                   c.G, stream);
    lengths.push_back(pairs);
  }
  {  // the top level's states, in place over its offsets
    const int64_t top = static_cast<int64_t>(lengths.size()) - 1, span = int64_t(1) << top;
    SeqParams p;
    SeqChain& s = p.chains[0];
    s.A = c.maps + (span - 1) * r.nn(), s.a_step = span * r.nn(), s.a_group = c.T * r.nn();
    s.b = c.states + (span - 1) * r.nm(), s.b_step = span * r.nm(), s.b_group = c.T * r.nm();
    s.start = c.start, s.start_group = r.nm();
    s.out = c.states + (span - 1) * r.nm(), s.out_step = span * r.nm(), s.out_group = c.T * r.nm();
    s.out_float = true;
    s.steps = lengths.back();
    p.n = c.n, p.m = c.m;
    launch_sequential<float>(p, c.G, stream_ptr);
  }
  for (int64_t L = static_cast<int64_t>(lengths.size()) - 2; L >= 0; --L) {
    const int64_t span = int64_t(1) << L, evens = (lengths[L] + 1) / 2;
    const MapRef M = r.maps(span - 1, 2 * span), v = r.states(span - 1, 2 * span);
    // y: the state before element 2i, at position 2i·2^L − 1 (the start for i = 0).
    launch_compose(compose(c, M, v, MapRef{}, r.states(-1, 2 * span), MapRef{}, v, evens), c.G, stream);
  }
}

}  // namespace seqmix::cuda::linrec
