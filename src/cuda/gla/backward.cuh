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
//     so do the token pairs of different 16-token sub-chunks, and (with the tensor-core
//     diagonal, params.hpp GlaBackwardDiagonal) those of different 4-token quads inside one;
//     the pairs left (inside a sub-chunk, or inside a quad) are summed on the CUDA cores, one
//     thread per key channel and side (dq or dk), with running products of e^{g} ≤ 1
//     (nothing overflows).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/gla/launch.cuh"

namespace seqmix::cuda::gla {

// acc (a 16 × 8·NT block at cols n0) += A·B over the 16-deep step at k0, with A's fragment
// already in registers; B as in mma_block.
template <bool kBRows, int NT, class E>
__device__ __forceinline__ void mma_step(float (&acc)[NT][4], const uint32_t (&af)[4], const E* b, int pb, int n0,
                                         int k0, int lane) {
  static_assert(NT % 2 == 0, "B fragments come in pairs of 8-column tiles");
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32_t bf[4];
    if constexpr (kBRows) load_b_from_rows(bf, b, pb, n0 + 16 * np, k0, lane);
    else load_b(bf, b, pb, k0, n0 + 16 * np, lane);
    mma_pair<E>(acc[2 * np], acc[2 * np + 1], af, bf);
  }
}

// acc (a 16 × 8·NT block at rows m0, cols n0) += A·B over k in [k_begin, k_end) (multiples
// of 16). A is a row-major [m][k] tile, or with kATransposed a row-major [k][m] one; B is a
// row-major [k][n] tile, or with kBRows a row-major [n][k] one (B = tileᵀ).
template <bool kATransposed, bool kBRows, int NT, class E>
__device__ __forceinline__ void mma_block(float (&acc)[NT][4], const E* a, int pa, const E* b, int pb, int m0,
                                          int n0, int k_begin, int k_end, int lane) {
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    uint32_t af[4];
    if constexpr (kATransposed) load_a_transposed(af, a, pa, k0, m0, lane);
    else load_a(af, a, pa, m0, k0, lane);
    mma_step<kBRows>(acc, af, b, pb, n0, k0, lane);
  }
}

// ---- Pass 2: dL/dS at every chunk's end ----

// kStages stages of q, g, do: the chunk kStages − 1 ahead lands during this one (two stages:
// 157 KB at K = V = 128; three: 210 KB).
template <class E, int KD, int VB, int kStages = 2>
struct StateGradSmem {
  static constexpr int PK = KD + 8, PV = VB + 8;  // the pitches StateTile::advance reads
  E q[kStages][kChunk * PK], g[kStages][kChunk * PK];
  E q_start[kChunk * PK];  // scale · q ⊙ e^{b}
  E d_o[kStages][kChunk * PV];
  E grad_rows[KD * PV];  // this step's dL/dS, rounded, on its way to the table (a tensor copy)
  float decay_all[KD];   // e^{b_last}
};

// One block walks one segment (the whole sequence when not split) backwards, from dL/dS at
// the sequence's end (p.d_final_state) in its last segment and from zero in the others, and
// writes every chunk's dL/dS_end into p.chunk_state_grads; unsplit, d initial state after the
// first chunk. Split (NOTES.md v34), the parts carried in from later segments are added by
// the gradient kernel, e^{Σ g from a chunk's end to its segment's} ⊙ dL/dS at the segment's
// end: this walk writes those decays of every chunk (p.decay_to_segment_end), the segment's
// own dL/dS at its start into its slot of p.workspace and its total decay into the decay
// table, for the chain (chain_segment_grads_kernel) that finds each segment's end.
// kStages (params.hpp gla_backward_state_stages): the copies run kStages − 1 chunks ahead.
// Each step's dL/dS leaves by one tensor copy of thread 0 through grads_map (launch.cuh
// state_table_map; NOTES.md v52e).
template <class E, int KD, int VB, int kStages = 2>
__global__ void __launch_bounds__(kThreads, 1)
    state_grad_kernel(const GlaParams p, const __grid_constant__ CUtensorMap grads_map) {
  // The gradient kernel's blocks that need nothing of this walk may start now (GradientBlock).
  allow_next_grid();
  using Sm = StateGradSmem<E, KD, VB, kStages>;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  constexpr int PK = Sm::PK, PV = Sm::PV;
  static_assert(offsetof(Sm, grad_rows) % 128 == 0, "the dL/dS tile starts where a tensor copy may read it");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const KeyBlock kb = KeyBlock::of_block<KD, VB>(p);
  const int64_t vb0 = kb.vb0, key0 = kb.key0;
  const BlockPlan plan(p);
  const int64_t h = plan.h, n = plan.n;
  const int64_t state_offset = kb.state(p, n * p.H + h);
  const bool split = p.segments > 1, last_segment = plan.seg == p.segments - 1;
  // The value blocks' decays are the same: block 0 writes them.
  const bool writes_decays = split && tid < KD && vb0 == 0;
  auto row0 = [&](const GlaTokens& x, int64_t t, int64_t col) {
    return static_cast<const E*>(x.data) + plan.seq.batch * x.stride_batch + (plan.seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };
  StateTile<E, KD, VB> D(warp, lane);  // dL/dS after the chunk being walked
  D.load(last_segment && p.d_final_state ? p.d_final_state + state_offset : nullptr, p.V);
  float to_segment_end = 1.0f;  // split: e^{Σ g} of channel key0 + tid from the chunk's end to the segment's
  // The stage of a chunk: the walk goes from the last chunk down.
  auto stage_of = [&](int64_t chunk) { return static_cast<int>((plan.end_chunk - 1 - chunk) % kStages); };
  // One commit group a call, empty past the segment's first chunk, so that each step waits on
  // a fixed count of newer groups.
  auto issue_loads = [&](int64_t chunk) {
    if (chunk >= plan.first_chunk) {
      const int64_t t0 = chunk * kChunk;
      const int valid = plan.valid(chunk), stage = stage_of(chunk);
      load_chunk<KD, PK>(s.q[stage], row0(p.q, t0, key0), p.q.stride_time, valid, tid);
      load_chunk<KD, PK>(s.g[stage], row0(p.g, t0, key0), p.g.stride_time, valid, tid);
      load_chunk<VB, PV>(s.d_o[stage], row0(p.d_o, t0, vb0), p.d_o.stride_time, valid, tid);
    }
    copy_async_commit();
  };
#pragma unroll
  for (int ahead = 0; ahead < kStages - 1; ++ahead) issue_loads(plan.end_chunk - 1 - ahead);
  for (int64_t chunk = plan.end_chunk - 1; chunk >= plan.first_chunk; --chunk) {
    const int stage = stage_of(chunk);
    // dL/dS into the table through grad_rows: one tensor copy, to rows slot·K + key0 of value
    // block vb0 / VB (NOTES.md v20, v52e)
    D.store_pairs(s.grad_rows, PV);
    fence_async_shared();
    copy_async_wait_pending<kStages - 2>();
    __syncthreads();  // this chunk's tiles are in; the stage issued next was read by the last step
    const int64_t slot = chunk_slot(p, n, h, chunk);
    if (tid == 0) {
      tma::store_box(grads_map, s.grad_rows, 0, static_cast<int>(vb0 / VB), static_cast<int>(slot * p.K + key0));
      tma::bulk_commit();
    }
    issue_loads(chunk - (kStages - 1));
    if (tid < KD) {  // rows past the sequence's end hold zeros: e^{0} = 1, q = 0
      const E* const q = s.q[stage];
      const E* const g = s.g[stage];
      float from_start = 1.0f;
#pragma unroll 1
      for (int t0 = 0; t0 < kChunk; t0 += kSub) {
        float e[kSub], qs[kSub];  // read before the stores (which may alias them for the compiler)
#pragma unroll
        for (int tt = 0; tt < kSub; ++tt) {
          const int at = (t0 + tt) * PK + tid;
          e[tt] = exp_fast(to_float(g[at]));
          qs[tt] = to_float(q[at]);
        }
#pragma unroll
        for (int tt = 0; tt < kSub; ++tt) {
          from_start *= e[tt];
          s.q_start[(t0 + tt) * PK + tid] = from_float<E>(p.scale * qs[tt] * from_start);
        }
      }
      s.decay_all[tid] = from_start;
      if (writes_decays) {
        p.decay_to_segment_end[slot * p.K + key0 + tid] = to_segment_end;
        to_segment_end *= from_start;
      }
    }
    __syncthreads();
    D.advance(s.q_start, s.decay_all, s.d_o[stage], lane);
    if (tid == 0) tma::bulk_wait_read();  // grad_rows is rewritten at the next step's top
    __syncthreads();  // q_start and e^{b_last} are read before the next step writes them
  }
  if (split) {  // dL/dS at the segment's start (a segment past the sequence's end passes on its start)
    D.store(p.workspace + kb.state(p, plan.state_slot), p.V);
    if (writes_decays) segment_decay_table(p)[plan.state_slot * p.K + key0 + tid] = to_segment_end;
  } else if (p.d_initial_state) {
    D.store(p.d_initial_state + state_offset, p.V);
  }
}

// Chains the segments backwards. Slot s holds, on entry, dL/dS at segment s's start from its
// own walk (from zero at its end; the last segment's from d final state), and on exit (s below
// the last) dL/dS at its end:
//   end(last − 1) = start(last),  end(s − 1) = D(s) ⊙ end(s) + start(s),  d initial = D(0) ⊙ end(0) + start(0),
// D(s) the segment's total decay. Four adjacent elements of a row a thread, as the forward's
// chains (launch.cuh kChainElements).
static __global__ void chain_segment_grads_kernel(const GlaParams p) {
  const int64_t element = kChainElements * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (element >= p.K * p.V) return;
  const int64_t n = blockIdx.z, h = blockIdx.y, row = element / p.V;
  const float* decays = segment_decay_table(p);
  auto slot_elements = [&](int64_t slot) { return reinterpret_cast<float4*>(p.workspace + slot * p.K * p.V + element); };
  float4 D = *slot_elements(segment_slot(p, n, h, p.segments - 1));
  for (int64_t seg = p.segments - 2; seg >= 0; --seg) {
    const int64_t slot = segment_slot(p, n, h, seg);
    float4* const at = slot_elements(slot);
    const float4 own = *at;
    *at = D;
    D = decayed_plus(decays[slot * p.K + row], D, own);
  }
  if (!p.d_initial_state) return;
  // A float at a time: the caller's tensor need not be 16-byte aligned.
  float* const out = p.d_initial_state + (n * p.H + h) * p.K * p.V + element;
  out[0] = D.x, out[1] = D.y, out[2] = D.z, out[3] = D.w;
}

// ---- Pass 3: the gradients of one chunk ----

template <class E, int KD>
struct GradSmem {
  using Element = E;  // the members and pitches decay_operands / *_scores read
  static constexpr int kKeys = KD;
  static constexpr int PK = KD + 8, PA = kChunk + 8;
  static constexpr int kSlice = 32, PS = kSlice + 8;  // value slices
  static constexpr int PF = KD + 8;  // float [64, KD] tiles: a half warp's float2 fragment rows in distinct banks
  // With the wide tail, Σ_v H ⊙ S_0 of a channel in this many shares of the value columns
  // (thread share·KD + c holds channel c's), summed by dg (decay_gradient_by_runs).
  static constexpr int kSpanShares = kThreads / KD;
  E q[kChunk * PK], k[kChunk * PK];
  // Read until the value loop ends (the first four) or until the sub-chunk pair products
  // are done (q_sub, k_pair); the same bytes then hold three float [64, KD] tiles: tile(0)
  // within the first four, tiles 1 and 2 after it (see gradient_kernel).
  E g[kChunk * PK], q_start[kChunk * PK], k_end[kChunk * PK], scores[kChunk * PA];
  E q_sub[kChunk * PK], k_pair[kPairRows * PK];
  __half decay[kChunk * PK];
  float decay_all[KD];         // e^{b_last}
  float dA[kChunk * PA];       // scale·do vᵀ for j ≤ i, zero above
  E dA_operand[kChunk * PA];   // the same, rounded, for the tensor cores
  union {
    struct {
      E v[kChunk * PS], d_o[kChunk * PS], S0[KD * PS], H[KD * PS];
    } slice;                   // in the value loop
    float eg[kChunk * KD];     // after it: e^{g}
    float factors[kChunk * PF];  // or, in a chunk factored whole, 2^{b} (factored_gradients)
  } u;
  // Per sub-chunk and key channel (I, J sub-chunks, i0 first and r last token of one):
  float start_of_sub[4 * KD];  // e^{b_{i0(I)}}
  float end_from_sub[4 * KD];  // e^{b_last − b_{r(J)}}
  float across[6 * KD];        // e^{b_{i0(I)} − b_{r(J)}} for J < I, at I(I−1)/2 + J
  uint64_t table_full[2];      // a value slice's S_0 and H landed, a barrier a stage (TableSlices)

  __device__ float* tile(int i) { return reinterpret_cast<float*>(g) + i * kChunk * PF; }
  // A chunk factored whole, after the value loop (forward.cuh factored_operands<S, true>): q ⊙ 2^{b}
  // in q_start and what its rounding lost in q_sub, k ⊙ 2^{−b} in the e^{g} tile's bytes and what
  // its rounding lost in k_end, 2^{b} in u.
  __device__ E* inverse_keys() { return reinterpret_cast<E*>(decay); }
  __device__ E* query_low() { return q_sub; }
  __device__ E* key_low() { return k_end; }
  __device__ float* factors() { return u.factors; }
  static_assert(kChunk * PF * sizeof(float) <= sizeof(E) * (3 * kChunk * PK + kChunk * PA),
                "tile(0) fits in the operands the value loop releases");
  static_assert(3 * kChunk * PF * sizeof(float) <= sizeof(E) * ((4 * kChunk + kPairRows) * PK + kChunk * PA),
                "the float tiles fit in the operands they replace");

  // The tensor-core diagonal. While A is formed, the forward's quad pairs keep their key
  // operands in the e^{g} tile's bytes (forward.cuh quad_key_row). After the value loop, the
  // quad operands of dq and dk (kQuadRows rows each, quad_operand_row) sit in the bytes of
  // g, q_start, k_end and scores, which nothing reads any more: dq's where tile(0) goes (it is
  // written after they are read), dk's where tile(1) goes (likewise); the quad factors
  // (quad_gradient_operands) in the e^{g} tile's bytes, free again after the value loop.
  static constexpr int kQuadRows = 96;  // 24 a sub-chunk: 4 + 8 + 12
  __device__ E* quad_keys() { return reinterpret_cast<E*>(decay); }
  __device__ const E* quad_keys() const { return reinterpret_cast<const E*>(decay); }
  __device__ E* dq_quad_keys() { return g; }
  __device__ E* dk_quad_queries() { return reinterpret_cast<E*>(tile(1)); }
  __device__ float* quad_factors() { return reinterpret_cast<float*>(decay); }
  static_assert(kQuadRows * PK * sizeof(E) <= kChunk * PF * sizeof(float), "dq's quad keys end before tile(1)");
  static_assert(kChunk * PF * sizeof(float) + kQuadRows * PK * sizeof(E) <= sizeof(E) * (3 * kChunk * PK + kChunk * PA),
                "dk's quad queries end before q_sub");
  static_assert(32 * KD * sizeof(float) <= sizeof(decay), "the quad factors fit in the e^{g} tile");
};

// The value slices of S_0 and H by the copy engine: a tensor copy a table a slice, one box of
// KD rows × PS columns of the [rows, V] table (rows: slot·K + key channel), which lands in the
// slice's padded tile as it is (its last 8 columns, the next slice's or zeros past V, fill the
// padding nothing reads). Thread 0 issues both and announces their bytes on the stage's
// barrier; every thread waits on it. A row past the table (h_row for a zero-gradient block)
// reads as zeros. Each stage's bytes take generic accesses between its slices, so every
// thread orders them before the async proxy's writes (fence_async_shared) ahead of the
// barrier after which the next slice into them is issued.
template <class Sm, int kStages>
struct TableSlices {
  using E = typename Sm::Element;
  static constexpr uint32_t kBytes = 2 * Sm::kKeys * Sm::PS * sizeof(E);
  const CUtensorMap& s0_map;
  const CUtensorMap& h_map;
  uint64_t* full;
  int s0_row, h_row;
  __device__ void init() const {
    for (int i = 0; i < kStages; ++i) tma::barrier_init(full + i, 1);
    tma::barrier_init_fence();
  }
  __device__ void issue(E* S0, E* H, int v0, int stage) const {
    tma::arrive_expect_bytes(full + stage, kBytes);
    tma::load_box(S0, s0_map, v0, s0_row, 0, full + stage);
    tma::load_box(H, h_map, v0, h_row, 0, full + stage);
  }
  __device__ void wait(int slice) const { tma::wait(full + slice % kStages, (slice / kStages) % 2); }
};

// Thread c < KD: the sub-chunk factors of channel c from e^{g} (products of values ≤ 1).
template <class Sm>
__device__ __forceinline__ void sub_chunk_factors(Sm& s, int c) {
  constexpr int KD = Sm::kKeys;
  float sub_total[4];  // e^{Σ g} over each sub-chunk
#pragma unroll
  for (int S = 0; S < 4; ++S) {
    float product = 1.0f;
#pragma unroll
    for (int t = 0; t < kSub; ++t) product *= s.u.eg[(kSub * S + t) * KD + c];
    sub_total[S] = product;
  }
  float before = 1.0f, after = 1.0f;
#pragma unroll
  for (int I = 0; I < 4; ++I) {
    s.start_of_sub[I * KD + c] = before * s.u.eg[kSub * I * KD + c];
    before *= sub_total[I];
    s.end_from_sub[(3 - I) * KD + c] = after;
    after *= sub_total[3 - I];
  }
#pragma unroll
  for (int I = 1; I < 4; ++I)
#pragma unroll
    for (int J = 0; J < I; ++J) {
      float between = s.u.eg[kSub * I * KD + c];
#pragma unroll
      for (int S = J + 1; S < I; ++S) between *= sub_total[S];
      s.across[(I * (I - 1) / 2 + J) * KD + c] = between;
    }
}

// ---- The tensor-core diagonal of the gradients (quads, as forward.cuh quad_*) ----
// Inside sub-chunk I, the pairs of different 4-token quads factor through a quad boundary,
// every factor a product of e^{g} ≤ 1:
//   dq_i, i in quad Q (first token p = 4Q):  Σ_{j<p} dA_ij k_j e^{b_i − b_j}
//        = e^{b_i − b_p} ⊙ Σ_{j<p} dA_ij (k_j ⊙ e^{b_p − b_j})          (keys per target Q)
//   dk_j, j in quad P (last token r = 4P + 3): Σ_{i>r} dA_ij q_i e^{b_i − b_j}
//        = e^{b_r − b_j} ⊙ Σ_{i>r} dA_ij (q_i ⊙ e^{b_i − b_r})          (queries per target P)
// The token walks multiply by e^{b_i − b_p}, e^{b_r − b_j} (running products from the quad's
// edge), so the sub-chunk-level parts they already carry are moved to the quad's edge
// first: times e^{b_p − b_{i0}} (dq; i0 the sub-chunk's first token) and e^{b_end − b_r}
// (dk; end its last).

// Row of the quad operand of sub-chunk I whose target has `width` quads of partners (dq:
// target Q, width Q, partners the keys j < 4Q; dk: target P, width 3 − P, partners the
// queries i > 4P + 3), for partner `index` < 4·width: 24 rows a sub-chunk.
__host__ __device__ constexpr int quad_operand_row(int I, int width, int index) {
  return 24 * I + 2 * width * (width - 1) + index;
}

// Threads (channel c, role) < 2·KD, once e^{g} is in u.eg and the raw q and k are in their
// tiles: the quad operands above and the factors moving the sub-chunk-level parts to the
// quad edges, quad_factors()[(4I + Q)·KD + c] = e^{b_{4Q} − b_{i0}} and
// [(16 + 4I + P)·KD + c] = e^{b_end − b_{4P+3}}. Role 0 walks each sub-chunk forwards (dk's
// queries), role 1 backwards (dq's keys). kReadFirst: each sub-chunk's e^{g} and q or k are
// read into registers before any of its stores (the stores may alias them for the compiler,
// and each token's loads would otherwise wait behind the last token's stores).
template <class Sm, bool kReadFirst = false>
__device__ __forceinline__ void quad_gradient_operands(Sm& s, int tid) {
  using E = typename Sm::Element;
  constexpr int KD = Sm::kKeys, PK = Sm::PK;
  if (tid >= 2 * KD) return;
  const int c = tid % KD;
  float* const to_quad_start = s.quad_factors();
  float* const from_quad_end = to_quad_start + 16 * KD;
  auto eg_global = [&](int t) { return s.u.eg[t * KD + c]; };
  float e_sub[kSub], x_sub[kSub];  // kReadFirst: the sub-chunk's e^{g} and q (role 0) or k (role 1)
  auto read_sub = [&](int I, const E* x) {
    if constexpr (kReadFirst) {
#pragma unroll
      for (int tt = 0; tt < kSub; ++tt) {
        e_sub[tt] = eg_global(kSub * I + tt);
        x_sub[tt] = to_float(x[(kSub * I + tt) * PK + c]);
      }
    }
  };
  // Token tt of sub-chunk I (tt a compile-time index once unrolled: the arrays stay in registers).
  auto eg = [&](int I, int tt) {
    if constexpr (kReadFirst) return e_sub[tt];
    else return eg_global(kSub * I + tt);
  };
  auto x_at = [&](const E* x, int I, int tt) {
    if constexpr (kReadFirst) return x_sub[tt];
    else return to_float(x[(kSub * I + tt) * PK + c]);
  };
  if (tid < KD) {
    E* const queries = s.dk_quad_queries();
#pragma unroll 1
    for (int I = 0; I < 4; ++I) {
      read_sub(I, s.q);
      float from_first = 1.0f;                    // e^{b_t − b_{i0}}
      float from_end[3] = {0.0f, 0.0f, 0.0f};     // e^{b_t − b_{4P+3}} for t > 4P + 3
#pragma unroll
      for (int tt = 0; tt < kSub; ++tt) {
        const float e = eg(I, tt), q = x_at(s.q, I, tt);
        if (tt > 0) from_first *= e;
        if (tt % 4 == 0) to_quad_start[(4 * I + tt / 4) * KD + c] = from_first;
#pragma unroll
        for (int P = 0; P < 3; ++P) {
          if (tt < 4 * P + 4) continue;
          from_end[P] = tt == 4 * P + 4 ? e : from_end[P] * e;
          const int width = 3 - P;
          queries[quad_operand_row(I, width, tt - kSub + 4 * width) * PK + c] = from_float<E>(q * from_end[P]);
        }
      }
    }
  } else {
    E* const keys = s.dq_quad_keys();
#pragma unroll 1
    for (int I = 0; I < 4; ++I) {
      read_sub(I, s.k);
      float to_last = 1.0f;                          // e^{b_end − b_t}
      float to_quad[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // e^{b_{4Q} − b_t} for t < 4Q
#pragma unroll
      for (int tt = kSub - 1; tt >= 0; --tt) {
        if (tt % 4 == 3) from_quad_end[(4 * I + tt / 4) * KD + c] = to_last;
        const float k = x_at(s.k, I, tt);
#pragma unroll
        for (int Q = 1; Q < 4; ++Q) {
          if (tt >= 4 * Q) continue;
          to_quad[Q] = tt == 4 * Q - 1 ? eg(I, 4 * Q) : to_quad[Q] * eg(I, tt + 1);
          keys[quad_operand_row(I, Q, tt) * PK + c] = from_float<E>(k * to_quad[Q]);
        }
        to_last *= eg(I, tt);
      }
    }
  }
}

// The quad of the 16 rows (columns) each register of a lane's A fragment holds (mma.cuh:
// a0 row g cols 2t.., a1 row g + 8, a2 cols 2t + 8.., a3 both).
__device__ __forceinline__ int fragment_row_quad(int reg, int lane) { return lane / 16 + 2 * (reg % 2); }
__device__ __forceinline__ int fragment_col_quad(int reg, int lane) { return (lane % 4) / 2 + 2 * (reg / 2); }

// acc (16 rows × 8·NT columns from n0) += a·B, where this lane gives the address of the B
// row it loads for ldmatrix (k row (lane % 8) + 8·((lane / 8) % 2), as load_b): B's rows
// gathered from anywhere.
template <int NT, class E>
__device__ __forceinline__ void mma_gathered_rows(float (&acc)[NT][4], const uint32_t (&a)[4], const E* b_row,
                                                  int n0, int lane) {
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, b_row + n0 + 16 * np + 8 * (lane / 16));
    mma_pair<E>(acc[2 * np], acc[2 * np + 1], a, b);
  }
}

// The k row of B this lane addresses in ldmatrix (see mma_gathered_rows).
__device__ __forceinline__ int gathered_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }

// dq of sub-chunk I, columns from n0: += the pairs of different quads, (dA masked to rows of
// quad Q and columns before it) · (the keys of target Q), Q = 1..3; rows of one target only.
template <class Sm, int NT>
__device__ __forceinline__ void quad_gradient_dq(Sm& s, float (&acc)[NT][4], int I, int n0, int lane) {
  using E = typename Sm::Element;
  constexpr int PA = Sm::PA, PK = Sm::PK;
  uint32_t full[4];
  load_a(full, s.dA_operand, PA, kSub * I, kSub * I, lane);
  const int jj = gathered_row(lane);
#pragma unroll
  for (int Q = 1; Q < 4; ++Q) {
    uint32_t a[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg)
      a[reg] = fragment_row_quad(reg, lane) == Q && fragment_col_quad(reg, lane) < Q ? full[reg] : 0u;
    // Rows past the partners are weighted by zeros: any finite row does.
    mma_gathered_rows(acc, a, s.dq_quad_keys() + quad_operand_row(I, Q, jj < 4 * Q ? jj : 0) * PK, n0, lane);
  }
}

// dk of sub-chunk I (rows j), columns from n0: += (dAᵀ masked to rows of quad P and columns
// after it) · (the queries of target P), P = 0..2.
template <class Sm, int NT>
__device__ __forceinline__ void quad_gradient_dk(Sm& s, float (&acc)[NT][4], int I, int n0, int lane) {
  using E = typename Sm::Element;
  constexpr int PA = Sm::PA, PK = Sm::PK;
  uint32_t full[4];
  load_a_transposed(full, s.dA_operand, PA, kSub * I, kSub * I, lane);
  const int ii = gathered_row(lane);
#pragma unroll
  for (int P = 0; P < 3; ++P) {
    uint32_t a[4];
#pragma unroll
    for (int reg = 0; reg < 4; ++reg)
      a[reg] = fragment_row_quad(reg, lane) == P && fragment_col_quad(reg, lane) > P ? full[reg] : 0u;
    const int first = 4 * P + 4, width = 3 - P;
    mma_gathered_rows(acc, a,
                      s.dk_quad_queries() + quad_operand_row(I, width, (ii >= first ? ii : first) - first) * PK,
                      n0, lane);
  }
}

// Token pairs in different 16-token sub-chunks go through the tensor cores, factored
// through the sub-chunk boundaries as the forward's scores are; the pairs within a
// sub-chunk are left to the CUDA cores, or with kQuads only those within a 4-token quad
// (the rest through the quad boundaries above).
// One quad (4 tokens from `low`) as the token walks read it: the dA block of its in-quad
// pairs (four 16-byte rows, one address for every lane), and channels c and c + 1's e^{g}, q,
// k and the two partial tiles this side finishes (dq: q_side; dk: k_pairs, k_state). Rows past
// the sequence's end hold zeros in dA, q, k and e^{0} = 1 in e^{g}, so their terms add zero.
struct QuadRows {
  float dA[4][4], eg[4][2], q[4][2], k[4][2], first[4][2], second[4][2];
};

template <class E>
__device__ __forceinline__ float2 to_float2(const E* two) {
  const uint32_t raw = *reinterpret_cast<const uint32_t*>(two);
  const E* const e = reinterpret_cast<const E*>(&raw);
  return make_float2(to_float(e[0]), to_float(e[1]));
}

template <class Sm>
__device__ __forceinline__ QuadRows read_quad(const Sm& s, int low, int c, bool dq_side, const float* q_side,
                                              const float* k_pairs, const float* k_state) {
  constexpr int KD = Sm::kKeys, PK = Sm::PK, PA = Sm::PA, PF = Sm::PF;
  QuadRows x;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int row = low + r;
    const float4 a = *reinterpret_cast<const float4*>(s.dA + row * PA + low);
    x.dA[r][0] = a.x, x.dA[r][1] = a.y, x.dA[r][2] = a.z, x.dA[r][3] = a.w;
    const float2 eg = *reinterpret_cast<const float2*>(s.u.eg + row * KD + c);
    const float2 q = to_float2(s.q + row * PK + c), k = to_float2(s.k + row * PK + c);
    const float2 first = *reinterpret_cast<const float2*>((dq_side ? q_side : k_pairs) + row * PF + c);
    const float2 second = dq_side ? make_float2(0.0f, 0.0f) : *reinterpret_cast<const float2*>(k_state + row * PF + c);
    x.eg[r][0] = eg.x, x.eg[r][1] = eg.y, x.q[r][0] = q.x, x.q[r][1] = q.y, x.k[r][0] = k.x, x.k[r][1] = k.y;
    x.first[r][0] = first.x, x.first[r][1] = first.y, x.second[r][0] = second.x, x.second[r][1] = second.y;
  }
  return x;
}

// dq's side of one quad: rows i = low + r, partners j < i in the quad,
//   dq_i = Σ_j dA_ij k_j e^{b_i − b_j} + q_side_i · e^{b_i − b_low} + dA_ii k_i;
// dk's side: rows j, partners i > j in the quad, r the quad's last token,
//   dk_j = Σ_i dA_ij q_i e^{b_i − b_j} + (k_pairs_j + k_state_j) · e^{b_r − b_j} + dA_jj q_j.
// Both leave what dg sums in the tiles, as the row walk does (same products, same order),
// for channels c and c + 1.
template <class E, class Sm>
__device__ __forceinline__ void finish_quad(const QuadRows& x, int low, int valid, int c, bool dq_side, E* dq,
                                            int64_t dq_stride, E* dk, int64_t dk_stride, float* q_side,
                                            float* k_pairs, float* k_state) {
  constexpr int PF = Sm::PF;
  if (dq_side) {
    float decay[2] = {1.0f, 1.0f};  // e^{b_i − b_low}
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float out[2], side[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float pairs = 0.0f, w = 1.0f;
#pragma unroll
        for (int j = r - 1; j >= 0; --j) {
          w *= x.eg[j + 1][h];
          pairs += x.dA[r][j] * x.k[j][h] * w;
        }
        if (r > 0) decay[h] *= x.eg[r][h];
        const float part = pairs + x.first[r][h] * decay[h];
        out[h] = part + x.dA[r][r] * x.k[r][h];
        side[h] = x.q[r][h] * part;
      }
      const int row = low + r;
      if (row < valid) {
        *reinterpret_cast<uint32_t*>(dq + row * dq_stride + c) = pack2<E>(out[0], out[1]);
        *reinterpret_cast<float2*>(q_side + row * PF + c) = make_float2(side[0], side[1]);
      }
    }
  } else {
    float decay[2] = {1.0f, 1.0f};  // e^{b_r − b_j}
#pragma unroll
    for (int r = 3; r >= 0; --r) {
      float out[2], state[2], later[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float pairs = 0.0f, w = 1.0f;
#pragma unroll
        for (int i = r + 1; i < 4; ++i) {
          w *= x.eg[i][h];
          pairs += x.dA[i][r] * x.q[i][h] * w;
        }
        const float all_pairs = pairs + x.first[r][h] * decay[h], carried = x.second[r][h] * decay[h];
        out[h] = all_pairs + carried + x.dA[r][r] * x.q[r][h];
        state[h] = x.k[r][h] * carried;
        later[h] = -x.k[r][h] * all_pairs;
        decay[h] *= x.eg[r][h];
      }
      const int row = low + r;
      if (row < valid) {
        *reinterpret_cast<uint32_t*>(dk + row * dk_stride + c) = pack2<E>(out[0], out[1]);
        *reinterpret_cast<float2*>(k_state + row * PF + c) = make_float2(state[0], state[1]);
        *reinterpret_cast<float2*>(k_pairs + row * PF + c) = make_float2(later[0], later[1]);
      }
    }
  }
}

// The token walks by quads (GlaBackwardWalk::quads), every thread: a channel pair, a side (dq
// or dk) and every kParts-th step of two quads (the quads are independent: each starts its
// decays afresh), the two quads read before either is finished (the stores may alias the
// next reads for the compiler). A warp's lanes share their rows: dA's row is one broadcast.
// dq and dk are 16-byte aligned tensors (core/gla.cpp tokens), so a pair is one 4-byte store.
template <class E, class Sm>
__device__ __forceinline__ void quad_token_walks(const Sm& s, int valid, int tid, E* dq, int64_t dq_stride, E* dk,
                                                 int64_t dk_stride, float* q_side, float* k_pairs, float* k_state) {
  constexpr int KD = Sm::kKeys, kPairs = KD / 2, kParts = kThreads / (2 * kPairs);
  static_assert(offsetof(Sm, dA) % 16 == 0 && Sm::PA % 4 == 0, "dA's quad rows are 16-byte aligned");
  static_assert(kThreads % (2 * kPairs) == 0 && kPairs % 32 == 0, "whole warps a side and step group");
  static_assert(Sm::PK % 2 == 0 && Sm::PF % 2 == 0 && offsetof(Sm, q) % 4 == 0 && offsetof(Sm, k) % 4 == 0,
                "a channel pair's q, k and tile entries are aligned");
  const int c = 2 * (tid % kPairs), group = tid / kPairs;
  const bool dq_side = group % 2 == 0;
  const int part = group / 2;
#pragma unroll 1
  for (int low = 8 * part; low < valid; low += 8 * kParts) {  // low + 7 ≤ 63: both quads inside the tiles
    const QuadRows a = read_quad(s, low, c, dq_side, q_side, k_pairs, k_state);
    const QuadRows b = read_quad(s, low + 4, c, dq_side, q_side, k_pairs, k_state);
    finish_quad<E, Sm>(a, low, valid, c, dq_side, dq, dq_stride, dk, dk_stride, q_side, k_pairs, k_state);
    finish_quad<E, Sm>(b, low + 4, valid, c, dq_side, dq, dq_stride, dk, dk_stride, q_side, k_pairs, k_state);
  }
}

// dg with every thread of the block (GlaBackwardTail::wide): a channel pair and one of kParts =
// kThreads / (K/2) runs of kChunk / kParts tokens a thread (16 at K = 128). Each run's totals go
// through the e^{g} tile's bytes (free once the token walks are done), then each thread sums its
// run from the totals of the runs after it (the suffix sums) and before it (the prefix sums of
// k ⊙ dk state): the sums of the narrow form, regrouped by run. Every thread calls it (one
// barrier).
template <class E, class Sm>
__device__ __forceinline__ void decay_gradient_by_runs(Sm& s, int valid, int tid, float spans, E* dg,
                                                       int64_t dg_stride, const float* q_side, float* k_pairs,
                                                       const float* k_state) {
  constexpr int KD = Sm::kKeys, PF = Sm::PF, kPairs = KD / 2, kParts = kThreads / kPairs, kRun = kChunk / kParts;
  constexpr int kBatch = kRun < kSub ? kRun : kSub;  // tokens read before any is stored
  static_assert(kThreads % kPairs == 0 && kChunk % kParts == 0, "whole runs");
  static_assert(2 * kParts * KD + kThreads <= kChunk * KD, "the run totals and span parts fit in the e^{g} tile");
  static_assert(PF % 2 == 0, "a channel pair's tile entries are 8-byte aligned");
  const int c = 2 * (tid % kPairs), part = tid / kPairs, lo = part * kRun, hi = min(lo + kRun, valid);
  float* const run_after = s.u.eg;                        // [kParts][KD]: Σ over the run of q_side + k_pairs
  float* const run_state = s.u.eg + kParts * KD;          // [kParts][KD]: Σ over the run of k_state
  // e^{b_last} Σ_v H ⊙ S_0 of channel tid % KD over the tid / KD-th part of the columns (the value loop's split)
  float* const span_parts = s.u.eg + 2 * kParts * KD;
  auto pair_at = [&](const float* tile, int t) { return *reinterpret_cast<const float2*>(tile + t * PF + c); };
  float2 after = make_float2(0.0f, 0.0f), state = make_float2(0.0f, 0.0f);
#pragma unroll 8
  for (int t = lo; t < hi; ++t) {
    const float2 q2 = pair_at(q_side, t), k2 = pair_at(k_pairs, t), s2 = pair_at(k_state, t);
    after.x += q2.x + k2.x, after.y += q2.y + k2.y;
    state.x += s2.x, state.y += s2.y;
  }
  *reinterpret_cast<float2*>(run_after + part * KD + c) = after;
  *reinterpret_cast<float2*>(run_state + part * KD + c) = state;
  span_parts[tid] = spans;
  __syncthreads();
  after = make_float2(0.0f, 0.0f);
  float2 before = make_float2(0.0f, 0.0f);
  for (int later = kParts - 1; later > part; --later) {
    const float2 x = *reinterpret_cast<const float2*>(run_after + later * KD + c);
    after.x += x.x, after.y += x.y;
  }
  for (int earlier = 0; earlier < part; ++earlier) {
    const float2 x = *reinterpret_cast<const float2*>(run_state + earlier * KD + c);
    before.x += x.x, before.y += x.y;
  }
  float2 span_term = make_float2(0.0f, 0.0f);  // the value loop's shares, in order
#pragma unroll
  for (int share = 0; share < Sm::kSpanShares; ++share) {
    const float2 x = *reinterpret_cast<const float2*>(span_parts + share * KD + c);
    span_term.x += x.x, span_term.y += x.y;
  }
  for (int top = hi - 1; top >= lo; top -= kBatch) {  // kBatch tokens at a time, read before stored
    float2 q_part[kBatch], k_part[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int t = max(top - u, lo);
      q_part[u] = pair_at(q_side, t), k_part[u] = pair_at(k_pairs, t);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (top - u < lo) break;
      after.x += q_part[u].x + k_part[u].x, after.y += q_part[u].y + k_part[u].y;
      *reinterpret_cast<float2*>(k_pairs + (top - u) * PF + c) = after;
    }
  }
  for (int t0 = lo; t0 < hi; t0 += kBatch) {
    float2 summed[kBatch], carried[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int t = min(t0 + u, hi - 1);
      summed[u] = pair_at(k_pairs, t), carried[u] = pair_at(k_state, t);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (t0 + u >= hi) break;
      *reinterpret_cast<uint32_t*>(dg + (t0 + u) * dg_stride + c) =
          pack2<E>(summed[u].x + before.x + span_term.x, summed[u].y + before.y + span_term.y);
      before.x += carried[u].x, before.y += carried[u].y;
    }
  }
}

// A chunk factored whole (GlaParams::factored_chunks, as the forward's; NOTES.md v62). With the
// walk's q ⊙ 2^{b}, k ⊙ 2^{−b} and 2^{b} (forward.cuh factored_operands<S, true>; b the running
// log2 decay from the chunk's start) and dA's operand masked to j < i:
//   dq pairs + dq state = 2^{b} ⊙ (scale·do S_0ᵀ + dA (k ⊙ 2^{−b}))
//   dk pairs            = 2^{−b} ⊙ dAᵀ (q ⊙ 2^{b})
//   dk state            = e^{b_last} 2^{−b} ⊙ v Hᵀ
// two products in place of the sub-chunk pairs, the quad pairs and the token walks. The
// diagonal (dA_ii, no decay) is added apart, and the tiles dg sums are left as the token walks
// leave them, so dg keeps its cancellation-free form. The vote that chose this form bounds
// every |b| by kFactoredRange, every operand by kFactoredCeiling and every |dA| by
// kFactoredGradientCeiling, so no product's sum of 64 terms overflows.
constexpr float kFactoredGradientCeiling = 0x1p20f;
constexpr float kFactoredLeastDecay = 0x1p-64f;  // 2^{−kFactoredRange}
static_assert(kFactoredRange == 64.0f, "the least decay is 2^{-kFactoredRange}");

// A warp's 16 rows × KD/2 columns of dq or dk on their way out through shared memory: put as
// 16-bit pairs in fragment layout, then stored a row's 16-byte pieces at a time, so that each
// store instruction writes whole rows (from the fragments each would touch 8 rows, 16 bytes in
// each). A row's pieces are swizzled by the row, which puts the lanes of a fragment's put and
// of a piece's read in distinct banks.
template <int KD>
struct WarpRows {
  static constexpr int kPieces = KD / 16;  // 8 elements a piece, 4 words
  uint32_t* words;                          // 16 rows × kPieces pieces
  __device__ static int piece_at(int row, int piece) {
    return row * kPieces + (piece ^ (row / (8 / kPieces)) % kPieces);
  }
  __device__ void put(int row, int column, uint32_t pair) const {  // column even, below KD/2
    words[4 * piece_at(row, column / 8) + column % 8 / 2] = pair;
  }
  template <class E>
  __device__ void out(E* to, int64_t stride, int rows, int lane) const {
#pragma unroll
    for (int at = lane; at < 16 * kPieces; at += 32) {
      const int row = at / kPieces, piece = at % kPieces;
      if (row < rows)
        *reinterpret_cast<uint4*>(to + row * stride + 8 * piece) =
            *reinterpret_cast<const uint4*>(words + 4 * piece_at(row, piece));
    }
  }
};

// Warp w: rows 16·(w % 4), columns (KD/2)·(w / 4), the value loop's; dq_state and dk_state its
// do S_0ᵀ and v Hᵀ. Every thread calls it (one barrier).
template <class E, class Sm, int NK>
__device__ __forceinline__ void factored_gradients(Sm& s, float scale, float (&dq_state)[NK][4],
                                                   float (&dk_state)[NK][4], int valid, int warp, int lane, E* dq,
                                                   int64_t dq_stride, E* dk, int64_t dk_stride, float* q_side,
                                                   float* k_state, float* k_pairs) {
  constexpr int KD = Sm::kKeys, PK = Sm::PK, PA = Sm::PA, PF = Sm::PF;
  static_assert(NK * 16 == KD, "a warp's columns are half the key block");
  static_assert(offsetof(Sm, decay_all) % 8 == 0 && PF % 2 == 0, "channel pairs are 8-byte aligned");
  static_assert(offsetof(Sm, decay) % 16 == 0 && 8 * 16 * (KD / 2) * sizeof(E) <= sizeof(Sm::decay),
                "the warps' rows fit in the inverse keys' bytes");
  const int rb = warp % 4, side = warp / 4, first = 16 * rb;
#pragma unroll
  for (int nt = 0; nt < NK; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq_state[nt][e] *= scale;
  // Each operand as its rounded value and what the rounding lost: rounded once, the keys' and
  // queries' errors, shared by every row, add up coherently in dg's sums (NOTES.md v62).
  const E* const keys[2] = {s.inverse_keys(), s.key_low()};
  const E* const queries[2] = {s.q_start, s.query_low()};
  float pairs[NK][4] = {};
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    mma_block<false, false>(dq_state, s.dA_operand, PA, keys[part], PK, first, (KD / 2) * side, 0, first + 16, lane);
    mma_block<true, false>(pairs, s.dA_operand, PA, queries[part], PK, first, (KD / 2) * side, first, kChunk, lane);
  }
  __syncthreads();  // the operands are read: the float tiles take the queries' bytes, the rows out the keys'
  const WarpRows<KD> rows{reinterpret_cast<uint32_t*>(s.inverse_keys()) + warp * 4 * KD};
  uint32_t dk_out[NK][2];
#pragma unroll
  for (int nt = 0; nt < NK; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = lane / 4 + 8 * half, column = 8 * nt + 2 * (lane % 4);
      const int i = first + row, c = (KD / 2) * side + column;
      const float2 factor = *reinterpret_cast<const float2*>(s.factors() + i * PF + c);
      const float2 last = *reinterpret_cast<const float2*>(s.decay_all + c);
      const float2 q = load2(s.q + i * PK + c), k = load2(s.k + i * PK + c);
      const float diagonal = s.dA[i * PA + i];
      const float2 inverse = make_float2(rcp_fast(factor.x), rcp_fast(factor.y));
      const float2 to_q = make_float2(dq_state[nt][2 * half] * factor.x, dq_state[nt][2 * half + 1] * factor.y);
      const float2 to_k = make_float2(pairs[nt][2 * half] * inverse.x, pairs[nt][2 * half + 1] * inverse.y);
      const float2 carried = make_float2(dk_state[nt][2 * half] * (last.x * inverse.x),
                                         dk_state[nt][2 * half + 1] * (last.y * inverse.y));
      rows.put(row, column, pack2<E>(to_q.x + diagonal * k.x, to_q.y + diagonal * k.y));
      dk_out[nt][half] = pack2<E>(to_k.x + carried.x + diagonal * q.x, to_k.y + carried.y + diagonal * q.y);
      // Rows past the sequence's end hold zeros in q, k and dA: their entries are zeros dg never reads.
      *reinterpret_cast<float2*>(q_side + i * PF + c) = mul2(q, to_q);
      *reinterpret_cast<float2*>(k_state + i * PF + c) = mul2(k, carried);
      *reinterpret_cast<float2*>(k_pairs + i * PF + c) = make_float2(-k.x * to_k.x, -k.y * to_k.y);
    }
  __syncwarp();
  rows.out(dq + first * dq_stride + (KD / 2) * side, dq_stride, valid - first, lane);
  __syncwarp();
#pragma unroll
  for (int nt = 0; nt < NK; ++nt)
#pragma unroll
    for (int half = 0; half < 2; ++half) rows.put(lane / 4 + 8 * half, 8 * nt + 2 * (lane % 4), dk_out[nt][half]);
  __syncwarp();
  rows.out(dk + first * dk_stride + (KD / 2) * side, dk_stride, valid - first, lane);
}

// Split sequences (NOTES.md v34): a chunk before its sequence's last segment has dL/dS at its
// end from a walk that started the segment from zero. The part carried in from the later
// segments, e^{Σ g from the chunk's end to the segment's} ⊙ dL/dS at the segment's end (per key
// channel), is added to each value slice of H once it lands. Each thread adds it to the pieces
// its own copies brought in (RolledPieces: a first row, then every kRowStep rows, 8 columns),
// so its own wait covers them and the slice's barrier the rest; the floats
// (from L2: every chunk of the segment reads the chain's table) load a slice ahead.
// !kEnabled: nothing (the unsplit form of the gradient kernel).
template <class E, int KD, int kSlice, bool kEnabled = true>
struct CarriedIn {
  using Pieces = RolledPieces<kSlice / 8>;  // load_rows_rolled's, for the slice's [KD, kSlice] tiles
  static constexpr int kRowStep = Pieces::kRowStep, kRows = KD / kRowStep;
  static_assert(KD % kRowStep == 0, "whole rows a thread");
  const float* at_end = nullptr;  // dL/dS at the segment's end, the thread's first row and column; nullptr: none
  float decay[kRows];             // e^{Σ g} from the chunk's end to the segment's, the rows' channels
  float next[kRows][8];           // the next slice's dL/dS at the segment's end
  int row, col, columns;

  __device__ CarriedIn(const GlaParams& p, const KeyBlock& kb, int64_t n, int64_t h, int64_t chunk, int tid)
      : row(Pieces(tid).row), col(Pieces(tid).col), columns(static_cast<int>(p.V)) {
    const int64_t segment = p.segments > 1 ? chunk / p.segment_chunks : 0;
    if (!kEnabled || segment + 1 >= p.segments) return;  // unsplit, or the last segment: its walk started from d final state
    at_end = p.workspace + kb.state(p, segment_slot(p, n, h, segment)) + row * p.V + col;
    const float* const to_end = p.decay_to_segment_end + chunk_slot(p, n, h, chunk) * p.K + kb.key0 + row;
#pragma unroll
    for (int i = 0; i < kRows; ++i) decay[i] = to_end[i * kRowStep];
  }
  __device__ void fetch(int v0) {
    if constexpr (kEnabled) {
      if (!at_end || v0 >= columns) return;
#pragma unroll
      for (int i = 0; i < kRows; ++i)
#pragma unroll
        for (int j = 0; j < 8; j += 4) {
          const float4 x = *reinterpret_cast<const float4*>(at_end + static_cast<int64_t>(i) * kRowStep * columns + v0 + j);
          next[i][j] = x.x, next[i][j + 1] = x.y, next[i][j + 2] = x.z, next[i][j + 3] = x.w;
        }
    }
  }
  // H: the slice's [KD, kSlice] tile, rows `pitch` elements apart; after this thread's copies landed.
  __device__ void add(E* H, int pitch) const {
    if constexpr (kEnabled) {
      if (!at_end) return;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        E* const at = H + (row + i * kRowStep) * pitch + col;
        uint4 raw = *reinterpret_cast<const uint4*>(at);
        E* const eight = reinterpret_cast<E*>(&raw);
#pragma unroll
        for (int u = 0; u < 8; ++u) eight[u] = from_float<E>(to_float(eight[u]) + decay[i] * next[i][u]);
        *reinterpret_cast<uint4*>(at) = raw;
      }
    }
  }
};

// Which (chunk, head, sequence, key block) a gradient block takes, from its place in the
// (max_chunks · key_blocks, H, N) grid counted x fastest, the order the blocks start in. In
// order, key block fastest, then chunk, head and sequence; with p.last_chunks_first, every
// sequence's last chunk first (key block, head, sequence), then the others in that order.
// `skip`: nothing to do (a chunk past a shorter sequence's end, or one already taken first).
// `zero_grad`: the chunk's dL/dS is zero and known without the walk (an unsplit sequence's last
// chunk with no d final state), so the block neither reads the walk's table nor waits for it.
struct GradientBlock {
  int64_t chunk, h, n;
  int key_block;
  Span seq;
  bool skip, zero_grad;
  __device__ explicit GradientBlock(const GlaParams& p) {
    const int64_t kb = p.key_blocks, per_pair = p.max_chunks * kb;
    const int64_t firsts = p.last_chunks_first ? p.num_sequences * p.H * kb : 0;
    int64_t index = blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + int64_t{gridDim.y} * blockIdx.z);
    bool last = false;
    int64_t pair, along = 0;  // (sequence, head) pair n·H + h, and chunk · key blocks + key block
    if (index < firsts) {
      key_block = static_cast<int>(index % kb), pair = index / kb, last = true;
    } else {
      index -= firsts;
      const int64_t others = p.last_chunks_first ? per_pair - kb : per_pair;
      along = index % others, pair = index / others;
      key_block = static_cast<int>(along % kb);
    }
    h = pair % p.H, n = pair / p.H;
    seq = sequence_span(p, n);
    const int64_t last_chunk = (seq.length + kChunk - 1) / kChunk - 1;
    chunk = last ? last_chunk : along / kb;
    skip = chunk < 0 || chunk > last_chunk || (p.last_chunks_first && !last && chunk == last_chunk);
    zero_grad = last && p.segments == 1 && !p.d_final_state;
  }
};

// kQuadWalk (with kQuads only): the token walks by quads and the Σ H ⊙ S_0 reads 16 bytes a
// load (params.hpp GlaBackwardWalk). kWideTail (with kQuadWalk only): dg's sums on every
// thread and the quad operands read a sub-chunk before stored (params.hpp GlaBackwardTail).
// kCarryIn: split sequences' chunks before their last segment take the carry-in (CarriedIn);
// without it every chunk must be unsplit. kTableCopies: the value slices of S_0 and H by the
// copy engine through s0_map and h_map (TableSlices), else as cp.async pieces (the maps unused).
// kHeldOperands (with kTableCopies): in the value loop, k_end's fragments held in registers for
// all slices and do's read once a slice for both of its products, instead of from shared
// memory at each product (NOTES.md v47).
// kSavedScores (with kQuads): A comes from the forward's table (GlaParams::saved_chunk_scores)
// with q, k and g instead of being formed here: no inner and pair products, and walkers that
// leave the raw q and k in place (no quad operands), so they need no reload (NOTES.md v48).
template <class E, int KD, bool kQuads, bool kQuadWalk, bool kWideTail = false, bool kCarryIn = true,
          bool kTableCopies = false, bool kHeldOperands = false, bool kSavedScores = false>
__global__ void __launch_bounds__(kThreads, 1)
    gradient_kernel(const GlaParams p, const __grid_constant__ CUtensorMap s0_map,
                    const __grid_constant__ CUtensorMap h_map) {
  static_assert(kQuads || !kQuadWalk, "the quad walk takes the tensor-core diagonal");
  static_assert(kQuadWalk || !kWideTail, "the wide tail comes with the quad walk");
  static_assert(kQuads || !kSavedScores, "the saved scores come with the tensor-core diagonal");
  constexpr bool kWalkQuads = kQuads && !kSavedScores;  // the walkers write the quads' operands over q, k
  // A chunk factored whole (factored_gradients): bf16 only, whose operands keep fp32's exponent range.
  constexpr bool kFactorable = kSavedScores && std::is_same_v<E, __nv_bfloat16>;
  using Sm = GradSmem<E, KD>;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  constexpr int PK = Sm::PK, PA = Sm::PA, PS = Sm::PS, PF = Sm::PF, kSlice = Sm::kSlice;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const GradientBlock block(p);
  if (block.skip) return;
  // Launched as the dL/dS walk's programmatic dependent, this block may run beside the walk:
  // it waits for the walk's table unless it has no use for it.
  if (!block.zero_grad) wait_for_previous_grid();
  const int64_t chunk = block.chunk, h = block.h, n = block.n;
  const KeyBlock kb{block.key_block * KD, 0, block.key_block};  // forward.cuh KeyBlock; no value blocks here
  const int64_t key0 = kb.key0;
  const Span seq = block.seq;
  const int64_t t0 = chunk * kChunk;
  const int h_rows = block.zero_grad ? 0 : KD;  // H's rows read from the table; the rest zero-filled
  const int valid = static_cast<int>(min(static_cast<int64_t>(kChunk), seq.length - t0));
  auto row0 = [&](const GlaTokens& x, int64_t col) {
    return static_cast<E*>(x.data) + seq.batch * x.stride_batch + (seq.start + t0) * x.stride_time +
           h * x.stride_head + col;
  };
  const int64_t slot = chunk_slot(p, n, h, chunk);
  const E* const S0_all = static_cast<const E*>(p.chunk_states) + kb.state(p, slot);
  const E* const H_all = static_cast<const E*>(p.chunk_state_grads) + kb.state(p, slot);
  // The value slices. At K = 128 a second stage lives in the bytes of e^{g} and q_start,
  // which nothing reads once A is formed ({v, S_0} and {do, H}, 15 KB of 17 KB each), so
  // each slice lands during the one before; at K = 64 one stage (no room for that split).
  constexpr bool kTwoStages = KD == 128;
  static_assert(!kTwoStages || (kChunk + KD) * PS * sizeof(E) <= sizeof(s.decay), "a stage's half fits");
  static_assert(offsetof(Sm, u) % 128 == 0 && offsetof(Sm, decay) % 128 == 0 && offsetof(Sm, q_start) % 128 == 0 &&
                    kChunk * PS * sizeof(E) % 128 == 0 && KD * PS * sizeof(E) % 128 == 0,
                "every slice tile starts on the 128 bytes a tensor copy's destination needs");
  const int table_row = static_cast<int>(slot * p.K + key0);  // the host checked the rows fit an int
  const int h_row = block.zero_grad ? static_cast<int>(state_table_rows(p)) : table_row;  // past the table: zeros
  const TableSlices<Sm, kTwoStages ? 2 : 1> tables{s0_map, h_map, s.table_full, table_row, h_row};
  struct SliceView {
    E *v, *d_o, *S0, *H;
  };
  // Stage 1's pointers selected, not branched to: a branch gave the loop body two copies of
  // issue_slice, one a stage (code size: the kernel's fetch stalls, NOTES.md v11).
  auto slice_view = [&](int stage) -> SliceView {
    const bool second = kTwoStages && stage != 0;
    E* const a = second ? reinterpret_cast<E*>(s.decay) : s.u.slice.v;
    E* const b = second ? s.q_start : s.u.slice.d_o;
    E* const a2 = second ? a + kChunk * PS : s.u.slice.S0;
    E* const b2 = second ? b + kChunk * PS : s.u.slice.H;
    return {a, b, a2, b2};
  };
  auto issue_slice = [&](int v0, int stage) {
    const SliceView t = slice_view(stage);
    load_chunk<kSlice, PS, true>(t.v, row0(p.v, v0), p.v.stride_time, valid, tid);
    load_chunk<kSlice, PS, true>(t.d_o, row0(p.d_o, v0), p.d_o.stride_time, valid, tid);
    if constexpr (kTableCopies) {
      if (tid == 0) tables.issue(t.S0, t.H, v0, stage);
    } else {
      load_rows_rolled<KD, kSlice, PS>(t.S0, S0_all + v0, p.V, KD, tid);
      load_rows_rolled<KD, kSlice, PS>(t.H, H_all + v0, p.V, h_rows, tid);
    }
    copy_async_commit();
  };

  // A, as the forward forms it, or the forward's own (kSavedScores: all 64 rows, zeros past the
  // sequence's end and above the diagonal).
  // (Asked for later, after q, k, g's commit or once they are in, A's copies measured no faster:
  // NOTES.md v48b, v48c.)
  PhaseEvents phases(p.phase_cycles, tid == 0);
  if constexpr (kSavedScores) {
    const E* const scores = static_cast<const E*>(p.saved_chunk_scores) + slot * kScoreTile;
    load_chunk<kChunk, PA, true>(s.scores, scores, kChunk, kChunk, tid);
  } else {
    // Rolled: stores only, nothing for unrolling to overlap, and code is what this kernel is short of.
#pragma unroll 1
    for (int i = tid; i < kChunk * PA; i += kThreads) s.scores[i] = from_float<E>(0.0f);
  }
  load_chunk<KD, PK, true>(s.q, row0(p.q, key0), p.q.stride_time, valid, tid);
  load_chunk<KD, PK, true>(s.k, row0(p.k, key0), p.k.stride_time, valid, tid);
  load_chunk<KD, PK, true>(s.g, row0(p.g, key0), p.g.stride_time, valid, tid);
  copy_async_commit();
  if constexpr (kTableCopies) {  // the barriers initialised before thread 0 arrives on them and any thread waits
    if (tid == 0) tables.init();
    __syncthreads();
  }
  issue_slice(0, 0);  // lands while A is formed
  CarriedIn<E, KD, kSlice, kCarryIn> carried_in(p, kb, n, h, chunk, tid);
  carried_in.fetch(0);
  copy_async_wait_pending<1>();
  __syncthreads();
  phases.mark(kGlaGradientLoads);
  if constexpr (kWalkQuads) {
    quad_inner_scores(s, tid);
    __syncthreads();  // the raw q, k are read: the walkers write the quads' operands over them
  }
  phases.mark(kGlaGradientInner);
  decay_operands<true, Sm, kWalkQuads>(s, tid);
  __syncthreads();
  phases.mark(kGlaGradientWalkers);
  if constexpr (!kSavedScores) {
    if constexpr (kQuads) quad_pair_scores(s, warp, lane);
    else diagonal_scores(s, warp, lane);
    pair_scores(s, warp, lane);
  }
  phases.mark(kGlaGradientPairs);
  copy_async_wait_all();
  if constexpr (kTableCopies) {
    tables.wait(0);
    fence_async_shared();  // e^{g}'s and q_start's bytes, stage 1 of the slices from here
  }
  carried_in.add(slice_view(0).H, PS);
  __syncthreads();
  phases.mark(kGlaGradientSlice);
  // The raw q and k again (the quads' operands replaced them): they land during the value loop.
  if constexpr (kWalkQuads) {
    load_chunk<KD, PK, true>(s.q, row0(p.q, key0), p.q.stride_time, valid, tid);
    load_chunk<KD, PK, true>(s.k, row0(p.k, key0), p.k.stride_time, valid, tid);
    copy_async_commit();
  }

  // The products over V, slice by slice. Warp w: rows 16·(w % 4); columns by w / 4.
  const int rb = warp % 4, side = warp / 4;
  constexpr int NK = KD / 16;  // 8-column tiles in half of KD
  float dA_acc[4][4] = {}, dq_state[NK][4] = {}, dk_state[NK][4] = {};
  float spans = 0.0f;  // Σ_v H ⊙ S_0 of channel tid % KD (with the wide tail a part of the columns)
  uint32_t k_end_held[kHeldOperands ? KD / 16 : 1][4];  // k_end's A fragments, rows 16·rb
  if constexpr (kHeldOperands)
#pragma unroll
    for (int ks = 0; ks < KD / 16; ++ks) load_a(k_end_held[ks], s.k_end, PK, 16 * rb, 16 * ks, lane);
  for (int v0 = 0, stage = 0; v0 < p.V; v0 += kSlice, stage ^= kTwoStages ? 1 : 0) {
    const SliceView t = slice_view(stage);
    if (v0 > 0) {
      if (!kTwoStages) issue_slice(v0, 0);
      copy_async_wait_all();
      if constexpr (kTableCopies) tables.wait(v0 / kSlice);
      carried_in.add(t.H, PS);
      __syncthreads();
    }
    // The next slice into the other stage: the last slice read it, and A is formed.
    if (kTwoStages && v0 + kSlice < p.V) issue_slice(v0 + kSlice, stage ^ 1);
    carried_in.fetch(v0 + kSlice);
    // With kHeldOperands the same products in the same order, with fewer shared reads.
    if constexpr (kHeldOperands) {
#pragma unroll
      for (int k0 = 0; k0 < kSlice; k0 += 16) {
        uint32_t do_rows[4];
        load_a(do_rows, t.d_o, PS, 16 * rb, k0, lane);
        mma_step<true>(dA_acc, do_rows, t.v, PS, 32 * side, k0, lane);           // do vᵀ
        mma_step<true>(dq_state, do_rows, t.S0, PS, (KD / 2) * side, k0, lane);  // do S_0ᵀ
      }
    } else {
      mma_block<false, true>(dA_acc, t.d_o, PS, t.v, PS, 16 * rb, 32 * side, 0, kSlice, lane);            // do vᵀ
      mma_block<false, true>(dq_state, t.d_o, PS, t.S0, PS, 16 * rb, (KD / 2) * side, 0, kSlice, lane);  // do S_0ᵀ
    }
    mma_block<false, true>(dk_state, t.v, PS, t.H, PS, 16 * rb, (KD / 2) * side, 0, kSlice, lane);     // v Hᵀ
    float attention[2][4] = {}, carried[2][4] = {};
    mma_block<true, false>(attention, s.scores, PA, t.d_o, PS, 16 * rb, 16 * side, 16 * rb, kChunk, lane);  // Aᵀ do
    if constexpr (kHeldOperands) {
#pragma unroll
      for (int ks = 0; ks < KD / 16; ++ks) mma_step<false>(carried, k_end_held[ks], t.H, PS, 16 * side, 16 * ks, lane);
    } else {
      mma_block<false, false>(carried, s.k_end, PK, t.H, PS, 16 * rb, 16 * side, 0, KD, lane);  // k_end H
    }
    E* const dv = row0(p.dv, v0);
    float* const dv_partial = kb.partial(p, seq.batch, seq.start + t0, h, v0);  // key blocks: this block's share
    const int64_t dv_stride = dv_partial ? p.H * p.V : p.dv.stride_time;
    const int r = 16 * rb + lane / 4;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int c = 16 * side + 8 * nt + 2 * (lane % 4);
      if (r < valid)
        store_pair(dv, dv_partial, r * dv_stride + c, p.scale * attention[nt][0] + carried[nt][0],
                   p.scale * attention[nt][1] + carried[nt][1]);
      if (r + 8 < valid)
        store_pair(dv, dv_partial, (r + 8) * dv_stride + c, p.scale * attention[nt][2] + carried[nt][2],
                   p.scale * attention[nt][3] + carried[nt][3]);
    }
    // Σ H ⊙ S_0 over the slice's columns, channel tid % KD: with the wide tail every thread
    // takes a kSpanParts-th of the columns (dg adds the parts), else threads < KD all of them.
    constexpr int kSpanParts = kWideTail ? Sm::kSpanShares : 1, kSpanColumns = kSlice / kSpanParts;
    static_assert(kSpanColumns % 8 == 0, "whole 16-byte pieces a part");
    if (kWideTail || tid < KD) {
      if constexpr (kQuadWalk) {  // 8 elements a load: lanes 80 bytes apart then hit distinct banks
        static_assert(PS % 8 == 0, "slice rows are 16-byte aligned");
        const int row = tid % KD, first = tid / KD * kSpanColumns;
#pragma unroll
        for (int c0 = first; c0 < first + kSpanColumns; c0 += 8) {
          const uint4 hv = *reinterpret_cast<const uint4*>(t.H + row * PS + c0);
          const uint4 sv = *reinterpret_cast<const uint4*>(t.S0 + row * PS + c0);
          const E* const h8 = reinterpret_cast<const E*>(&hv);
          const E* const s8 = reinterpret_cast<const E*>(&sv);
#pragma unroll
          for (int u = 0; u < 8; ++u) spans += to_float(h8[u]) * to_float(s8[u]);
        }
      } else {
#pragma unroll 8
        for (int c = 0; c < kSlice; ++c) spans += to_float(t.H[tid * PS + c]) * to_float(t.S0[tid * PS + c]);
      }
    }
    if constexpr (kTableCopies) fence_async_shared();  // read by this thread before the copy engine rewrites it
    __syncthreads();  // the slices are read before the next ones land (or the space is reused)
  }
  phases.mark(kGlaGradientValues);

  // dA into shared memory (float, with the diagonal); a chunk factored whole needs every |dA|
  // below kFactoredGradientCeiling.
  const int r = 16 * rb + lane / 4;
  bool large_dA = false;  // NaN counts as large
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r + 8 * (e / 2), j = 32 * side + 8 * nt + 2 * (lane % 4) + e % 2;
      const float x = j <= i ? p.scale * dA_acc[nt][e] : 0.0f;
      s.dA[i * PA + j] = x;
      large_dA = large_dA || !(fabsf(x) < kFactoredGradientCeiling);
    }
  // A chunk factored whole (factored_gradients): a first vote on what is known already (every
  // |dA|, and e^{b_last} ≥ 2^{−kFactoredRange}, which with g ≤ 0 bounds every |b|), then the
  // walk's operands and a second vote on them. The walk writes over q_sub and k_end: a chunk
  // voted out by the second vote (operands of 2^{100} and more) walks the walkers' operands again
  // and, as one voted out by the first, takes the sub-chunks and quads from the raw q, k and g.
  bool factored = false;
  if constexpr (kFactorable) {
    if (p.factored_chunks && !__syncthreads_or(large_dA || !(s.decay_all[tid % KD] >= kFactoredLeastDecay))) {
      factored = !__syncthreads_or(factored_operands<Sm, true>(s, tid));
      if (!factored) {
        decay_operands<true, Sm, kWalkQuads>(s, tid);
        __syncthreads();
      }
    }
  }
  // dA's operand for the tensor cores, rounded: j < i factored (the diagonal goes apart), j ≤ i
  // otherwise. Each thread reads back its own floats.
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r + 8 * (e / 2), j = 32 * side + 8 * nt + 2 * (lane % 4) + e % 2;
      s.dA_operand[i * PA + j] = from_float<E>(j < i || !factored ? s.dA[i * PA + j] : 0.0f);
    }
  if (kWideTail || tid < KD) spans *= s.decay_all[tid % KD];
  // The per-channel tiles the token walks (or factored_gradients) finish and dg sums:
  //   q_side:  the q-side gradient not yet multiplied by the decay inside its sub-chunk;
  //            then q ⊙ (dq pairs + dq state);
  //   k_state: the same for the S_end term of dk; then k ⊙ dk state;
  //   k_pairs: the pairs with later sub-chunks, likewise; then −k ⊙ dk pairs, then its
  //            sums from each token on.
  float* const q_side = s.tile(0);
  float* const k_state = s.tile(1);
  float* const k_pairs = s.tile(2);
  if (factored) {
    phases.count(kGlaGradientFactored);
    __syncthreads();  // dA's operand is in
    phases.mark(kGlaGradientFactors);
    factored_gradients<E>(s, p.scale, dq_state, dk_state, valid, warp, lane, row0(p.dq, key0), p.dq.stride_time,
                          row0(p.dk, key0), p.dk.stride_time, q_side, k_state, k_pairs);
    phases.mark(kGlaGradientProducts);
  } else {
    // From the g tile still in shared memory (rows past the sequence's end are zeros there:
    // e^{0} = 1); reading it again from global memory, each load waited behind the previous
    // iteration's shared store (the compiler cannot tell them apart), cost a memory latency an
    // iteration.
    // Four channels a thread a step: one 8-byte read of g, one 16-byte write of e^{g} (the
    // same exponentials as an element a step, with a quarter of the shared accesses and their
    // address arithmetic: NOTES.md v26).
    static_assert(PK % 4 == 0 && offsetof(Sm, g) % 8 == 0 && offsetof(Sm, u) % 16 == 0, "aligned rows");
#pragma unroll 2
    for (int i = tid; i < kChunk * KD / 4; i += kThreads) {
      const int t = i / (KD / 4), c = i % (KD / 4) * 4;
      const uint2 raw = *reinterpret_cast<const uint2*>(s.g + t * PK + c);
      const E* const four = reinterpret_cast<const E*>(&raw);
      *reinterpret_cast<float4*>(s.u.eg + t * KD + c) =
          make_float4(exp_fast(to_float(four[0])), exp_fast(to_float(four[1])), exp_fast(to_float(four[2])),
                      exp_fast(to_float(four[3])));
    }

    auto for_each_element = [&](auto&& f) {  // (row, column, nt, e) of this lane's KD-wide fragments
#pragma unroll
      for (int nt = 0; nt < NK; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(r + 8 * (e / 2), (KD / 2) * side + 8 * nt + 2 * (lane % 4) + e % 2, nt, e);
    };
    {
      __syncthreads();  // e^{g} is in (and with kWalkQuads the raw q, k)
      if (tid < KD) sub_chunk_factors(s, tid);
      if constexpr (kQuads) quad_gradient_operands<Sm, kWideTail>(s, tid);
      __syncthreads();
      phases.mark(kGlaGradientFactors);
      // dq: e^{b_{i0}} ⊙ scale·do S_0ᵀ + Σ_{J<I} dA_IJ (k ⊙ e^{b_{i0} − b})_J, for sub-chunk I = rb.
      for_each_element([&](int, int c, int nt, int e) { dq_state[nt][e] *= p.scale * s.start_of_sub[rb * KD + c]; });
      if (rb > 0)
        mma_block<false, false>(dq_state, s.dA_operand, PA, s.k_pair + pair_row0(rb) * PK, PK, 16 * rb,
                                (KD / 2) * side, 0, 16 * rb, lane);
      if constexpr (kQuads) {  // moved to the first token of the row's quad, plus the pairs of earlier quads
        for_each_element([&](int i, int c, int nt, int e) {
          dq_state[nt][e] *= s.quad_factors()[(4 * rb + (i % kSub) / 4) * KD + c];
        });
        quad_gradient_dq(s, dq_state, rb, (KD / 2) * side, lane);
        __syncthreads();  // dq's quad keys are read: tile(0) takes their place
      }
      for_each_element([&](int i, int c, int nt, int e) { q_side[i * PF + c] = dq_state[nt][e]; });
      // dk, sub-chunk J = rb: e^{b_last − b_r} ⊙ v Hᵀ, and
      // Σ_{I>J} e^{b_{i0(I)} − b_r} ⊙ dA_IJᵀ (q ⊙ e^{b − b_{i0}})_I.
      for_each_element([&](int, int c, int nt, int e) { dk_state[nt][e] *= s.end_from_sub[rb * KD + c]; });
      float later[NK][4] = {};
      for (int I = rb + 1; I < 4; ++I) {
        float part[NK][4] = {};
        mma_block<true, false>(part, s.dA_operand, PA, s.q_sub, PK, 16 * rb, (KD / 2) * side, 16 * I, 16 * I + 16,
                               lane);
        const float* const factor = s.across + (I * (I - 1) / 2 + rb) * KD;
        for_each_element([&](int, int c, int nt, int e) { later[nt][e] += factor[c] * part[nt][e]; });
      }
      if constexpr (kQuads) {  // moved to the last token of the row's quad, plus the pairs of later quads
        for_each_element([&](int i, int c, int nt, int e) {
          const float to_end = s.quad_factors()[(16 + 4 * rb + (i % kSub) / 4) * KD + c];
          dk_state[nt][e] *= to_end;
          later[nt][e] *= to_end;
        });
        quad_gradient_dk(s, later, rb, (KD / 2) * side, lane);
      }
      __syncthreads();  // q_sub, k_pair (and dk's quad queries) are read: tiles 1 and 2 take their place
      for_each_element([&](int i, int c, int nt, int e) {
        k_state[i * PF + c] = dk_state[nt][e];
        k_pairs[i * PF + c] = later[nt][e];
      });
    }
    __syncthreads();
    phases.mark(kGlaGradientProducts);

    // The token pairs within one block of kBlock tokens (a sub-chunk, or with kQuads a quad),
    // a thread per (key channel, side). Weights e^{b_i − b_j} are running products of e^{g}
    // from the nearer token outwards. The kBlock − 1 distances are unrolled with clamped
    // indices and a zero weight past the block, so every load is unconditional and they issue
    // together (a loop that stopped at the sub-chunk's edge waited on each step's loads,
    // ≈ 100 cycles a step).
    constexpr int kBlock = kQuads ? 4 : kSub;
    if constexpr (kQuadWalk) {
      quad_token_walks(s, valid, tid, row0(p.dq, key0), p.dq.stride_time, row0(p.dk, key0), p.dk.stride_time, q_side,
                       k_pairs, k_state);
    } else if (tid < 2 * KD) {
      const int c = tid % KD;
      auto eg = [&](int t) { return s.u.eg[t * KD + c]; };
      auto q_at = [&](int t) { return to_float(s.q[t * PK + c]); };
      auto k_at = [&](int t) { return to_float(s.k[t * PK + c]); };
      if (tid < KD) {  // dq
        E* const dq = row0(p.dq, key0);
        auto pair_sum = [&](int i) {  // Σ_{j<i, same block} dA_ij k_j e^{b_i − b_j}
          const int low = i & ~(kBlock - 1), span = i - low;
          float pairs = 0.0f, w = 1.0f;
#pragma unroll
          for (int d = 1; d < kBlock; ++d) {  // j = i − d
            const int j = max(i - d, low);
            w *= d <= span ? eg(j + 1) : 0.0f;
            pairs += s.dA[i * PA + j] * k_at(j) * w;
          }
          return pairs;
        };
        // Two rows a step: their sums are independent chains, and everything both read is
        // read before either stores (same sums as one row a step, checked bit for bit in a
        // host model).
        float decay = 1.0f;  // e^{b_i − b_{i0}}, i0 the first token of i's block
        for (int i = 0; i < valid; i += 2) {
          const int rows[2] = {i, min(i + 1, valid - 1)};  // the second: the first again past the end
          float pairs[2], side[2], diagonal[2], q_row[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = rows[r];
            pairs[r] = pair_sum(row);
            side[r] = q_side[row * PF + c];
            diagonal[r] = s.dA[row * PA + row] * k_at(row);
            q_row[r] = q_at(row);
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = i + r;
            if (row >= valid) break;
            decay = row % kBlock == 0 ? 1.0f : decay * eg(row);
            const float part = pairs[r] + side[r] * decay;
            dq[row * p.dq.stride_time + c] = from_float<E>(part + diagonal[r]);
            q_side[row * PF + c] = q_row[r] * part;
          }
        }
      } else {  // dk
        E* const dk = row0(p.dk, key0);
        auto pair_sum = [&](int j) {  // Σ_{i>j, same block} dA_ij q_i e^{b_i − b_j}
          const int top = min((j | (kBlock - 1)) + 1, valid), span = top - 1 - j;
          float pairs = 0.0f, w = 1.0f;
#pragma unroll
          for (int d = 1; d < kBlock; ++d) {  // i = j + d
            const int i = min(j + d, top - 1);
            w *= d <= span ? eg(i) : 0.0f;
            pairs += s.dA[i * PA + j] * q_at(i) * w;
          }
          return pairs;
        };
        float decay = 1.0f;  // e^{b_r − b_j}, r the last token of j's block
        for (int j = valid - 1; j >= 0; j -= 2) {
          const int rows[2] = {j, max(j - 1, 0)};  // the second: the first again past the start
          float pairs[2], later[2], state[2], diagonal[2], k_row[2];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = rows[r];
            pairs[r] = pair_sum(row);
            later[r] = k_pairs[row * PF + c];
            state[r] = k_state[row * PF + c];
            diagonal[r] = s.dA[row * PA + row] * q_at(row);
            k_row[r] = k_at(row);
          }
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = j - r;
            if (row < 0) break;
            if (row % kBlock == kBlock - 1) decay = 1.0f;
            const float all_pairs = pairs[r] + later[r] * decay, carried = state[r] * decay;
            dk[row * p.dk.stride_time + c] = from_float<E>(all_pairs + carried + diagonal[r]);
            k_state[row * PF + c] = k_row[r] * carried;
            k_pairs[row * PF + c] = -k_row[r] * all_pairs;
            decay *= eg(row);
          }
        }
      }
    }
  }
  __syncthreads();
  phases.mark(kGlaGradientWalks);

  // dg_t = Σ_{i≥t} (q ⊙ (dq pairs + dq state) − k ⊙ dk pairs)_i + Σ_{j<t} (k ⊙ dk state)_j
  //        + e^{b_last} Σ_v H ⊙ S_0: every term whose decay spans token t, none that cancel.
  // 16 tokens at a time, read before any is stored (the stores may alias the loads for the
  // compiler, and each token's load would otherwise wait behind the last token's store).
  if constexpr (kWideTail) {
    decay_gradient_by_runs(s, valid, tid, spans, row0(p.dg, key0), p.dg.stride_time, q_side, k_pairs, k_state);
  } else if (tid < KD) {
    const int c = tid;
    E* const dg = row0(p.dg, key0);
    float after = 0.0f;
    for (int top = valid - 1; top >= 0; top -= kSub) {
      float q_part[kSub], k_part[kSub];
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        const int t = max(top - u, 0);
        q_part[u] = q_side[t * PF + c], k_part[u] = k_pairs[t * PF + c];
      }
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        if (top - u < 0) break;
        after += q_part[u] + k_part[u];
        k_pairs[(top - u) * PF + c] = after;
      }
    }
    float before = 0.0f;
    for (int t0 = 0; t0 < valid; t0 += kSub) {
      float summed[kSub], state[kSub];
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        const int t = min(t0 + u, valid - 1);
        summed[u] = k_pairs[t * PF + c], state[u] = k_state[t * PF + c];
      }
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        if (t0 + u >= valid) break;
        dg[(t0 + u) * p.dg.stride_time + c] = from_float<E>(summed[u] + before + spans);
        before += state[u];
      }
    }
  }
  phases.mark(kGlaGradientDecays);
  if (phases.counters) atomicAdd(p.phase_cycles + kGlaGradientBlocks, 1ull);
}

// ---- Launch ----

inline size_t state_table_bytes(const GlaParams& p) {
  return static_cast<size_t>(p.num_sequences * p.H * p.max_chunks * p.K * p.V) * 2;  // 16-bit elements
}

// State tables in the scratch: dL/dS, and the chunk states unless the forward saved them.
inline int scratch_state_tables(const GlaParams& p) { return p.saved_chunk_states ? 1 : 2; }

// Split: the segment tables, then every chunk's decay to its segment's end ([N, H,
// max_chunks, K] floats, GlaParams::decay_to_segment_end).
inline size_t split_table_bytes(const GlaParams& p) {
  const size_t to_end = p.segments > 1 ? static_cast<size_t>(p.num_sequences * p.H * p.max_chunks * p.K) : 0;
  return (segment_table_floats(p) + to_end) * sizeof(float);
}

// Scratch: the state tables, the split's tables, then the key blocks' partials of dv (K = 256).
inline size_t backward_scratch_bytes(GlaParams p) {
  p.key_blocks = p.K == 256 ? 2 : 1;
  plan_segments(p, p.V / (p.V % 128 == 0 ? 128 : 64) * p.key_blocks);
  return scratch_state_tables(p) * state_table_bytes(p) + split_table_bytes(p) + partial_bytes(p);
}

template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
}

// Pass 2 (the dL/dS walk, split like the forward when the grid is small) with kStages stages
// of copies; split, the chain of the segments after it.
template <class E, int KD, int VB, int kStages>
void state_gradients(const GlaParams& p, cudaStream_t stream) {
  const size_t state_smem = sizeof(StateGradSmem<E, KD, VB, kStages>);
  const dim3 state_grid(column_blocks<VB>(p), static_cast<unsigned>(p.H),
                        static_cast<unsigned>(p.num_sequences * p.segments));
  auto walk = state_grad_kernel<E, KD, VB, kStages>;
  allow_shared(walk, state_smem, "gla backward state gradients shared memory");
  const CUtensorMap grads_map = state_table_map<E, KD, VB>(p.chunk_state_grads, p, "dL/dS table");
  timed_launch(stream, "gla backward state gradients",
               [&] { walk<<<state_grid, kThreads, state_smem, stream>>>(p, grads_map); });
  if (p.segments > 1) {
    timed_launch(stream, "gla backward chain segments",
                 [&] { chain_segment_grads_kernel<<<chain_grid(p), 256, 0, stream>>>(p); });
  }
}

// The maps of the S_0 and H tables through which the gradient kernel's value slices come
// (TableSlices), or nullopt where the copy engine cannot read them (a table's base not 16-byte
// aligned, or rows past the coordinates' range).
template <class E, int KD>
std::optional<std::pair<CUtensorMap, CUtensorMap>> table_maps(const GlaParams& p) {
  const int64_t rows = state_table_rows(p);
  const TensorMapShape shape{map_dtype<E>(), sizeof(E), {p.V, rows, 1}, p.V, rows * p.V,
                             {static_cast<uint32_t>(GradSmem<E, KD>::PS), static_cast<uint32_t>(KD), 1}};
  const bool supported = rows <= INT32_MAX - KD && tensor_map_supported(p.chunk_states, shape) &&
                         tensor_map_supported(p.chunk_state_grads, shape);
  if (!supported) return std::nullopt;
  return std::make_pair(make_tensor_map(p.chunk_states, shape), make_tensor_map(p.chunk_state_grads, shape));
}

template <class E, int KD, int VB>
void launch_backward(GlaParams p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  p.key_blocks = p.K / KD;
  plan_segments(p, column_blocks<VB>(p));
  const size_t table = state_table_bytes(p), split_bytes = split_table_bytes(p);
  const size_t tables = scratch_state_tables(p) * table;
  const size_t bytes = tables + split_bytes + partial_bytes(p);
  void* scratch = p.scratch;
  const bool owned = scratch == nullptr || p.scratch_bytes < bytes;
  if (owned) scratch = stream_scratch(bytes, stream, "gla backward workspace");
  auto* base = static_cast<unsigned char*>(scratch);
  p.chunk_state_grads = base;
  p.chunk_states = p.saved_chunk_states ? p.saved_chunk_states : base + table;
  p.workspace = p.segments > 1 ? reinterpret_cast<float*>(base + tables) : nullptr;
  p.decay_to_segment_end = p.segments > 1 ? p.workspace + segment_table_floats(p) : nullptr;
  if (p.key_blocks > 1) use_partial(p, base + tables + split_bytes, stream);

  // The forward's saved chunk states when the caller kept them (GlaParams::saved_chunk_states),
  // else the chunk-state pass from each segment's entering state (the forward's segment
  // tables in p.workspace, which the dL/dS walk takes over after it).
  if (!p.saved_chunk_states) {
    if (p.segments > 1) segment_entering_states<E, KD, VB>(p, stream);
    launch_pass<E, KD, VB, Pass::chunk_states>(p, stream);
  }

  if (gla_backward_state_stages() == 3) state_gradients<E, KD, VB, 3>(p, stream);
  else state_gradients<E, KD, VB, 2>(p, stream);

  p.phase_cycles = profile_counters();  // the gradient kernel's phase clocks while profiling
  p.factored_chunks = gla_backward_factored();
  const size_t grad_smem = sizeof(GradSmem<E, KD>);
  const dim3 grad_grid(static_cast<unsigned>(p.max_chunks * p.key_blocks), static_cast<unsigned>(p.H),
                       static_cast<unsigned>(p.num_sequences));
  // The walk is the stream's previous kernel only unsplit (split, the segments' chain follows it).
  p.last_chunks_first = gla_backward_early_start();
  const bool programmatic = p.last_chunks_first && p.segments == 1;
  const bool quad_walk =
      gla_backward_diagonal() == GlaBackwardDiagonal::tensor_cores && gla_backward_walk() == GlaBackwardWalk::quads;
  const auto maps = gla_backward_table_copies() ? table_maps<E, KD>(p) : std::nullopt;
  const CUtensorMap s0_map = maps ? maps->first : CUtensorMap{}, h_map = maps ? maps->second : CUtensorMap{};
  auto launch_gradients = [&](auto kernel, const char* name) {
    allow_shared(kernel, grad_smem, "gla backward shared memory");
    timed_launch(stream, name, [&] {
      launch_maybe_programmatic(programmatic, kernel, grad_grid, dim3(kThreads), grad_smem, stream, name, p, s0_map,
                                h_map);
    });
  };
  // The default form has one without the split's carry-in for unsplit sequences: its code and
  // registers cost ≈ 2 % even where it adds nothing (NOTES.md v34b). It alone takes the table
  // copies, and with the held operands the forward's saved scores; the other forms are kept for
  // comparison (they form A themselves).
  constexpr const char* kDefaultName = "gla backward (quad walk, wide tail)";
  constexpr const char* kSavedScoresName = "gla backward (quad walk, wide tail, saved scores)";
  const bool held = maps && gla_backward_held_operands();
  const bool saved_scores = held && p.saved_chunk_scores && p.key_blocks == 1;
  if (quad_walk && gla_backward_tail() == GlaBackwardTail::wide) {
    if (p.segments > 1 && saved_scores)
      launch_gradients(gradient_kernel<E, KD, true, true, true, true, true, true, true>, kSavedScoresName);
    else if (saved_scores)
      launch_gradients(gradient_kernel<E, KD, true, true, true, false, true, true, true>, kSavedScoresName);
    else if (p.segments > 1 && held)
      launch_gradients(gradient_kernel<E, KD, true, true, true, true, true, true>, kDefaultName);
    else if (p.segments > 1 && maps)
      launch_gradients(gradient_kernel<E, KD, true, true, true, true, true>, kDefaultName);
    else if (p.segments > 1) launch_gradients(gradient_kernel<E, KD, true, true, true>, kDefaultName);
    else if (held) launch_gradients(gradient_kernel<E, KD, true, true, true, false, true, true>, kDefaultName);
    else if (maps) launch_gradients(gradient_kernel<E, KD, true, true, true, false, true>, kDefaultName);
    else launch_gradients(gradient_kernel<E, KD, true, true, true, false>, kDefaultName);
  } else if (quad_walk) {
    launch_gradients(gradient_kernel<E, KD, true, true>, "gla backward (tensor-core diagonal, quad walk)");
  } else if (gla_backward_diagonal() == GlaBackwardDiagonal::tensor_cores) {
    launch_gradients(gradient_kernel<E, KD, true, false>, "gla backward (tensor-core diagonal)");
  } else {
    launch_gradients(gradient_kernel<E, KD, false, false>, "gla backward");
  }
  if (p.key_blocks > 1) sum_key_blocks<E>(p, p.dv, stream);

  if (owned) check(cudaFreeAsync(scratch, stream), "gla backward workspace");
}

// K = 256: the K = 128 kernels over two key blocks (forward.cuh KeyBlock).
template <class E>
void backward_for_shape(const GlaParams& p) {
  if (p.K >= 128) {
    if (p.V % 128 == 0) launch_backward<E, 128, 128>(p);
    else launch_backward<E, 128, 64>(p);
  } else {
    if (p.V % 128 == 0) launch_backward<E, 64, 128>(p);
    else launch_backward<E, 64, 64>(p);
  }
}

}  // namespace seqmix::cuda::gla
