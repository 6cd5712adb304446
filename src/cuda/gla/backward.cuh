// Chunkwise GLA backward in three passes (the CPU form is src/cpu/gla_chunked.cpp):
//  1. states (forward.cuh, Pass::chunk_states): the state S_0 entering every chunk, rounded
//     to the input type, into a [N, H, max_chunks, K, V] table;
//  2. state gradients (state_grad_kernel): one block per (value block, head, sequence)
//     walks the chunks backwards carrying H = dL/dS_end in tensor-core registers, writes
//     each chunk's H into a second table, and d initial state at the start;
//        H_before = e^{b_last} ⊙ H + scale·(q ⊙ e^{b})ᵀ do
//  3. chunk gradients (gradient_kernel): one block per (chunk, head, sequence), all
//     independent, from q, k, g, v, do, S_0 and H (b: cumulative log decay in the chunk):
//        A  = the forward's causal decay-weighted scores   dA = scale·do vᵀ (j ≤ i)
//        dv = scale·Aᵀ do + (k ⊙ e^{b_last − b}) H
//        dq = scale·e^{b} ⊙ (do S_0ᵀ) + Σ_{j≤i} dA_ij k_j e^{b_i − b_j}
//        dk = e^{b_last − b} ⊙ (v Hᵀ) + Σ_{i≥j} dA_ij q_i e^{b_i − b_j}
//        dg in the cancellation-free form of gla_chunked.cpp (decay_gradient).
//     The products over V run on the tensor cores in 32-column slices of v, do, S_0, H;
//     the decay-weighted sums over token pairs run on the CUDA cores, one thread per key
//     channel and side (dq or dk), with running products of e^{g} ≤ 1 (nothing overflows).
#pragma once

#include "cuda/gla/launch.cuh"

namespace seqmix::cuda::gla {

// acc (a 16 × 8·NT block at rows m0, cols n0) += A·B over k in [k_begin, k_end) (multiples
// of 16). A is a row-major [m][k] tile, or with kATransposed a row-major [k][m] one; B is a
// row-major [k][n] tile, or with kBRows a row-major [n][k] one (B = tileᵀ).
template <bool kATransposed, bool kBRows, int NT, class E>
__device__ __forceinline__ void mma_block(float (&acc)[NT][4], const E* a, int pa, const E* b, int pb, int m0,
                                          int n0, int k_begin, int k_end, int lane) {
  static_assert(NT % 2 == 0, "B fragments come in pairs of 8-column tiles");
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    uint32_t af[4];
    if constexpr (kATransposed) load_a_transposed(af, a, pa, k0, m0, lane);
    else load_a(af, a, pa, m0, k0, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      if constexpr (kBRows) load_b_from_rows(bf, b, pb, n0 + 16 * np, k0, lane);
      else load_b(bf, b, pb, k0, n0 + 16 * np, lane);
      mma_pair<E>(acc[2 * np], acc[2 * np + 1], af, bf);
    }
  }
}

// ROWS × COLS of a row-major global array (row stride `stride`) into a shared tile.
template <int ROWS, int COLS, int PITCH, class E>
__device__ __forceinline__ void load_rows(E* dst, const E* src, int64_t stride, int tid) {
  constexpr int kVectors = COLS / 8;
#pragma unroll
  for (int i = tid; i < ROWS * kVectors; i += kThreads) {
    const int r = i / kVectors, c = (i % kVectors) * 8;
    copy16_async(dst + r * PITCH + c, src + r * stride + c, true);
  }
}

// Slot of chunk `chunk` of (sequence n, head h) in the [N, H, max_chunks, K, V] tables.
__device__ __forceinline__ int64_t chunk_slot(const GlaParams& p, int64_t n, int64_t h, int64_t chunk) {
  return (n * p.H + h) * p.max_chunks + chunk;
}

// ---- Pass 2: dL/dS at every chunk's end ----

template <class E, int KD, int VB>
struct StateGradSmem {
  static constexpr int PK = KD + 8, PV = VB + 8;  // the pitches StateTile::advance reads
  E q[kChunk * PK], g[kChunk * PK];
  E q_start[kChunk * PK];  // scale · q ⊙ e^{b}
  E d_o[kChunk * PV];
  float decay_all[KD];     // e^{b_last}
};

template <class E, int KD, int VB>
__global__ void __launch_bounds__(kThreads, 1) state_grad_kernel(const GlaParams p) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<StateGradSmem<E, KD, VB>*>(smem_bytes);
  constexpr int PK = StateGradSmem<E, KD, VB>::PK, PV = StateGradSmem<E, KD, VB>::PV;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int vb0 = blockIdx.x * VB;
  const int64_t h = blockIdx.y, n = blockIdx.z;
  const Span seq = sequence_span(p, n);
  const int64_t chunks = (seq.length + kChunk - 1) / kChunk;
  const int64_t state_offset = (n * p.H + h) * KD * p.V + vb0;
  auto row0 = [&](const GlaTokens& x, int64_t t, int col) {
    return static_cast<const E*>(x.data) + seq.batch * x.stride_batch + (seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };
  StateTile<E, KD, VB> D(warp, lane);  // dL/dS after the chunk being walked
  D.load(p.d_final_state ? p.d_final_state + state_offset : nullptr, p.V);
  for (int64_t chunk = chunks - 1; chunk >= 0; --chunk) {
    const int64_t t0 = chunk * kChunk;
    const int valid = static_cast<int>(min(static_cast<int64_t>(kChunk), seq.length - t0));
    load_chunk<KD, PK>(s.q, row0(p.q, t0, 0), p.q.stride_time, valid, tid);
    load_chunk<KD, PK>(s.g, row0(p.g, t0, 0), p.g.stride_time, valid, tid);
    load_chunk<VB, PV>(s.d_o, row0(p.d_o, t0, vb0), p.d_o.stride_time, valid, tid);
    copy_async_commit();
    D.store_rounded(static_cast<E*>(p.chunk_state_grads) + chunk_slot(p, n, h, chunk) * KD * p.V + vb0, p.V);
    copy_async_wait_all();
    __syncthreads();
    if (tid < KD) {  // rows past the sequence's end hold zeros: e^{0} = 1, q = 0
      float from_start = 1.0f;
#pragma unroll 16
      for (int t = 0; t < kChunk; ++t) {
        const int at = t * PK + tid;
        from_start *= __expf(to_float(s.g[at]));
        s.q_start[at] = from_float<E>(p.scale * to_float(s.q[at]) * from_start);
      }
      s.decay_all[tid] = from_start;
    }
    __syncthreads();
    D.advance(s.q_start, s.decay_all, s.d_o, lane);
    __syncthreads();  // the tiles are read before the next chunk's copies land
  }
  if (p.d_initial_state) D.store(p.d_initial_state + state_offset, p.V);
}

// ---- Pass 3: the gradients of one chunk ----

template <class E, int KD>
struct GradSmem {
  using Element = E;  // the members and pitches decay_operands / *_scores read
  static constexpr int kKeys = KD;
  static constexpr int PK = KD + 8, PA = kChunk + 8;
  static constexpr int kSlice = 32, PS = kSlice + 8;  // value slices
  static constexpr int PF = KD + 4;                   // float [64, KD] tiles
  E q[kChunk * PK], k[kChunk * PK];
  // Read until the value loop ends; then the same bytes hold three float [64, KD] tiles
  // (tile(0..2), see gradient_kernel).
  E g[kChunk * PK], q_sub[kChunk * PK], q_start[kChunk * PK], k_pair[kPairRows * PK], k_end[kChunk * PK];
  E scores[kChunk * PA];  // A (unscaled), zero above the diagonal
  __half decay[kChunk * PK];
  float decay_all[KD];      // e^{b_last}
  float dA[kChunk * PA];    // scale·do vᵀ for j ≤ i, zero above
  union {
    struct {
      E v[kChunk * PS], d_o[kChunk * PS], S0[KD * PS], H[KD * PS];
    } slice;                  // in the value loop
    float eg[kChunk * KD];    // after it: e^{g}
  } u;

  __device__ float* tile(int i) { return reinterpret_cast<float*>(g) + i * kChunk * PF; }
  static_assert(3 * kChunk * PF * sizeof(float) <=
                    sizeof(E) * ((4 * kChunk + kPairRows) * PK + kChunk * PA),
                "the float tiles fit in the operands they replace");
};

template <class E, int KD>
__global__ void __launch_bounds__(kThreads, 1) gradient_kernel(const GlaParams p) {
  using Sm = GradSmem<E, KD>;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  constexpr int PK = Sm::PK, PA = Sm::PA, PS = Sm::PS, PF = Sm::PF, kSlice = Sm::kSlice;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t chunk = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
  const Span seq = sequence_span(p, n);
  const int64_t t0 = chunk * kChunk;
  if (t0 >= seq.length) return;  // a chunk past a shorter sequence's end
  const int valid = static_cast<int>(min(static_cast<int64_t>(kChunk), seq.length - t0));
  auto row0 = [&](const GlaTokens& x, int col) {
    return static_cast<E*>(x.data) + seq.batch * x.stride_batch + (seq.start + t0) * x.stride_time +
           h * x.stride_head + col;
  };
  const int64_t slot = chunk_slot(p, n, h, chunk);
  const E* const S0_all = static_cast<const E*>(p.chunk_states) + slot * KD * p.V;
  const E* const H_all = static_cast<const E*>(p.chunk_state_grads) + slot * KD * p.V;
  auto issue_slice = [&](int v0) {
    load_chunk<kSlice, PS>(s.u.slice.v, row0(p.v, v0), p.v.stride_time, valid, tid);
    load_chunk<kSlice, PS>(s.u.slice.d_o, row0(p.d_o, v0), p.d_o.stride_time, valid, tid);
    load_rows<KD, kSlice, PS>(s.u.slice.S0, S0_all + v0, p.V, tid);
    load_rows<KD, kSlice, PS>(s.u.slice.H, H_all + v0, p.V, tid);
    copy_async_commit();
  };

  // A, as the forward forms it.
  for (int i = tid; i < kChunk * PA; i += kThreads) s.scores[i] = from_float<E>(0.0f);
  load_chunk<KD, PK>(s.q, row0(p.q, 0), p.q.stride_time, valid, tid);
  load_chunk<KD, PK>(s.k, row0(p.k, 0), p.k.stride_time, valid, tid);
  load_chunk<KD, PK>(s.g, row0(p.g, 0), p.g.stride_time, valid, tid);
  copy_async_commit();
  issue_slice(0);
  copy_async_wait_all();
  __syncthreads();
  decay_operands<true>(s, tid);
  __syncthreads();
  diagonal_scores(s, warp, lane);
  pair_scores(s, warp, lane);
  __syncthreads();

  // The products over V, slice by slice. Warp w: rows 16·(w % 4); columns by w / 4.
  const int rb = warp % 4, side = warp / 4;
  constexpr int NK = KD / 16;  // 8-column tiles in half of KD
  float dA_acc[4][4] = {}, dq_state[NK][4] = {}, dk_state[NK][4] = {};
  float spans = 0.0f;  // threads < KD: Σ_v H ⊙ S_0 of channel tid
  for (int v0 = 0; v0 < p.V; v0 += kSlice) {
    if (v0 > 0) {
      issue_slice(v0);
      copy_async_wait_all();
      __syncthreads();
    }
    const auto& t = s.u.slice;
    mma_block<false, true>(dA_acc, t.d_o, PS, t.v, PS, 16 * rb, 32 * side, 0, kSlice, lane);              // do vᵀ
    mma_block<false, true>(dq_state, t.d_o, PS, t.S0, PS, 16 * rb, (KD / 2) * side, 0, kSlice, lane);  // do S_0ᵀ
    mma_block<false, true>(dk_state, t.v, PS, t.H, PS, 16 * rb, (KD / 2) * side, 0, kSlice, lane);     // v Hᵀ
    float attention[2][4] = {}, carried[2][4] = {};
    mma_block<true, false>(attention, s.scores, PA, t.d_o, PS, 16 * rb, 16 * side, 16 * rb, kChunk, lane);  // Aᵀ do
    mma_block<false, false>(carried, s.k_end, PK, t.H, PS, 16 * rb, 16 * side, 0, KD, lane);  // k_end H
    E* const dv = row0(p.dv, v0);
    const int r = 16 * rb + lane / 4;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int c = 16 * side + 8 * nt + 2 * (lane % 4);
      if (r < valid)
        *reinterpret_cast<uint32_t*>(dv + r * p.dv.stride_time + c) =
            pack2<E>(p.scale * attention[nt][0] + carried[nt][0], p.scale * attention[nt][1] + carried[nt][1]);
      if (r + 8 < valid)
        *reinterpret_cast<uint32_t*>(dv + (r + 8) * p.dv.stride_time + c) =
            pack2<E>(p.scale * attention[nt][2] + carried[nt][2], p.scale * attention[nt][3] + carried[nt][3]);
    }
    if (tid < KD) {
#pragma unroll 8
      for (int c = 0; c < kSlice; ++c) spans += to_float(t.H[tid * PS + c]) * to_float(t.S0[tid * PS + c]);
    }
    __syncthreads();  // the slices are read before the next ones land (or the space is reused)
  }

  // Into shared memory, over the operands the loop has finished with:
  //   dA; tile(0) = scale·do S_0ᵀ, tile(1) = v Hᵀ (then reused, see below); e^{g} in float.
  float* const q_side = s.tile(0);  // scale·do S_0ᵀ, then q ⊙ (dq pairs + dq state)
  float* const k_state = s.tile(1);  // v Hᵀ, then k ⊙ dk state
  float* const k_pairs = s.tile(2);  // −k ⊙ dk pairs, then its sums from each token on
  {
    const int r = 16 * rb + lane / 4;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = r + 8 * (e / 2), j = 32 * side + 8 * nt + 2 * (lane % 4) + e % 2;
        s.dA[i * PA + j] = j <= i ? p.scale * dA_acc[nt][e] : 0.0f;
      }
#pragma unroll
    for (int nt = 0; nt < NK; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = r + 8 * (e / 2), c = (KD / 2) * side + 8 * nt + 2 * (lane % 4) + e % 2;
        q_side[i * PF + c] = p.scale * dq_state[nt][e];
        k_state[i * PF + c] = dk_state[nt][e];
      }
  }
  {
    const E* const g = row0(p.g, 0);
    for (int i = tid; i < kChunk * KD; i += kThreads) {
      const int t = i / KD, c = i % KD;
      s.u.eg[i] = t < valid ? __expf(to_float(g[t * p.g.stride_time + c])) : 1.0f;
    }
  }
  if (tid < KD) spans *= s.decay_all[tid];
  __syncthreads();

  // The token-pair sums, a thread per (key channel, side). Weights e^{b_i − b_j} are running
  // products of e^{g} from the nearer token outwards; once one underflows the rest do too.
  if (tid < 2 * KD) {
    const int c = tid % KD;
    auto eg = [&](int t) { return s.u.eg[t * KD + c]; };
    auto q_at = [&](int t) { return to_float(s.q[t * PK + c]); };
    auto k_at = [&](int t) { return to_float(s.k[t * PK + c]); };
    if (tid < KD) {  // dq
      E* const dq = row0(p.dq, 0);
      float from_start = 1.0f;  // e^{b_i}
      for (int i = 0; i < valid; ++i) {
        from_start *= eg(i);
        float pairs = 0.0f, w = 1.0f;
        for (int j = i - 1; j >= 0; --j) {
          w *= eg(j + 1);
          if (w == 0.0f) break;
          pairs += s.dA[i * PA + j] * k_at(j) * w;
        }
        const float part = pairs + q_side[i * PF + c] * from_start;
        dq[i * p.dq.stride_time + c] = from_float<E>(part + s.dA[i * PA + i] * k_at(i));
        q_side[i * PF + c] = q_at(i) * part;
      }
    } else {  // dk
      E* const dk = row0(p.dk, 0);
      float to_end = 1.0f;  // e^{b_last − b_j}
      for (int j = valid - 1; j >= 0; --j) {
        float pairs = 0.0f, w = 1.0f;
        for (int i = j + 1; i < valid; ++i) {
          w *= eg(i);
          if (w == 0.0f) break;
          pairs += s.dA[i * PA + j] * q_at(i) * w;
        }
        const float state = k_state[j * PF + c] * to_end;
        dk[j * p.dk.stride_time + c] = from_float<E>(pairs + state + s.dA[j * PA + j] * q_at(j));
        k_state[j * PF + c] = k_at(j) * state;
        k_pairs[j * PF + c] = -k_at(j) * pairs;
        to_end *= eg(j);
      }
    }
  }
  __syncthreads();

  // dg_t = Σ_{i≥t} (q ⊙ (dq pairs + dq state) − k ⊙ dk pairs)_i + Σ_{j<t} (k ⊙ dk state)_j
  //        + e^{b_last} Σ_v H ⊙ S_0: every term whose decay spans token t, none that cancel.
  if (tid < KD) {
    const int c = tid;
    E* const dg = row0(p.dg, 0);
    float after = 0.0f;
    for (int t = valid - 1; t >= 0; --t) {
      after += q_side[t * PF + c] + k_pairs[t * PF + c];
      k_pairs[t * PF + c] = after;
    }
    float before = 0.0f;
    for (int t = 0; t < valid; ++t) {
      dg[t * p.dg.stride_time + c] = from_float<E>(k_pairs[t * PF + c] + before + spans);
      before += k_state[t * PF + c];
    }
  }
}

// ---- Launch ----

inline size_t state_table_bytes(const GlaParams& p) {
  return static_cast<size_t>(p.num_sequences * p.H * p.max_chunks * p.K * p.V) * 2;  // 16-bit elements
}

// Scratch: the two state tables, then the segment tables when the state pass is split.
inline size_t backward_scratch_bytes(GlaParams p) {
  plan_segments(p, p.V / (p.V % 128 == 0 ? 128 : 64));
  return 2 * state_table_bytes(p) + segment_table_floats(p) * sizeof(float);
}

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
}

template <class E, int KD, int VB>
void launch_backward(GlaParams p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  plan_segments(p, p.V / VB);
  const size_t table = state_table_bytes(p), bytes = 2 * table + segment_table_floats(p) * sizeof(float);
  void* scratch = p.scratch;
  const bool owned = scratch == nullptr || p.scratch_bytes < bytes;
  if (owned) check(cudaMallocAsync(&scratch, bytes, stream), "gla backward workspace");
  auto* base = static_cast<unsigned char*>(scratch);
  p.chunk_states = base;
  p.chunk_state_grads = base + table;
  p.workspace = p.segments > 1 ? reinterpret_cast<float*>(base + 2 * table) : nullptr;

  if (p.segments > 1) segment_entering_states<E, KD, VB>(p, stream);
  launch_pass<E, KD, VB, Pass::chunk_states>(p, stream);

  const size_t state_smem = sizeof(StateGradSmem<E, KD, VB>);
  allow_shared(state_grad_kernel<E, KD, VB>, state_smem, "gla backward state gradients shared memory");
  const dim3 state_grid(static_cast<unsigned>(p.V / VB), static_cast<unsigned>(p.H),
                        static_cast<unsigned>(p.num_sequences));
  state_grad_kernel<E, KD, VB><<<state_grid, kThreads, state_smem, stream>>>(p);
  check_launch("gla backward state gradients");

  const size_t grad_smem = sizeof(GradSmem<E, KD>);
  allow_shared(gradient_kernel<E, KD>, grad_smem, "gla backward shared memory");
  const dim3 grad_grid(static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.H),
                       static_cast<unsigned>(p.num_sequences));
  gradient_kernel<E, KD><<<grad_grid, kThreads, grad_smem, stream>>>(p);
  check_launch("gla backward");

  if (owned) check(cudaFreeAsync(scratch, stream), "gla backward workspace");
}

template <class E>
void backward_for_shape(const GlaParams& p) {
  if (p.K == 128) {
    if (p.V % 128 == 0) launch_backward<E, 128, 128>(p);
    else launch_backward<E, 128, 64>(p);
  } else {
    if (p.V % 128 == 0) launch_backward<E, 64, 128>(p);
    else launch_backward<E, 64, 64>(p);
  }
}

}  // namespace seqmix::cuda::gla
