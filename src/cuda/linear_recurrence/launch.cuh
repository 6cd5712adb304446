// Launchers: forward and backward of each method, in order on the caller's stream.
//   sequential  forward: one kernel over the inputs. backward: one launch running the
//               forward chain (states h; skipped when the forward's h is given) and the
//               reverse-time chain through A_tᵀ (gradients g) side by side, then the
//               gradient products.
//   chunked     for n ≤ 64 and m ≤ 8 (params.hpp), on tensor cores over the inputs
//               (chunked_tensor.cuh); the backward runs it on both chains.
//   others      float copies of the chain (io.cuh prep), the method in place
//               (methods.cu), then the states in the input dtype or the gradients.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/io.cuh"
#include "cuda/linear_recurrence/methods.hpp"
#include "cuda/linear_recurrence/sequential.cuh"

namespace seqmix::cuda::linrec {

// The caller's workspace, or stream-ordered scratch for this call (common/runtime.cuh).
class Scratch {
 public:
  Scratch(float* given, int64_t floats, cudaStream_t stream) : ptr_(given), stream_(stream) {
    if (!ptr_ && floats > 0) {
      ptr_ = static_cast<float*>(stream_scratch(floats * sizeof(float), stream_, "linear_recurrence workspace"));
      owned_ = true;
    }
  }
  ~Scratch() {
    if (owned_) cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return ptr_; }

 private:
  float* ptr_;
  cudaStream_t stream_;
  bool owned_ = false;
};

template <class T>
constexpr RecurrenceDtype dtype_of() {
  return sizeof(T) == 2 ? RecurrenceDtype::bf16 : RecurrenceDtype::f32;
}

// The chunked method's chunk length: the caller's, or the default of its path (the one
// linear_recurrence_workspace_floats sizes the scratch for).
template <class T>
int64_t chunk_of(const LinearRecurrenceParams& p) {
  if (p.chunk_size > 0) return std::min(p.chunk_size, p.T);
  return chunked_wide(p.n, p.m, dtype_of<T>()) ? default_wide_chunk_size(p.G, p.T) : default_chunk_size(p.G, p.T);
}

template <class T>
int64_t workspace_floats(const LinearRecurrenceParams& p, bool backward) {
  return linear_recurrence_workspace_floats(p.G, p.T, p.n, p.m, dtype_of<T>(), p.method, chunk_of<T>(p), backward);
}

// Which kernel forms dA and db for states of at most kStreamGradMaxCols columns (wider
// states always take the tiled one): SEQMIX_LINREC_GRADIENT=stream|tiles overrides the
// default, read at every call so that one process can time both (NOTES.md, version 6).
enum class GradientKernel { tiles, stream };
inline constexpr GradientKernel kDefaultGradientKernel = GradientKernel::stream;

inline GradientKernel gradient_kernel() {
  return choice_from_environment("SEQMIX_LINREC_GRADIENT",
                                 {{"stream", GradientKernel::stream}, {"tiles", GradientKernel::tiles}},
                                 kDefaultGradientKernel);
}

// h_t = A_t h_{t-1} + b_t over the inputs, states to out (float or T).
template <class T>
SeqChain forward_chain(const LinearRecurrenceParams& p, void* out, bool out_float) {
  const int64_t nn = p.n * p.n, nm = p.n * p.m;
  SeqChain c;
  c.A = p.A, c.a_step = nn, c.a_group = p.T * nn;
  c.b = p.b, c.b_step = nm, c.b_group = p.T * nm;
  c.start = p.initial_state, c.start_group = nm;
  c.out = out, c.out_step = nm, c.out_group = p.T * nm, c.out_float = out_float;
  c.steps = p.T;
  return c;
}

// u_s = A_{T-s}ᵀ u_{s-1} + dh_{T-1-s} (the identity for s = 0), u_{-1} = d_final: u_s is
// the gradient g_{T-1-s}. Float states to out.
template <class T>
SeqChain reverse_chain(const LinearRecurrenceParams& p, float* out) {
  const int64_t nn = p.n * p.n, nm = p.n * p.m;
  SeqChain c;
  c.A = static_cast<const T*>(p.A) + p.T * nn, c.a_step = -nn, c.a_group = p.T * nn;
  c.b = static_cast<const T*>(p.dh) + (p.T - 1) * nm, c.b_step = -nm, c.b_group = p.T * nm;
  c.start = p.d_final_state, c.start_group = nm;
  c.out = out, c.out_step = nm, c.out_group = p.T * nm, c.out_float = true;
  c.steps = p.T;
  c.transposed = true;
  c.identity_first = true;
  return c;
}

template <class T>
void prep(const LinearRecurrenceParams& p, const Workspace& w, float* states, bool reverse, cudaStream_t stream) {
  PrepParams<T> q;
  q.A = static_cast<const T*>(p.A);
  q.b = static_cast<const T*>(reverse ? p.dh : p.b);
  q.start = static_cast<const T*>(reverse ? p.d_final_state : p.initial_state);
  q.maps = w.maps, q.states = states, q.start_out = w.start;
  q.T_len = p.T, q.n = static_cast<int>(p.n), q.m = static_cast<int>(p.m), q.reverse = reverse;
  const int smem = static_cast<int>(p.n * (p.n + 1) * sizeof(float));
  check(cudaFuncSetAttribute(prep_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (prep)");
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.T, 4096)), static_cast<unsigned>(p.G));
  prep_kernel<T><<<grid, kThreads, smem, stream>>>(q);
  check_launch("linear_recurrence prep");
}

template <class T>
void solve(const LinearRecurrenceParams& p, const Workspace& w, float* states) {
  const FloatChain c{w.maps, states, w.start, w.extra, p.G, p.T, p.n, p.m};
  switch (p.method) {
    case RecurrenceMethod::chunked: return solve_chunked(c, chunk_of<T>(p), p.stream);
    case RecurrenceMethod::scan: return solve_scan(c, p.stream);
    case RecurrenceMethod::cyclic_reduction: return solve_cyclic_reduction(c, p.stream);
    case RecurrenceMethod::sequential: break;
  }
}

inline bool tensor_chunks(const LinearRecurrenceParams& p) {
  return p.method == RecurrenceMethod::chunked && chunked_on_tensor_cores(p.n, p.m);
}

// Matrix states of the chunked method, whole states a block (chunked_wide.cuh).
template <class T>
bool wide_chunks(const LinearRecurrenceParams& p) {
  return p.method == RecurrenceMethod::chunked && chunked_wide(p.n, p.m, dtype_of<T>());
}

// The split chunked method's launches on tensor cores for these chains: vector states and
// up to 8 columns (chunked_tensor.cuh) or whole matrix states a block (chunked_wide.cuh).
template <class T>
void solve_tensor_chunks(const LinearRecurrenceParams& p, const SeqChain* chains, int count, float* scratch) {
#if defined(SEQMIX_HAS_CUTLASS)  // as chunked_wide(), which sizes the workspace
  if (wide_chunks<T>(p))
    return solve_chunked_wide<T>(chains, count, p.G, p.T, p.n, p.m, chunk_of<T>(p), scratch, p.stream);
#endif
  solve_chunked_on_tensor_cores<T>(chains, count, p.G, p.T, p.n, p.m, chunk_of<T>(p), scratch, p.stream);
}

// The chunked method's chains of a vector state on tensor cores (the forward's, and the
// backward's two side by side) in three launches (split: summaries, the pass over them,
// the re-walk) or in one (fused_chunked.cuh): the fused
// chunk length, or 0 for the split path. SEQMIX_LINREC_CHUNKED_FORWARD=split|fused|fusedL
// (L: the chunk length, at least kMinFusedChunk; used when the caller gives no
// chunk_size) overrides the default, read at every call so one process can time both.
// Default, measured on the H100 (NOTES.md, version 7): one pass from 5 groups up (the
// grid's G = 16 and 64, read from 5 up as in choose_cuda_method), 1.18–1.48× faster than
// split at G = 16 and 64 (n 32 and 64, f32 and bf16); at one group the hand-off chain
// (T/16 hand-offs of ~1 µs) is the whole time and split wins (0.165 against 0.248 ms at
// T4096 n64 f32).
inline constexpr int64_t kFusedForwardMinGroups = 5;

inline int64_t fused_chunk_length(const LinearRecurrenceParams& p, bool backward) {
  if (!tensor_chunks(p) || p.m != 1) return 0;
  bool fused = p.G >= kFusedForwardMinGroups;
  int64_t L = backward ? kDefaultFusedChunkBackward : kDefaultFusedChunk;
  if (const char* value = std::getenv("SEQMIX_LINREC_CHUNKED_FORWARD")) {
    if (std::strcmp(value, "split") == 0) fused = false;
    if (std::strncmp(value, "fused", 5) == 0) {
      fused = true;
      if (value[5]) L = std::max<int64_t>(std::atoll(value + 5), kMinFusedChunk);
    }
  }
  if (p.chunk_size > 0) L = p.chunk_size;
  return fused ? std::min(L, p.T) : 0;
}

template <class T>
void forward(const LinearRecurrenceParams& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (const int64_t fused_chunk = fused_chunk_length(p, false); fused_chunk > 0) {
    const Scratch scratch(p.workspace, workspace_floats<T>(p, false), stream);
    SeqChain c = forward_chain<T>(p, p.h, false);
    c.last = p.final_state, c.last_group = p.n;
    solve_fused_chunked<T>(&c, 1, p.G, p.T, p.n, fused_chunk, scratch.get(), p.stream, false);
    return;
  }
  if (tensor_chunks(p) || wide_chunks<T>(p)) {
    const Scratch scratch(p.workspace, workspace_floats<T>(p, false), stream);
    SeqChain c = forward_chain<T>(p, p.h, false);
    c.last = p.final_state, c.last_group = p.n * p.m;
    solve_tensor_chunks<T>(p, &c, 1, scratch.get());
    return;
  }
  if (p.method == RecurrenceMethod::sequential) {
    SeqParams s;
    s.chains[0] = forward_chain<T>(p, p.h, false);
    s.chains[0].last = p.final_state, s.chains[0].last_group = p.n * p.m;
    s.n = p.n, s.m = p.m;
    launch_sequential<T>(s, p.G, p.stream);
    return;
  }
  const Scratch scratch(p.workspace, workspace_floats<T>(p, false), stream);
  const Workspace w = carve(scratch.get(), p, false);
  prep<T>(p, w, w.forward, false, stream);
  solve<T>(p, w, w.forward);
  const int64_t total = p.G * p.T * p.n * p.m;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 4096));
  store_kernel<T><<<blocks, kThreads, 0, stream>>>(w.forward, static_cast<T*>(p.h), static_cast<T*>(p.final_state),
                                                   p.G, p.T, p.n * p.m);
  check_launch("linear_recurrence store");
}

template <class T>
void backward(const LinearRecurrenceParams& p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const Scratch scratch(p.workspace, workspace_floats<T>(p, true), stream);
  Workspace w = carve(scratch.get(), p, true);
  const T* saved_states = nullptr;  // the forward's h when the gradients read it instead of w.forward
  if (p.method == RecurrenceMethod::sequential) {  // no float maps: only the two state arrays
    w.forward = scratch.get();
    w.reverse = w.forward + p.G * p.T * p.n * p.m;
    SeqParams s;
    s.n = p.n, s.m = p.m;
    if (p.states) {
      // The forward's h given: the reverse chain alone, half the blocks (one wave instead
      // of two at m = 64) and one read of A instead of two; the gradients read h from it.
      s.chains[0] = reverse_chain<T>(p, w.reverse);
      saved_states = static_cast<const T*>(p.states);
    } else {
      s.chains[0] = forward_chain<T>(p, w.forward, true);
      s.chains[1] = reverse_chain<T>(p, w.reverse);
    }
    launch_sequential<T>(s, p.G, p.stream);
  } else if (tensor_chunks(p) || wide_chunks<T>(p)) {  // the two state arrays, then both chains' summaries
    w.forward = scratch.get();
    w.reverse = w.forward + p.G * p.T * p.n * p.m;
    const SeqChain chains[2] = {forward_chain<T>(p, w.forward, true), reverse_chain<T>(p, w.reverse)};
    float* chain_scratch = w.reverse + p.G * p.T * p.n * p.m;
    if (const int64_t fused_chunk = fused_chunk_length(p, true); fused_chunk > 0 && p.states) {
      // The forward's h given: the reverse chain alone; the gradients read h from it.
      solve_fused_chunked<T>(chains + 1, 1, p.G, p.T, p.n, fused_chunk, chain_scratch, p.stream, true);
      saved_states = static_cast<const T*>(p.states);
    } else if (fused_chunk > 0) {
      solve_fused_chunked<T>(chains, 2, p.G, p.T, p.n, fused_chunk, chain_scratch, p.stream, true);
    } else if (p.states) {  // the split path's launches for the reverse chain alone
      solve_tensor_chunks<T>(p, chains + 1, 1, chain_scratch);
      saved_states = static_cast<const T*>(p.states);
    } else {
      solve_tensor_chunks<T>(p, chains, 2, chain_scratch);
    }
  } else {
    prep<T>(p, w, w.forward, false, stream);
    solve<T>(p, w, w.forward);
    prep<T>(p, w, w.reverse, true, stream);
    solve<T>(p, w, w.reverse);
  }
  GradParams<T> g;
  g.u = w.reverse, g.h = w.forward, g.h_saved = saved_states;
  g.h0 = static_cast<const T*>(p.initial_state);
  g.A = static_cast<const T*>(p.A);
  g.dA = static_cast<T*>(p.dA), g.db = static_cast<T*>(p.db), g.dh0 = static_cast<T*>(p.d_initial_state);
  g.T_len = p.T, g.n = static_cast<int>(p.n), g.m = static_cast<int>(p.m);
  if (launch_gradients_on_tensor_cores<T>(g, p.G, p.stream)) {
    // bf16 matrix states given the forward's h (grad_wgmma.cuh)
  } else if (p.m <= kStreamGradMaxCols && gradient_kernel() == GradientKernel::stream) {
    // About four waves of 8 blocks per SM over all groups, each thread walking ~16 tiles.
    const int64_t sms = multiprocessor_count();
    const int64_t items = p.T * (p.n / 4) * (p.n / 4);
    const int64_t blocks = std::max<int64_t>(1, std::min((items + kThreads - 1) / kThreads, 4 * 8 * sms / p.G));
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.G));
    grad_stream_kernel<T><<<grid, kThreads, 0, stream>>>(g);
  } else {
    const int smem = static_cast<int>(2 * kGradCols * (p.n + 4) * sizeof(float));
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.T, 8192)), static_cast<unsigned>(p.G));
    grad_kernel<T><<<grid, kThreads, smem, stream>>>(g);
  }
  check_launch("linear_recurrence gradients");
  if (p.d_initial_state) {
    initial_state_grad_kernel<T><<<static_cast<unsigned>(p.G), kThreads, 0, stream>>>(g);
    check_launch("linear_recurrence initial-state gradient");
  }
}

}  // namespace seqmix::cuda::linrec
