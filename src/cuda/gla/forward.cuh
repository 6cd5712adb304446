// Chunkwise GLA forward: one block per (value block, head, sequence) walks the sequence's
// chunks of 64 tokens in order, the [K, VB] state in registers (tensor-core accumulator
// fragments), and per chunk computes (b = cumulative log decay from the chunk's start,
// every factor below a product of e^{g} ≤ 1, so nothing overflows):
//   o_i   = scale·[(q_i ⊙ e^{b_i}) S_0 + Σ_{j≤i} A_ij v_j],   A_ij = Σ_c q_ic k_jc e^{b_ic − b_jc}
//   S_end = e^{b_last} ⊙ S_0 + Σ_j (k_j ⊙ e^{b_last − b_j})ᵀ v_j
// A is built from 16-token sub-chunks as in src/cpu/gla_chunk.cpp: a pair of sub-chunks
// J < I factors through the first token i0 of I, e^{b_i − b_j} = e^{b_i − b_{i0}}·e^{b_{i0} − b_j},
// both exponents ≤ 0, so the block is one tensor-core product; a sub-chunk against itself
// is summed exactly on the CUDA cores with running products of e^{g} (diagonal_scores), or
// (the outputs pass's default, params.hpp GlaForwardDiagonal) factored the same way one
// level down through 4-token quads on the tensor cores, only the pairs inside a quad on the
// CUDA cores (quad_*). Where a chunk's decays allow (bf16, GlaParams::factored_chunks), the
// outputs pass factors the whole chunk through its first token instead: A is one product
// (factored_operands, factored_scores).
// The next chunk's inputs stream into shared memory (cp.async) while this one multiplies.
#pragma once

#include <type_traits>

#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/proxy.cuh"
#include "cuda/common/runtime.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/gla/mma.cuh"
#include "cuda/gla/params.hpp"
#include "cuda/gla/profile.hpp"

namespace seqmix::cuda::gla {

constexpr int kThreads = 256;  // 8 warps
constexpr int kChunk = 64, kSub = 16;
constexpr int kScoreTile = kChunk * kChunk;  // a chunk's scores A in GlaParams::saved_chunk_scores
constexpr int kPairRows = 96;  // key rows of the sub-chunk pairs: 16 (I=1) + 32 (I=2) + 48 (I=3)

// First row of sub-chunk I's keys (all sub-chunks J < I) in Smem::k_pair.
__host__ __device__ constexpr int pair_row0(int I) { return kSub * (I - 1) * I / 2; }

template <class E, int KD, int VB>
struct Smem {
  using Element = E;
  static constexpr int kKeys = KD, kValues = VB;
  static constexpr int PK = KD + 8, PV = VB + 8, PA = kChunk + 8;  // row pitches
  E q[kChunk * PK], k[kChunk * PK], g[kChunk * PK];  // this chunk's raw inputs
  E v[2][kChunk * PV];                               // values, double-buffered
  E q_sub[kChunk * PK];    // q_i ⊙ e^{b_i − b_{i0}}   (i0: first token of i's sub-chunk)
  E q_start[kChunk * PK];  // q_i ⊙ e^{b_i}
  E k_end[kChunk * PK];    // k_j ⊙ e^{b_last − b_j}
  E k_pair[kPairRows * PK];  // per sub-chunk I ≥ 1: k_j ⊙ e^{b_{i0(I)} − b_j} for j < i0(I)
  __half decay[kChunk * PK];  // e^{g}: fp16 keeps 11 bits; values under 6e-8 matter to no sum
  E state[KD * PV];           // S_0 of this chunk, as the product's operand
  E scores[kChunk * PA];      // A, zero above the diagonal
  float decay_all[KD];        // e^{b_last}

  // The tensor-core diagonal (quad_* below) needs no e^{g} tile: its bytes hold the key
  // operands of the quad pairs instead (quad_key_row).
  __device__ E* quad_keys() { return reinterpret_cast<E*>(decay); }
  __device__ const E* quad_keys() const { return reinterpret_cast<const E*>(decay); }
  // A chunk factored whole (factored_operands) has neither: the same bytes hold k ⊙ 2^{−b}.
  __device__ E* inverse_keys() { return quad_keys(); }
  __device__ const E* inverse_keys() const { return quad_keys(); }
};

// The tensor-core diagonal cuts each 16-token sub-chunk into four 4-token quads. A pair of
// quads P < Q of one sub-chunk factors through the first token p of Q,
// e^{b_i − b_j} = e^{b_i − b_p}·e^{b_p − b_j}, both exponents ≤ 0, so the whole pair block is
// one product (q ⊙ e^{b − b_p})·(k ⊙ e^{b_p − b})ᵀ, as the sub-chunk pairs factor through
// their sub-chunk's first token. The walkers write the query side over the raw q (each
// row's own quad start) and the key side for every target quad Q of sub-chunk I — keys
// jj < 4Q of I, 24 rows a sub-chunk — into rows of the e^{g} tile (Q = 3, Q = 1) and over
// the raw k (Q = 2): the pairs inside a quad are summed from the raw q, k, g before that.
template <int kQuad, class S>
__device__ __forceinline__ auto quad_key_row(S& s, int I, int jj) {
  constexpr int PK = S::PK;
  static_assert(kQuad >= 1 && kQuad <= 3, "target quads 1..3");
  if constexpr (kQuad == 2) return s.k + (kSub * I + jj) * PK;
  else if constexpr (kQuad == 3) return s.quad_keys() + (kSub * I + jj) * PK;
  else return s.quad_keys() + (kSub * I + 12 + jj) * PK;
}

struct Span {
  int64_t batch, start, length;
};

__device__ inline Span sequence_span(const GlaParams& p, int64_t n) {
  if (!p.cu_seqlens) return {n, 0, p.T};
  int64_t a, b;
  if (p.cu_seqlens_int64) {
    a = static_cast<const int64_t*>(p.cu_seqlens)[n], b = static_cast<const int64_t*>(p.cu_seqlens)[n + 1];
  } else {
    a = static_cast<const int32_t*>(p.cu_seqlens)[n], b = static_cast<const int32_t*>(p.cu_seqlens)[n + 1];
  }
  return {0, a, b - a};
}

// Thread tid's 16-byte pieces in load_rows_rolled, kVectors a row: its first row and its
// column; the rows then step by kThreads / kVectors. (The gradient kernel's carry-in works on
// the pieces each thread copied, so it takes them from here too.)
template <int kVectors>
struct RolledPieces {
  static constexpr int kRowStep = kThreads / kVectors;
  static_assert(kThreads % kVectors == 0, "a thread's pieces share their column");
  int row, col;
  __device__ explicit RolledPieces(int tid) : row(tid / kVectors), col(tid % kVectors * 8) {}
};

// Rows [0, ROWS) × cols [0, COLS) of a row-major global array (row stride `stride`) into a
// shared tile of pitch PITCH, rows past `valid` zero-filled, in one rolled loop whose row and
// addresses are stepped, not formed again a piece (the backward's gradient kernel, whose code
// outgrows the instruction caches: NOTES.md v11, v31).
template <int ROWS, int COLS, int PITCH, class E>
__device__ __forceinline__ void load_rows_rolled(E* dst, const E* src, int64_t stride, int valid, int tid) {
  using Pieces = RolledPieces<COLS / 8>;
  constexpr int kRowStep = Pieces::kRowStep;
  const Pieces pieces(tid);
  const int c = pieces.col;
  int r = pieces.row;
  E* to = dst + r * PITCH + c;
  const E* from = src + r * stride + c;
  const int64_t from_step = kRowStep * stride;
#pragma unroll 1
  for (; r < ROWS; r += kRowStep, to += kRowStep * PITCH, from += from_step)
    copy16_async(to, r < valid ? from : src + c, r < valid);
}

// Rows [0, 64) × cols [0, COLS) of a chunk into a shared tile of pitch PITCH; rows past
// `valid` are zero-filled (a zero key or value adds nothing, a zero decay keeps e^{g} = 1).
// kRolled: load_rows_rolled; otherwise the same pieces unrolled, the source stepped by a row
// step a piece and the destinations constant offsets from the first (forming each piece's row
// and column from its index took a signed division and ~6 integer instructions a piece:
// NOTES.md v56).
template <int COLS, int PITCH, bool kRolled = false, class E>
__device__ __forceinline__ void load_chunk(E* dst, const E* row0, int64_t stride_time, int valid, int tid) {
  if constexpr (kRolled) {
    load_rows_rolled<kChunk, COLS, PITCH>(dst, row0, stride_time, valid, tid);
  } else {
    using Pieces = RolledPieces<COLS / 8>;
    constexpr int kRowStep = Pieces::kRowStep;
    static_assert(kChunk % kRowStep == 0, "whole row steps a chunk");
    const Pieces pieces(tid);
    E* const to = dst + pieces.row * PITCH + pieces.col;
    const E* const first_row = row0 + pieces.col;
    const E* from = first_row + pieces.row * stride_time;
    const int64_t step = kRowStep * stride_time;
#pragma unroll
    for (int j = 0; j < kChunk / kRowStep; ++j, from += step) {
      const bool ok = pieces.row + j * kRowStep < valid;
      copy16_async(to + j * kRowStep * PITCH, ok ? from : first_row, ok);
    }
  }
}

// Chunk `chunk`'s first row of an operand, from the block's first row of it (which the kernels
// form once a block).
template <class E>
__device__ __forceinline__ const E* chunk_rows(const E* rows, const GlaTokens& x, int64_t chunk) {
  return rows + chunk * kChunk * x.stride_time;
}

// The decayed operands of one chunk. Thread (channel c, role): role 0 walks the tokens
// forward (q_sub, q_start, e^{g}, e^{b_last}), role 1 backward (k_end, k_pair); both take
// e^{g} from g and multiply, so each factor is a product of values ≤ 1.
// kOutput false (the state passes): only what the state needs, k_end and e^{b_last}.
// kQuads (the outputs pass with the tensor-core diagonal): no e^{g} tile; instead the
// quads' operands (quad_key_row), the query side in place over q.
// S: any shared layout with these members and pitches (Smem, the backward's, or the state
// passes' StatePassView).
// Each 16-token sub-chunk's g, q or k are read into registers before any of its products
// is stored: the stores may alias the loads as far as the compiler can tell (StatePassView's
// pointers; kQuads writes over q in place), and loads left behind stores would wait one by one.
// kRolled: the key side's walk rolled over its four sub-chunks (a quarter of the code).
// Measured on the H100 (NOTES.md, v7): rolled, the backward's gradient kernel took 0.76× the
// time (its walkers 11.1 k → 4.9 k cycles a block) and the state passes' walkers 4.35 k →
// 3.5 k a step, while the forward's outputs pass took 1.035× (its diagonal phase grew): so
// every caller rolls but the outputs pass.
template <bool kOutput, class S, bool kQuads = false, bool kRolled = true>
__device__ __forceinline__ void decay_operands(S& s, int tid) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK;
  if (tid >= 2 * KD) return;
  const int c = tid % KD;
  if (tid < KD) {
    float from_start = 1.0f, from_sub = 1.0f, from_quad = 1.0f;
#pragma unroll 1
    for (int t0 = 0; t0 < kChunk; t0 += kSub) {
      float e[kSub], q[kSub];
#pragma unroll
      for (int tt = 0; tt < kSub; ++tt) {
        const int at = (t0 + tt) * PK + c;
        e[tt] = exp_fast(to_float(s.g[at]));
        if constexpr (kOutput) q[tt] = to_float(s.q[at]);
      }
#pragma unroll
      for (int tt = 0; tt < kSub; ++tt) {
        const int at = (t0 + tt) * PK + c;
        from_start *= e[tt];
        if constexpr (kOutput) {
          from_sub = tt == 0 ? 1.0f : from_sub * e[tt];
          s.q_sub[at] = from_float<E>(q[tt] * from_sub);
          s.q_start[at] = from_float<E>(q[tt] * from_start);
          if constexpr (kQuads) {  // q_i ⊙ e^{b_i − b_p}, p the first token of i's quad
            from_quad = tt % 4 == 0 ? 1.0f : from_quad * e[tt];
            s.q[at] = from_float<E>(q[tt] * from_quad);
          } else {
            s.decay[at] = __float2half_rn(e[tt]);
          }
        }
      }
    }
    s.decay_all[c] = from_start;
  } else {
    float to_end = 1.0f, to_sub[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // to_sub[I]: Π_{s=j+1..i0(I)} e^{g_s}
    float to_quad[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // within the sub-chunk: Π_{s=j+1..4Q} e^{g_s}
    // The key side's sub-chunks, latest first. The stores that depend on the sub-chunk are
    // predicated on it, so one 16-token body serves all four (kRolled) or, unrolled, each
    // instance loses its dead stores.
    auto walk_sub = [&](int sub) {
      float e[kSub], k[kSub];
#pragma unroll
      for (int tt = kSub - 1; tt >= 0; --tt) {
        const int at = (sub * kSub + tt) * PK + c;
        e[tt] = exp_fast(to_float(s.g[at]));
        k[tt] = to_float(s.k[at]);
      }
#pragma unroll
      for (int tt = kSub - 1; tt >= 0; --tt) {
        const int t = sub * kSub + tt, at = t * PK + c;
        s.k_end[at] = from_float<E>(k[tt] * to_end);
        to_end *= e[tt];
        if constexpr (kOutput) {
#pragma unroll
          for (int I = 1; I < 4; ++I) {  // the later sub-chunks I > sub
            if (I <= sub) continue;
            s.k_pair[(pair_row0(I) + t) * PK + c] = from_float<E>(k[tt] * to_sub[I]);
            to_sub[I] *= e[tt];
          }
          if (tt == 0) {
#pragma unroll
            for (int I = 1; I < 4; ++I)
              if (I == sub) to_sub[I] = e[tt];
          }
        }
        if constexpr (kOutput && kQuads) {
#pragma unroll
          for (int Q = 1; Q < 4; ++Q) {
            if (4 * Q <= tt) continue;
            const E x = from_float<E>(k[tt] * to_quad[Q]);
            if (Q == 1) quad_key_row<1>(s, sub, tt)[c] = x;
            else if (Q == 2) quad_key_row<2>(s, sub, tt)[c] = x;
            else quad_key_row<3>(s, sub, tt)[c] = x;
            to_quad[Q] *= e[tt];
          }
          if (tt % 4 == 0 && tt > 0) to_quad[tt / 4] = e[tt];
        }
      }
    };
    if constexpr (kRolled) {
#pragma unroll 1
      for (int sub = 3; sub >= 0; --sub) walk_sub(sub);
    } else {
#pragma unroll
      for (int sub = 3; sub >= 0; --sub) walk_sub(sub);
    }
  }
}

// Two adjacent 16-bit values as floats (4-byte shared load), and two floats rounded into one.
template <class E>
__device__ __forceinline__ float2 load2(const E* p) {
  const uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
  const E* v = reinterpret_cast<const E*>(&raw);
  return make_float2(to_float(v[0]), to_float(v[1]));
}
template <class E>
__device__ __forceinline__ void store2(E* p, float2 x) {
  *reinterpret_cast<uint32_t*>(p) = pack2<E>(x.x, x.y);
}
__device__ __forceinline__ float2 mul2(float2 a, float2 b) { return make_float2(a.x * b.x, a.y * b.y); }
__device__ __forceinline__ float2 exp_each(float2 g) { return make_float2(exp_fast(g.x), exp_fast(g.y)); }

// Σ g over the chunk's first half for channels c, c + 1 (two chains of adds), which the walkers of
// the second half start from.
template <class S>
__device__ __forceinline__ float2 first_half_sum(const S& s, int c) {
  constexpr int PK = S::PK, kHalf = kChunk / 2;
  float2 sum[2] = {make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)};
#pragma unroll 8
  for (int t = 0; t < kHalf; ++t) {
    const float2 g = load2(s.g + t * PK + c);
    sum[t % 2].x += g.x, sum[t % 2].y += g.y;
  }
  return make_float2(sum[0].x + sum[1].x, sum[0].y + sum[1].y);
}

// decay_operands<true, S, kQuads = true> with full-width shared accesses (params.hpp
// GlaForwardWalkers::paired): thread (channel pair cp, half, role) walks channels 2cp, 2cp + 1
// (4-byte loads and stores: a warp, 32 pairs of one half, reads or writes one 128-byte row)
// over half the chunk, sub-chunks 2·half and 2·half + 1. So 2·KD threads walk, as with
// decay_operands, with chains of 32 tokens instead of 64. The factors that cross the halves
// each half forms itself from g in log space before its walk: the query side's second half
// e^{Σ_{t<32} g_t}; the key side's first half e^{Σ_{32..63} g} (k_end), e^{Σ_{32..48} g} and
// e^{g_32} (k_pair of sub-chunks 3 and 2). Every (channel, token) cell is read and written by
// one thread only, so the in-place stores (q, and the quad keys over k) race with nothing.
template <class S>
__device__ __forceinline__ void paired_decay_operands(S& s, int tid) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, kPairs = KD / 2, kHalf = kChunk / 2, kBatch = 8;
  if (tid >= 2 * KD) return;
  const int u = tid % KD, cp = u % kPairs, half = u / kPairs, c = 2 * cp;
  const float2 one = make_float2(1.0f, 1.0f), zero = make_float2(0.0f, 0.0f);
  if (tid < KD) {  // query side: q_sub, q_start, the quad q over q, e^{b_last}
    // One running product a token, within the quad (quad = e^{b_i − b_p}); the three operands
    // are that times the factors from the quad's start p to the sub-chunk's start i0
    // (quad_base = e^{b_p − b_{i0}}) and from the chunk's start (sub_base = e^{b_{i0}}), each
    // formed once a quad or a sub-chunk: q ⊙ e^{b_i − b_p}, then ⊙ quad_base, then ⊙ sub_base.
    float2 before = one, sub_base = one, quad_base = one, quad = one;  // before: e^{b_{i0 − 1}}
    if (half == 1) before = exp_each(first_half_sum(s, c));
#pragma unroll 1
    for (int local = 0; local < 2; ++local) {  // rolled over the two sub-chunks
#pragma unroll
      for (int b = 0; b < kSub / kBatch; ++b) {
        const int t0 = (2 * half + local) * kSub + b * kBatch;
        float2 e[kBatch], q[kBatch];
#pragma unroll
        for (int tt = 0; tt < kBatch; ++tt) {
          const int at = (t0 + tt) * PK + c;
          e[tt] = exp_each(load2(s.g + at));
          q[tt] = load2(s.q + at);
        }
#pragma unroll
        for (int tt = 0; tt < kBatch; ++tt) {
          const int in_sub = b * kBatch + tt, at = (t0 + tt) * PK + c;
          if (in_sub == 0) sub_base = mul2(before, e[tt]), quad_base = one, quad = one;
          else if (in_sub % 4 == 0) quad_base = mul2(quad_base, mul2(quad, e[tt])), quad = one;
          else quad = mul2(quad, e[tt]);
          const float2 in_quad = mul2(q[tt], quad), in_sub_chunk = mul2(in_quad, quad_base);
          store2(s.q + at, in_quad);
          store2(s.q_sub + at, in_sub_chunk);
          store2(s.q_start + at, mul2(in_sub_chunk, sub_base));
        }
      }
      before = mul2(sub_base, mul2(quad_base, quad));  // e^{b} at the sub-chunk's last token
    }
    if (half == 1) s.decay_all[c] = before.x, s.decay_all[c + 1] = before.y;
    return;
  }
  // Key side: k_end, k_pair, the quad keys; sub-chunks latest first. One running product a
  // token within the sub-chunk (run = e^{b_last(sub) − b_j}, last(sub) its last token); k_end and
  // each k_pair are k ⊙ run times a factor from last(sub) on (to_end = e^{b_63 − b_last(sub)},
  // to_sub[I] = e^{b_{i0(I)} − b_last(sub)}), moved to the sub-chunk before once it is walked.
  float2 to_end = one, to_sub[4] = {zero, zero, zero, zero}, to_quad[4] = {zero, zero, zero, zero};
  if (half == 0) {  // the factors from token 31 on
    float2 sum = zero, through_48 = zero, at_32 = zero;
#pragma unroll 8
    for (int t = kHalf; t < kChunk; ++t) {
      const float2 g = load2(s.g + t * PK + c);
      sum.x += g.x, sum.y += g.y;
      if (t == kHalf) at_32 = sum;
      if (t == 3 * kSub) through_48 = sum;
    }
    to_end = exp_each(sum), to_sub[3] = exp_each(through_48), to_sub[2] = exp_each(at_32);
  }
#pragma unroll 1
  for (int local = 1; local >= 0; --local) {  // rolled over the two sub-chunks
    const int sub = 2 * half + local;
    float2 run = one, first = one;  // first: e^{g} of the sub-chunk's first token
#pragma unroll
    for (int b = kSub / kBatch - 1; b >= 0; --b) {
      const int t0 = sub * kSub + b * kBatch;
      float2 e[kBatch], k[kBatch];
#pragma unroll
      for (int tt = kBatch - 1; tt >= 0; --tt) {
        const int at = (t0 + tt) * PK + c;
        e[tt] = exp_each(load2(s.g + at));
        k[tt] = load2(s.k + at);
      }
#pragma unroll
      for (int tt = kBatch - 1; tt >= 0; --tt) {
        const int t = t0 + tt, in_sub = b * kBatch + tt, at = t * PK + c;
        const float2 decayed = mul2(k[tt], run);
        store2(s.k_end + at, mul2(decayed, to_end));
#pragma unroll
        for (int I = 1; I < 4; ++I)  // the later sub-chunks I > sub (predicated on the half)
          if (I > sub) store2(s.k_pair + (pair_row0(I) + t) * PK + c, mul2(decayed, to_sub[I]));
        run = mul2(run, e[tt]);
        if (in_sub == 0) first = e[tt];
#pragma unroll
        for (int Q = 1; Q < 4; ++Q) {
          if (4 * Q <= in_sub) continue;
          const float2 x = mul2(k[tt], to_quad[Q]);
          if (Q == 1) store2(quad_key_row<1>(s, sub, in_sub) + c, x);
          else if (Q == 2) store2(quad_key_row<2>(s, sub, in_sub) + c, x);
          else store2(quad_key_row<3>(s, sub, in_sub) + c, x);
          to_quad[Q] = mul2(to_quad[Q], e[tt]);
        }
        if (in_sub % 4 == 0 && in_sub > 0) to_quad[in_sub / 4] = e[tt];
      }
    }
    // run = e^{b_last(sub) − b_{i0(sub) − 1}}: the factors from the previous sub-chunk's last token.
    to_end = mul2(to_end, run);
#pragma unroll
    for (int I = 1; I < 4; ++I) to_sub[I] = I > sub ? mul2(to_sub[I], run) : I == sub ? first : to_sub[I];
  }
}

// Four consecutive 16-bit values as floats (8-byte shared load).
template <class E>
__device__ __forceinline__ float4 load4(const E* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const E* v = reinterpret_cast<const E*>(&raw);
  return make_float4(to_float(v[0]), to_float(v[1]), to_float(v[2]), to_float(v[3]));
}

// The 8-row block of A's diagonal work that warp w takes. A block's cost grows with its
// last row (the second half of a sub-chunk has twice the token pairs of the first), and
// warps w and w + 4 share a scheduler, so warps 4–7 take the blocks of the other parity:
// each scheduler gets one light and one heavy block.
__device__ __forceinline__ int row_block(int warp) { return warp < 4 ? warp : warp ^ 1; }

// The diagonal sub-chunks of A: A_ij for j ≤ i in the same 16 tokens, exactly, on the CUDA
// cores. Lane (row i, channel group cg) of warp w: row 8·row_block(w) + lane/4; it sums
// channels 16m + 4cg.. for every j of its sub-chunk at once (16 independent accumulators),
// the weight e^{b_i − b_j} a running product of e^{g} from j = i down; the 4 groups of a row
// then combine by shuffles.
// diagonal_sums leaves lane (row i, group cg) with A_{i, i0+jj} for jj = 4·m + cg, m = 0..3
// (zero above the diagonal); store_diagonal writes them into s.scores. Split so that a
// caller can sum before the scores tile is free to be written.
struct DiagonalSums {
  float value[4];
};

template <class S>
__device__ __forceinline__ DiagonalSums diagonal_sums(const S& s, int warp, int lane) {
  constexpr int KD = S::kKeys, PK = S::PK;
  const int rb = row_block(warp), i = rb * 8 + lane / 4, cg = lane % 4, i0 = i & ~(kSub - 1), last = i - i0;
  const int warp_last = (rb % 2) * 8 + 7;  // the largest `last` in this warp
  float acc[kSub] = {};
#pragma unroll 2
  for (int m = 0; m < KD / 16; ++m) {
    const int c = 16 * m + 4 * cg;
    const float4 q = load4(s.q + i * PK + c);
    // u = q_i ⊙ e^{b_i − b_j}: the weight folded into q (one multiply a channel less per j).
    float u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int jj = kSub - 1; jj >= 0; --jj) {
      if (jj > warp_last) continue;  // uniform across the warp
      if (jj <= last) {
        const float4 k = load4(s.k + (i0 + jj) * PK + c);
        acc[jj] += u[0] * k.x + u[1] * k.y + u[2] * k.z + u[3] * k.w;
        const float4 e = load4(s.decay + (i0 + jj) * PK + c);
        u[0] *= e.x, u[1] *= e.y, u[2] *= e.z, u[3] *= e.w;
      }
    }
  }
  DiagonalSums sums;
#pragma unroll
  for (int jj = 0; jj < kSub; ++jj) {
    acc[jj] += __shfl_xor_sync(0xffffffffu, acc[jj], 1);
    acc[jj] += __shfl_xor_sync(0xffffffffu, acc[jj], 2);
    if (jj % 4 == cg) sums.value[jj / 4] = jj <= last ? acc[jj] : 0.0f;
  }
  return sums;
}

template <class S>
__device__ __forceinline__ void store_diagonal(S& s, const DiagonalSums& sums, int warp, int lane) {
  using E = typename S::Element;
  constexpr int PA = S::PA;
  const int i = row_block(warp) * 8 + lane / 4, cg = lane % 4, i0 = i & ~(kSub - 1);
#pragma unroll
  for (int m = 0; m < 4; ++m) s.scores[i * PA + i0 + 4 * m + cg] = from_float<E>(sums.value[m]);
}

template <class S>
__device__ __forceinline__ void diagonal_scores(S& s, int warp, int lane) {
  store_diagonal(s, diagonal_sums(s, warp, lane), warp, lane);
}

// The pairs inside each 4-token quad (the tensor-core diagonal's CUDA-core part), exactly,
// from the raw q, k and g: 16 threads a quad (a half warp), each over KD/16 channels, ten
// sums (i, j ≤ i) with the weight e^{b_i − b_j} a running product of e^{g} from j = i down,
// then combined across the half warp. Entries above the diagonal stay as set (zero).
template <class S>
__device__ __forceinline__ void quad_inner_scores(S& s, int tid) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, PA = S::PA, kPerThread = KD / 16;
  static_assert(kPerThread % 4 == 0, "four channels a load");
  const int t0 = 4 * (tid / 16), slice = tid % 16;
  float acc[10] = {};  // pair (i, j), j ≤ i: index i(i + 1)/2 + j
#pragma unroll
  for (int part = 0; part < kPerThread; part += 4) {
    const int c = slice * kPerThread + part;
    float4 q[4], k[4], e[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      q[r] = load4(s.q + (t0 + r) * PK + c);
      k[r] = load4(s.k + (t0 + r) * PK + c);
      if (r == 0) continue;  // e^{g} of the quad's first token weighs no pair inside it
      const float4 g = load4(s.g + (t0 + r) * PK + c);
      e[r] = make_float4(exp_fast(g.x), exp_fast(g.y), exp_fast(g.z), exp_fast(g.w));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float4 u = q[i];
#pragma unroll
      for (int j = i; j >= 0; --j) {
        acc[i * (i + 1) / 2 + j] += u.x * k[j].x + u.y * k[j].y + u.z * k[j].z + u.w * k[j].w;
        if (j > 0) u.x *= e[j].x, u.y *= e[j].y, u.z *= e[j].z, u.w *= e[j].w;
      }
    }
  }
#pragma unroll
  for (int n = 0; n < 10; ++n)
#pragma unroll
    for (int offset = 1; offset < 16; offset *= 2) acc[n] += __shfl_xor_sync(0xffffffffu, acc[n], offset);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j <= i; ++j)
      if (slice == i * (i + 1) / 2 + j) s.scores[(t0 + i) * PA + t0 + j] = from_float<E>(acc[i * (i + 1) / 2 + j]);
}

// The pairs of different quads of each sub-chunk on the tensor cores (see quad_key_row).
// For target quad Q, the 16 rows are quad Q of the four sub-chunks (row r: token
// 16·(r/4) + 4Q + r%4) and the columns the key operands of all four (column n: key n % 4Q
// of sub-chunk n / 4Q), so only the 4 × 4Q block of each sub-chunk against itself is kept;
// ldmatrix gathers the rows by address. Q = 1, 2, 3 take 1, 2, 3 column blocks of 16:
// warps 0..5 one each.
template <class S>
__device__ __forceinline__ void quad_pair_scores(S& s, int warp, int lane) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, PA = S::PA;
  if (warp >= 6) return;
  const int Q = warp < 1 ? 1 : warp < 3 ? 2 : 3, n0 = kSub * (warp - (Q - 1) * Q / 2), width = 4 * Q;
  const int ra = (lane % 8) + 8 * ((lane / 8) % 2);  // the A row this lane addresses
  const E* a_row = s.q + (kSub * (ra / 4) + width + ra % 4) * PK + 8 * (lane / 16);
  // The B column (key row) this lane addresses: key nb_key of sub-chunk nb_sub. The width
  // differs by warp, so the quotient comes from comparisons (nb < 4·width), not a division
  // by a run-time divisor (~20 instructions on the phase's path).
  const int nb = n0 + (lane % 8) + 8 * (lane / 16);
  const int nb_sub = (nb >= width) + (nb >= 2 * width) + (nb >= 3 * width), nb_key = nb - nb_sub * width;
  const E* b_row = (Q == 1   ? quad_key_row<1>(s, nb_sub, nb_key)
                    : Q == 2 ? quad_key_row<2>(s, nb_sub, nb_key)
                             : quad_key_row<3>(s, nb_sub, nb_key)) +
                   8 * ((lane / 8) % 2);
  float acc[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    uint32_t a[4], b[4];
    ldmatrix_x4(a, a_row + 16 * kk);
    ldmatrix_x4(b, b_row + 16 * kk);
    mma_pair<E>(acc[0], acc[1], a, b);
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int r = lane / 4 + 8 * (x / 2), n = n0 + 8 * nt + 2 * (lane % 4) + x % 2, I = r / 4;
      const int key = n - I * width;  // column n is key `key` of sub-chunk I when 0 ≤ key < width
      if (key >= 0 && key < width)
        s.scores[(kSub * I + width + r % 4) * PA + kSub * I + key] = from_float<E>(acc[nt][x]);
    }
}

// The six sub-chunk pairs J < I of A: warps 0..5, one 16×16 tensor-core block each,
// (q ⊙ e^{b_i − b_{i0}}) · (k ⊙ e^{b_{i0} − b_j})ᵀ.
template <class S>
__device__ __forceinline__ void pair_scores(S& s, int warp, int lane) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, PA = S::PA;
  if (warp >= 6) return;
  const int I = warp < 1 ? 1 : warp < 3 ? 2 : 3, J = warp - (I - 1) * I / 2;  // (1,0) (2,0) (2,1) (3,0)…
  float acc[2][4] = {};
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    uint32_t a[4], b[4];
    load_a(a, s.q_sub, PK, kSub * I, 16 * kk, lane);
    load_b_from_rows(b, s.k_pair, PK, pair_row0(I) + kSub * J, 16 * kk, lane);
    mma_pair<E>(acc[0], acc[1], a, b);
  }
  const int row = kSub * I + lane / 4, col = kSub * J + 2 * (lane % 4);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    *reinterpret_cast<uint32_t*>(&s.scores[row * PA + col + 8 * nt]) = pack2<E>(acc[nt][0], acc[nt][1]);
    *reinterpret_cast<uint32_t*>(&s.scores[(row + 8) * PA + col + 8 * nt]) = pack2<E>(acc[nt][2], acc[nt][3]);
  }
}

// A chunk factored whole (GlaParams::factored_chunks). With b the running sum of g·log2 e from
// the chunk's start, e^{b_i − b_j} = 2^{b_i}·2^{−b_j} for every pair, so
//   A     = (q ⊙ 2^{b})·(k ⊙ 2^{−b})ᵀ with the entries j > i set to zero: one product;
//   S_end = 2^{b_last} ⊙ (S_0 + (k ⊙ 2^{−b})ᵀ v): the decay applied after the update.
// These factors are not ≤ 1, so a chunk is factored only if every |b| ≤ kFactoredRange and every
// key operand stays below kFactoredCeiling: then q ⊙ 2^{b} stays a normal number for any
// |q| > 2^{−62} and no operand or kept product overflows; the entries above the diagonal (up to
// 2^{2·64} times q·k) are dropped by a select, so even an infinity there never reaches A. The
// block votes after the walk; a chunk that fails takes the sub-chunks and quads (NOTES.md v61).
constexpr float kFactoredRange = 64.0f;
constexpr float kFactoredCeiling = 0x1p100f;
constexpr int kFactoredPause = 7;  // chunks not tried after one voted out (the kernel's walk)

// The factored operands: thread (side, half, channel pair cp) walks channels 2cp, 2cp + 1 over its
// half of the chunk; the query side writes q ⊙ 2^{b} into q_start (and 2^{b_last} into decay_all),
// the key side k ⊙ 2^{−b} into the inverse keys. The second half first sums the first half's g.
// The key side runs the negated sums: fma(g, −r, −b) = −fma(g, r, b) and (−r)·x = −(r·x) exactly,
// so both sides hold the same |b| token by token. Returns whether this thread's operands leave
// the range above: every operand is checked, |b| at every 8th token (with g ≤ 0, DESIGN.md's
// contract, |b| only grows along the walk). A NaN in q, k or g does not vote the chunk out (the
// peaks are fmaxf's, which drop NaN); either form then carries it into the same outputs.
// kGradients (the backward's gradient kernel, backward.cuh factored_gradients): each operand
// also leaves what its rounding lost, y − bf16(y) rounded again, in s.query_low() or
// s.key_low() (so hi + lo carries 16 bits), the query side writes the factors 2^{b} as floats into
// s.factors(), and e^{b_last} stays the walkers' own.
template <class S, bool kGradients = false>
__device__ __forceinline__ bool factored_operands(S& s, int tid) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, kPairs = KD / 2, kHalf = kChunk / 2, kBatch = 16;
  if (tid >= 2 * KD) return false;
  // The key side's halves the other way round: the second half (which sums the first's g first)
  // then shares each scheduler (warps w, w + 4) with a first half.
  const bool query = tid < KD;
  const int u = tid % KD, half = query ? u / kPairs : 1 - u / kPairs, c = 2 * (u % kPairs);
  const float rate = query ? kLog2e : -kLog2e;
  float2 b = make_float2(0.0f, 0.0f);
  if (half == 1) {
    const float2 sum = first_half_sum(s, c);
    b = make_float2(sum.x * rate, sum.y * rate);
  }
  const E* const from = query ? s.q : s.k;
  E* const to = query ? s.q_start : s.inverse_keys();
  float peak_exponent = 0.0f, peak_operand = 0.0f;
#pragma unroll 1
  for (int t0 = half * kHalf; t0 < (half + 1) * kHalf; t0 += kBatch) {
    float2 g[kBatch], x[kBatch];
#pragma unroll
    for (int tt = 0; tt < kBatch; ++tt) {
      g[tt] = load2(s.g + (t0 + tt) * PK + c);
      x[tt] = load2(from + (t0 + tt) * PK + c);
    }
#pragma unroll
    for (int tt = 0; tt < kBatch; ++tt) {
      b.x = fmaf(g[tt].x, rate, b.x), b.y = fmaf(g[tt].y, rate, b.y);
      const float2 y = make_float2(x[tt].x * ex2_fast(b.x), x[tt].y * ex2_fast(b.y));
      store2(to + (t0 + tt) * PK + c, y);
      if constexpr (kGradients) {
        const float2 factor = make_float2(ex2_fast(b.x), ex2_fast(b.y));  // the same exponentials (one MUFU each)
        const float2 high = make_float2(to_float(from_float<E>(y.x)), to_float(from_float<E>(y.y)));
        store2((query ? s.query_low() : s.key_low()) + (t0 + tt) * PK + c, make_float2(y.x - high.x, y.y - high.y));
        if (query) *reinterpret_cast<float2*>(s.factors() + (t0 + tt) * S::PF + c) = factor;
      }
      peak_operand = fmaxf(peak_operand, fmaxf(fabsf(y.x), fabsf(y.y)));
      if (tt % 8 == 7) peak_exponent = fmaxf(peak_exponent, fmaxf(fabsf(b.x), fabsf(b.y)));
    }
  }
  if (!kGradients && query && half == 1) s.decay_all[c] = ex2_fast(b.x), s.decay_all[c + 1] = ex2_fast(b.y);
  return !(peak_exponent <= kFactoredRange && peak_operand < kFactoredCeiling);
}

// Tiles [t0, t0 + kTiles) of 16×8 of row block I of A for a chunk factored whole, the entries
// j > i set to zero. The count is a constant, so the products need no branch (a run-time count
// put a branch and a warp sync around each of them).
template <int kTiles, class S>
__device__ __forceinline__ void factored_row_tiles(S& s, int I, int t0, int lane) {
  using E = typename S::Element;
  constexpr int KD = S::kKeys, PK = S::PK, PA = S::PA, kPairs = (kTiles + 1) / 2;
  float acc[kTiles][4] = {};
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    uint32_t a[4];
    load_a(a, s.q_start, PK, kSub * I, 16 * kk, lane);
#pragma unroll
    for (int pair = 0; pair < kPairs; ++pair) {
      uint32_t b[4];  // rows up to 8·(t0 + 2·pair) + 15 ≤ 63: inside the tile
      load_b_from_rows(b, s.inverse_keys(), PK, 8 * (t0 + 2 * pair), 16 * kk, lane);
      mma<E>(acc[2 * pair], a, b[0], b[1]);
      if (2 * pair + 1 < kTiles) mma<E>(acc[2 * pair + 1], a, b[2], b[3]);
    }
  }
  const int row = kSub * I + lane / 4;
  auto kept = [](int r, int col, float x) { return col <= r ? x : 0.0f; };
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
    const int col = 8 * (t0 + n) + 2 * (lane % 4);
    *reinterpret_cast<uint32_t*>(&s.scores[row * PA + col]) =
        pack2<E>(kept(row, col, acc[n][0]), kept(row, col + 1, acc[n][1]));
    *reinterpret_cast<uint32_t*>(&s.scores[(row + 8) * PA + col]) =
        pack2<E>(kept(row + 8, col, acc[n][2]), kept(row + 8, col + 1, acc[n][3]));
  }
}

// A of a chunk factored whole. Row block I (16 rows) has 2(I + 1) column tiles of 8 on or left
// of the diagonal; two warps share a row block, half its tiles each, and the two warps of each
// scheduler (w, w + 4) take row blocks I and 3 − I: 5 tiles a scheduler.
template <class S>
__device__ __forceinline__ void factored_scores(S& s, int warp, int lane) {
  const int I = warp < 4 ? warp / 2 : 3 - (warp - 4) / 2, t0 = (warp % 2) * (I + 1);
  switch (I) {
    case 0: factored_row_tiles<1>(s, 0, t0, lane); break;
    case 1: factored_row_tiles<2>(s, 1, t0, lane); break;
    case 2: factored_row_tiles<3>(s, 2, t0, lane); break;
    default: factored_row_tiles<4>(s, 3, t0, lane); break;
  }
}

// The state S [KD, VB] as accumulator fragments: warp w owns kRowBlocks blocks of 16 rows from
// row 16·kRowBlocks·(w % RB) and the columns of its column split w / RB (the 8 warps tile the
// state). Two row blocks a warp (params.hpp GlaForwardTiling::tall) halve the column split's
// width, so each warp reads half as many fragments of v in advance() for the same products.
// kWarps: the warps that hold the state (all of the block's but in the pipelined outputs pass,
// forward_pipelined.cuh, whose state side is one warpgroup).
template <class E, int KD, int VB, int kRowBlocks = 1, int kWarps = kThreads / 32>
struct StateTile {
  static constexpr int MB = kRowBlocks, RB = KD / (16 * MB), CS = kWarps / RB, CW = VB / CS, NT = CW / 8;
  static_assert(KD % (16 * MB) == 0 && RB * CS == kWarps && CW % 16 == 0, "the warps tile the state");
  float f[MB][NT][4];
  int row, col;  // this lane's first element (row, col); the others at +8 and +16·m rows, +8·nt cols

  __device__ StateTile(int warp, int lane)
      : row(16 * MB * (warp % RB) + lane / 4), col(CW * (warp / RB) + 2 * (lane % 4)) {}

  // Row and column of element e of tile (m, nt).
  __device__ int row_of(int m, int e) const { return row + 16 * m + 8 * (e / 2); }
  __device__ int col_of(int nt, int e) const { return col + 8 * nt + e % 2; }

  // From a [KD, V] float row-major state (at column vb0), or zeros.
  __device__ void load(const float* state, int64_t V) {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) f[m][nt][e] = state ? state[row_of(m, e) * V + col_of(nt, e)] : 0.0f;
  }
  __device__ void store(float* state, int64_t V) const {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) state[row_of(m, e) * V + col_of(nt, e)] = f[m][nt][e];
  }
  // Rounded to E, pairs of adjacent columns, into a row-major tile of pitch `pitch`.
  template <class Index>
  __device__ void store_pairs(E* tile, Index pitch) const {
#pragma unroll
    for (int m = 0; m < MB; ++m)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        *reinterpret_cast<uint32_t*>(&tile[row_of(m, 0) * pitch + col_of(nt, 0)]) = pack2<E>(f[m][nt][0], f[m][nt][1]);
        *reinterpret_cast<uint32_t*>(&tile[row_of(m, 2) * pitch + col_of(nt, 0)]) = pack2<E>(f[m][nt][2], f[m][nt][3]);
      }
  }
  // As the product operand, rounded to E.
  __device__ void store_operand(E* tile) const { store_pairs(tile, Smem<E, KD, VB>::PV); }
  // Each row times its decay (one factor per key row).
  __device__ void decay_rows(const float* decay) {
#pragma unroll
    for (int m = 0; m < MB; ++m) {
      const float d0 = decay[row_of(m, 0)], d1 = decay[row_of(m, 2)];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) f[m][nt][0] *= d0, f[m][nt][1] *= d0, f[m][nt][2] *= d1, f[m][nt][3] *= d1;
    }
  }
  // S ← decay ⊙ S + keysᵀ v, or with decay_after S ← decay ⊙ (S + keysᵀ v): keys [64, KD]
  // (pitch KD + 8), v [64, VB] (pitch VB + 8), decay one factor per key row. The forward passes
  // k ⊙ e^{b_last − b} and e^{b_last}, or for a chunk factored whole k ⊙ 2^{−b} and 2^{b_last}.
  __device__ void advance(const E* keys, const float* decay, const E* v, int lane, bool decay_after = false) {
    constexpr int PK = Smem<E, KD, VB>::PK, PV = Smem<E, KD, VB>::PV;
    if (!decay_after) decay_rows(decay);
    const int m0 = row - lane / 4, n0 = col - 2 * (lane % 4);
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      uint32_t a[MB][4];
#pragma unroll
      for (int m = 0; m < MB; ++m) load_a_transposed(a[m], keys, PK, 16 * kk, m0 + 16 * m, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];
        load_b(b, v, PV, 16 * kk, n0 + 16 * np, lane);
#pragma unroll
        for (int m = 0; m < MB; ++m) mma_pair<E>(f[m][2 * np], f[m][2 * np + 1], a[m], b);
      }
    }
    if (decay_after) decay_rows(decay);
  }
};

// Two adjacent outputs at `offset`: into the float partial when there is one, else rounded
// to E into `out`.
template <class E>
__device__ __forceinline__ void store_pair(E* out, float* partial, int64_t offset, float a, float b) {
  if (partial) *reinterpret_cast<float2*>(partial + offset) = make_float2(a, b);
  else *reinterpret_cast<uint32_t*>(out + offset) = pack2<E>(a, b);
}

// K = 256 runs as two key blocks of 128 channels (GlaParams::key_blocks): a state row, its
// decay and the key-side gradients belong to one key channel, so each block walks its
// channels alone; only o (and dv in the backward) sum over all channels, and those go to
// float partials that a last kernel adds. blockIdx.x = key block · value blocks + value block.
struct KeyBlock {
  int64_t key0, vb0;  // first key channel, first value column
  int64_t kb;         // key block
  template <int KD, int VB>
  __device__ static KeyBlock of_block(const GlaParams& p) {
    const int64_t value_blocks = p.V / VB, kb = blockIdx.x / value_blocks;
    return {kb * KD, (blockIdx.x % value_blocks) * VB, kb};
  }
  // Offset of this block's rows in a [.., K, V] state of pair `pair` (n·H + h, or a slot).
  __device__ int64_t state(const GlaParams& p, int64_t pair) const { return (pair * p.K + key0) * p.V + vb0; }
  // This key block's float partial of o (or dv) at token row `t` of span `seq`, head h: layout
  // [key_blocks, partial_rows, H, V]; nullptr without key blocks.
  __device__ float* partial(const GlaParams& p, int64_t batch, int64_t t, int64_t h, int64_t col) const {
    if (!p.partial) return nullptr;
    return p.partial + ((kb * p.partial_rows + batch * p.T + t) * p.H + h) * p.V + col;
  }
};

// o = (q_start·S_0 + A·v)·scale. Warp w takes kRowBlocks 16-row blocks from row block
// kRowBlocks·(w % RG) (RG = 4 / kRowBlocks warps down the chunk) and the value block's column
// split w / RG (kWarps / RG splits). Two row blocks a warp (GlaForwardTiling::tall) read half
// as many fragments of the state and of v for the same products.
// S: Smem, or any layout with q_start, state and scores members and Smem's pitches.
// put(r, c, x0, x1) takes o's columns c, c + 1 of the chunk's row r (r < valid), scaled.
template <int kRowBlocks = 1, int kWarps = kThreads / 32, class S, class E = typename S::Element, class Put>
__device__ __forceinline__ void chunk_output(const S& s, const E* v, int warp, int lane, int valid, float scale,
                                             Put&& put) {
  constexpr int KD = S::kKeys, VB = S::kValues, PK = S::PK, PV = S::PV, PA = S::PA;
  constexpr int MB = kRowBlocks, RG = 4 / MB, CS = kWarps / RG, NT = VB / (8 * CS);  // NT: 8-column tiles
  static_assert(RG * MB == 4 && NT % 2 == 0, "the warps tile o in pairs of 8-column tiles");
  const int rb0 = MB * (warp % RG), n0 = (warp / RG) * (VB / CS);
  float acc[MB][NT][4] = {};
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    uint32_t a[MB][4];
#pragma unroll
    for (int m = 0; m < MB; ++m) load_a(a[m], s.q_start, PK, 16 * (rb0 + m), 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      load_b(b, s.state, PV, 16 * kk, n0 + 16 * np, lane);
#pragma unroll
      for (int m = 0; m < MB; ++m) mma_pair<E>(acc[m][2 * np], acc[m][2 * np + 1], a[m], b);
    }
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk > rb0 + MB - 1) break;  // A is zero above the diagonal blocks
    uint32_t a[MB][4];
#pragma unroll
    for (int m = 0; m < MB; ++m)
      if (kk <= rb0 + m) load_a(a[m], s.scores, PA, 16 * (rb0 + m), 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      load_b(b, v, PV, 16 * kk, n0 + 16 * np, lane);
#pragma unroll
      for (int m = 0; m < MB; ++m)
        if (kk <= rb0 + m) mma_pair<E>(acc[m][2 * np], acc[m][2 * np + 1], a[m], b);
    }
  }
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int r = 16 * (rb0 + m) + lane / 4, c = n0 + 2 * (lane % 4);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (r < valid) put(r, c + 8 * nt, scale * acc[m][nt][0], scale * acc[m][nt][1]);
      if (r + 8 < valid) put(r + 8, c + 8 * nt, scale * acc[m][nt][2], scale * acc[m][nt][3]);
    }
  }
}

// A whole chunk's o staged for the tensor copies (GlaForwardOutput::staged): box b holds
// columns [64b, 64b + 64) of the value block, 64 rows of 128 bytes in the 128-byte swizzle
// the copies expect. q_sub (and k_pair for the second box where q_sub holds one box only,
// K = 64) are free from the end of pair_scores to the next step's walkers, and start at
// multiples of 1024 bytes (the swizzle's period) in every Smem.
constexpr int kStageBoxBytes = kChunk * 128;

template <class S>
__device__ __forceinline__ unsigned char* stage_box(S& s, int b) {
  static_assert(S::kValues <= 128, "value blocks of at most two boxes");
  auto* const q_sub = reinterpret_cast<unsigned char*>(s.q_sub);
  if (b == 0 || sizeof(s.q_sub) >= 2 * kStageBoxBytes) return q_sub + b * kStageBoxBytes;
  return reinterpret_cast<unsigned char*>(s.k_pair);
}

// o's columns c, c + 1 (c even) of the chunk's row r into the staging boxes: 16-byte unit
// (c % 64) / 8 of row r sits at unit ^ (r % 8), so the 8 rows a warp's store touches fall
// on 8 different units (no bank conflicts).
template <class S>
__device__ __forceinline__ void stage_pair(S& s, int r, int c, float a, float b) {
  using E = typename S::Element;
  const int unit = ((c % 64) / 8) ^ (r % 8);
  *reinterpret_cast<uint32_t*>(stage_box(s, c / 64) + r * 128 + unit * 16 + (c % 8) * 2) = pack2<E>(a, b);
}

// One thread's tensor copies of the staged chunk to rows [row0, row0 + 64) of head h, sequence
// slot `batch`, from value column col0: one bulk group.
template <class S>
__device__ __forceinline__ void copy_staged_output(const CUtensorMap& o_map, S& s, int64_t col0, int64_t row0,
                                                   int64_t h, int64_t batch) {
#pragma unroll
  for (int b = 0; b < S::kValues / 64; ++b)
    tma::store_box(o_map, stage_box(s, b), static_cast<int>(col0 + 64 * b), static_cast<int>(row0),
                   static_cast<int>(h), static_cast<int>(batch));
  tma::bulk_commit();
}

// Slot of chunk `chunk` of (sequence n, head h) in the [N, H, max_chunks, K, V] state tables.
__device__ __forceinline__ int64_t chunk_slot(const GlaParams& p, int64_t n, int64_t h, int64_t chunk) {
  return (n * p.H + h) * p.max_chunks + chunk;
}

// Slot of segment `seg` of sequence n, head h, in the segment tables of p.workspace.
__device__ __forceinline__ int64_t segment_slot(const GlaParams& p, int64_t n, int64_t h, int64_t seg) {
  return (n * p.H + h) * p.segments + seg;
}

// The decay table of the segment tables in p.workspace: [N, H, segments, K, V] states, then
// [N, H, segments, K] decays e^{Σ g} over each segment's tokens.
__device__ __forceinline__ float* segment_decay_table(const GlaParams& p) {
  return p.workspace + p.num_sequences * p.H * p.segments * p.K * p.V;
}

// Where block (value block, head, sequence × segment) reads and writes: its tokens, the
// chunks of its segment, and its slots of the state tables.
struct BlockPlan {
  Span seq;
  int64_t h, n, seg, first_chunk, end_chunk, chunks;
  int64_t state_slot;  // segment_slot(n, h, seg)
  __device__ BlockPlan(const GlaParams& p) {
    h = blockIdx.y, n = blockIdx.z / p.segments, seg = blockIdx.z % p.segments;
    seq = sequence_span(p, n);
    chunks = (seq.length + kChunk - 1) / kChunk;
    first_chunk = p.segments > 1 ? seg * p.segment_chunks : 0;
    end_chunk = p.segments > 1 ? min(chunks, first_chunk + p.segment_chunks) : chunks;
    state_slot = segment_slot(p, n, h, seg);
  }
  // Tokens of chunk `c` that exist (the rest is zero-filled).
  __device__ int valid(int64_t c) const {
    const int64_t left = seq.length - c * kChunk;
    return static_cast<int>(left < kChunk ? left : kChunk);
  }
};

// A block's entry of GlaParams::resume_chunks: its segment slot times the value blocks, plus its
// value block (the outputs pass with two chunks in flight has no key blocks).
__device__ __forceinline__ int64_t resume_index(const BlockPlan& plan) {
  return plan.state_slot * gridDim.x + blockIdx.x;
}

// The phase clocks of profile.hpp: one timing thread of a block marks the end of each phase
// of a chunk step (SM cycles, 32-bit: a block's sums stay far below 2^32 cycles) and adds
// its sums to the device counters at the end. Does nothing unless the launcher passed
// counters and this thread times.
struct PhaseClock {
  unsigned long long* counters;
  unsigned last = 0, sums[kGlaPhaseSteps] = {}, factored = 0;

  __device__ PhaseClock(unsigned long long* c, bool timer) : counters(timer ? c : nullptr) {
    if (counters) last = static_cast<unsigned>(clock());
  }
  __device__ __forceinline__ void mark(int phase) {
    if (!counters) return;
    const unsigned now = static_cast<unsigned>(clock());
    sums[phase] += now - last;
    last = now;
  }
  __device__ __forceinline__ void count_factored() {
    if (counters) ++factored;
  }
  // count_steps: this timer also counts the block's chunk steps and the block itself.
  __device__ void finish(int64_t steps, bool count_steps) const {
    if (!counters) return;
#pragma unroll
    for (int i = 0; i < kGlaPhaseSteps; ++i)
      if (sums[i]) atomicAdd(counters + i, static_cast<unsigned long long>(sums[i]));
    if (!count_steps) return;
    atomicAdd(counters + kGlaPhaseSteps, static_cast<unsigned long long>(steps));
    atomicAdd(counters + kGlaPhaseBlocks, 1ull);
    if (factored) atomicAdd(counters + kGlaPhaseFactored, static_cast<unsigned long long>(factored));
  }
};

// Phase clocks that add each phase's SM cycles to the device counters as it ends (a
// fire-and-forget atomic, kept out of the next phase by reading the clock again after it): the
// backward's gradient kernel (profile.hpp kGlaGradient*) and the pipelined outputs pass
// (kGlaPipelined*), whose steps are not one block-wide sequence. Does nothing unless profiling.
struct PhaseEvents {
  unsigned long long* counters;
  unsigned last = 0;
  __device__ PhaseEvents(unsigned long long* c, bool timer) : counters(timer ? c : nullptr) {
    if (counters) last = static_cast<unsigned>(clock());
  }
  __device__ __forceinline__ void mark(int phase) {
    if (!counters) return;
    atomicAdd(counters + phase, static_cast<unsigned long long>(static_cast<unsigned>(clock()) - last));
    last = static_cast<unsigned>(clock());
  }
  __device__ __forceinline__ void count(int counter) {
    if (counters) atomicAdd(counters + counter, 1ull);
  }
};

// What decay_operands<false> reads and writes in the state passes: one stage of g and k.
template <class E, int KD>
struct StatePassView {
  using Element = E;
  static constexpr int kKeys = KD, PK = KD + 8;
  E *g, *k, *k_end;
  float* decay_all;
};

// What one walk over the chunks produces:
//   segment_ends:  each segment's own end state (from zero) and total decay, into p.workspace;
//   outputs:       o, and the final state after the last chunk, from the entering state;
//   chunk_states:  the state entering every chunk, rounded to E, into p.chunk_states
//                  [N, H, max_chunks, K, V] (the backward's recomputation), by a tensor
//                  copy out of s.state as kSaveStates below, after the decays barrier.
enum class Pass { segment_ends, outputs, chunk_states };

// One block walks the chunks of one segment of one sequence (the whole sequence when not
// split) for one head and value block.
// kQuads (outputs pass only): the tensor-core diagonal (quad_*) instead of diagonal_scores.
// kRowBlocks (params.hpp GlaForwardTiling): 16-row blocks a warp of the state and of o
// (StateTile, chunk_output).
// kPairedWalk (with kQuads only): the walkers paired_decay_operands instead of decay_operands.
// kSaveStates (outputs pass only): also store each chunk's entering state into p.chunk_states,
// as the chunk_states pass does, so that the backward need not walk its own (NOTES.md v16,
// v19, v52): the state's operand tile (s.state, the same rounding) leaves by one tensor copy of
// thread 0 through states_map, issued after the pairs barrier and read before the next step's
// first barrier; with p.saved_chunk_scores, each chunk's A too, from its tile, by another
// through scores_map (NOTES.md v48).
// kStagedOutput (outputs pass with the tensor-core diagonal, no key blocks): a whole chunk's o
// leaves through the staging boxes and one thread's tensor copies through o_map (box 64
// columns × 64 rows), issued after the next step's first barrier and read before its walkers
// (NOTES.md v17); a partial chunk's o (a sequence's last) keeps the direct stores.
template <class E, int KD, int VB, Pass kPass, bool kQuads = false, int kRowBlocks = 1, bool kPairedWalk = false,
          bool kSaveStates = false, bool kStagedOutput = false>
__global__ void __launch_bounds__(kThreads, 1)
    forward_kernel(const GlaParams p, const __grid_constant__ CUtensorMap o_map,
                   const __grid_constant__ CUtensorMap states_map, const __grid_constant__ CUtensorMap scores_map) {
  constexpr bool kOutput = kPass == Pass::outputs, kEnds = kPass == Pass::segment_ends;
  static_assert(kOutput || !kQuads, "the state passes form no diagonal");
  static_assert(kOutput || !kSaveStates, "the chunk_states pass stores its states anyway");
  static_assert(kStagedOutput || !kSaveStates, "the saved states leave by the copy engine, as staged o does");
  // Every chunk's entering state leaves through s.state by bulk copies (NOTES.md v19, v21).
  constexpr bool kCopyStates = kSaveStates || kPass == Pass::chunk_states;
  static_assert(kQuads || !kPairedWalk, "the paired walkers form the quads' operands");
  static_assert(kQuads || !kStagedOutput, "the staging boxes are released at the quad diagonal's barrier");
  // A chunk factored whole (factored_operands): bf16 only, whose operands keep fp32's exponent range.
  constexpr bool kFactorable = kPairedWalk && std::is_same_v<E, __nv_bfloat16>;
  // The kernel has no static shared memory, so the dynamic block starts the CTA's shared
  // window: 1024-aligned, as the staging boxes' swizzle needs (a misplaced box would scramble
  // o, which the oracle tests would see).
  extern __shared__ __align__(1024) unsigned char smem_bytes[];
  using Sm = Smem<E, KD, VB>;
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  constexpr int PK = Sm::PK, PV = Sm::PV;
  static_assert(offsetof(Sm, state) % 128 == 0 && offsetof(Sm, scores) % 128 == 0,
                "the state and score tiles start where a tensor copy may read them");
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const KeyBlock kb = KeyBlock::of_block<KD, VB>(p);
  const int64_t vb0 = kb.vb0, key0 = kb.key0;
  BlockPlan plan(p);
  const int64_t h = plan.h;
  float* const segment_state = p.workspace ? p.workspace + kb.state(p, plan.state_slot) : nullptr;
  float* const segment_decay =
      p.workspace ? segment_decay_table(p) + plan.state_slot * p.K + key0 : nullptr;
  // The state entering the block's first chunk.
  const float* entering = p.segments > 1    ? segment_state
                          : p.initial_state ? p.initial_state + kb.state(p, plan.n * p.H + h)
                                            : nullptr;
  // After the outputs pass with two chunks in flight (forward_pipelined.cuh): the chunks it left.
  // This kernel is then its programmatic dependent (launch_walk), so it waits for it first.
  if constexpr (kOutput) {
    if (p.resume_chunks) {
      wait_for_previous_grid();
      const int64_t resume = p.resume_chunks[resume_index(plan)];
      if (resume >= plan.end_chunk) return;
      plan.first_chunk = resume;
      entering = p.resume_states + kb.state(p, plan.state_slot);
    }
  }
  StateTile<E, KD, VB, kRowBlocks> S(warp, lane);
  if (plan.first_chunk >= plan.end_chunk) {  // a segment past a short sequence's end
    if constexpr (kEnds) {
      S.load(nullptr, p.V);
      S.store(segment_state, p.V);
      if (vb0 == 0 && tid < KD) segment_decay[tid] = 1.0f;
    }
    return;
  }
  auto row0 = [&](const GlaTokens& x, int64_t t, int64_t col) {
    return static_cast<E*>(x.data) + plan.seq.batch * x.stride_batch + (plan.seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };
  // The state passes read no q and make no q_sub, q_start: those tiles hold a second stage
  // of k and g there, so each chunk's copies are issued a whole step ahead. The outputs pass
  // has one stage of g, q, k (shared memory is full), copied as soon as each is released.
  auto k_tile = [&](int stage) { return kOutput || stage == 0 ? s.k : s.q_sub; };
  auto g_tile = [&](int stage) { return kOutput || stage == 0 ? s.g : s.q_start; };
  // Each operand's first row for this block, formed once: a chunk's rows start chunk·64 rows on
  // (forming the whole offset again at every chunk's copies took ~40 integer instructions).
  const E *const q_rows = row0(p.q, 0, key0), *const k_rows = row0(p.k, 0, key0);
  const E *const g_rows = row0(p.g, 0, key0), *const v_rows = row0(p.v, 0, vb0);
  // The decays of a chunk are read first and released first: two groups of copies.
  auto issue_decay_loads = [&](int64_t chunk, int stage) {
    load_chunk<KD, PK>(g_tile(stage), chunk_rows(g_rows, p.g, chunk), p.g.stride_time, plan.valid(chunk), tid);
    copy_async_commit();
  };
  auto issue_token_loads = [&](int64_t chunk, int stage) {
    const int valid = plan.valid(chunk);
    if constexpr (kOutput) load_chunk<KD, PK>(s.q, chunk_rows(q_rows, p.q, chunk), p.q.stride_time, valid, tid);
    load_chunk<KD, PK>(k_tile(stage), chunk_rows(k_rows, p.k, chunk), p.k.stride_time, valid, tid);
    load_chunk<VB, PV>(s.v[stage], chunk_rows(v_rows, p.v, chunk), p.v.stride_time, valid, tid);
    copy_async_commit();
  };

  for (int i = tid; i < kChunk * Smem<E, KD, VB>::PA; i += kThreads) s.scores[i] = from_float<E>(0.0f);
  const int64_t state_offset = kb.state(p, plan.n * p.H + h);
  if constexpr (kEnds) S.load(nullptr, p.V);
  else S.load(entering, p.V);
  float total_decay = 1.0f;  // threads < KD: e^{Σ g} of channel tid over the segment
  issue_decay_loads(plan.first_chunk, 0);
  issue_token_loads(plan.first_chunk, 0);

  // kStagedOutput: the first token of the chunk whose o waits in the staging boxes (−1: none).
  int64_t staged_row = -1;
  auto copy_staged = [&] {  // thread 0, after a barrier behind the staging stores
    copy_staged_output(o_map, s, vb0, plan.seq.start + staged_row, h, plan.seq.batch);
  };

  PhaseClock phases(p.phase_cycles, tid == 0);
  int paused = 0;  // chunks left before the next try at factoring one whole (block-uniform)
  for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
    const int stage = static_cast<int>((chunk - plan.first_chunk) & 1);
    const bool more = chunk + 1 < plan.end_chunk;
    if constexpr (kCopyStates) {
      if (tid == 0) tma::bulk_wait_read();  // the last step's state (and A) copies: both are rewritten below
    }
    copy_async_wait_all();
    __syncthreads();  // this chunk's inputs are in; the last chunk's products are done
    phases.mark(kGlaPhaseLoadWait);
    if constexpr (kStagedOutput) {
      if (staged_row >= 0 && tid == 0) copy_staged();
    }
    // The state tile, by one tensor copy of thread 0, to the table's rows slot·K + key0, value
    // block vb0 / VB (launch.cuh state_table_map): in the chunk-state pass after the decays
    // barrier; in the outputs pass beside A's after the pairs barrier (NOTES.md v52b).
    const int64_t slot = chunk_slot(p, plan.n, h, chunk);
    auto send_state = [&] {
      tma::store_box(states_map, s.state, 0, static_cast<int>(vb0 / VB), static_cast<int>(slot * p.K + key0));
    };
    // A chunk factored whole: its operands, then the block's vote; the raw q, k and g stay as
    // they came, so a chunk voted out starts the sub-chunks and quads from them. After a chunk
    // voted out, the next kFactoredPause chunks go straight to the sub-chunks and quads: where
    // the decays are strong throughout, the failed walks would cost ≈ 20 % (NOTES.md v61).
    bool factored = false;
    if constexpr (kFactorable) {
      if (p.factored_chunks && paused == 0) {
        const bool outside = factored_operands(s, tid);
        S.store_operand(s.state);  // with kSaveStates, fenced for its copy with A's tile below
        factored = !__syncthreads_or(outside);
        phases.mark(kGlaPhaseDecays);
        if (!factored) paused = kFactoredPause + 1;
      }
      if (paused > 0) --paused;
    }
    if (factored) {  // q, k and g are free: the next chunk's copies all go out now
      if constexpr (kFactorable) {
        phases.count_factored();
        if (more) issue_decay_loads(chunk + 1, 0), issue_token_loads(chunk + 1, stage ^ 1);
        factored_scores(s, warp, lane);
        if constexpr (kStagedOutput) {
          if (staged_row >= 0 && tid == 0) tma::bulk_wait_read();  // this step's output rewrites the boxes
        }
        if constexpr (kSaveStates) fence_async_shared();
        __syncthreads();
        phases.mark(kGlaPhasePairs);
      }
    } else {
      if constexpr (kQuads) {
        quad_inner_scores(s, tid);
        if constexpr (kStagedOutput) {
          if (staged_row >= 0 && tid == 0) tma::bulk_wait_read();  // before the walkers overwrite the boxes
        }
        __syncthreads();  // the raw q, k are read: the walkers write the quads' operands over them
        phases.mark(kGlaPhaseDiagonal);
      }
      if constexpr (kOutput) {
        if constexpr (kPairedWalk) paired_decay_operands(s, tid);
        else decay_operands<true, Smem<E, KD, VB>, kQuads, false>(s, tid);
        S.store_operand(s.state);  // with kSaveStates, fenced for its copy with A's tile below
      } else {
        if (more) {  // into the stage the last step read
          issue_decay_loads(chunk + 1, stage ^ 1);
          issue_token_loads(chunk + 1, stage ^ 1);
        }
        StatePassView<E, KD> view{g_tile(stage), k_tile(stage), s.k_end, s.decay_all};
        decay_operands<false>(view, tid);
        if constexpr (kCopyStates) {  // s.state is no operand here: only the copies read it
          S.store_operand(s.state);
          fence_async_shared();
        }
      }
      __syncthreads();  // g is free: the next chunk's decays stream in from here
      phases.mark(kGlaPhaseDecays);
      if constexpr (kCopyStates && !kOutput) {
        if (tid == 0) send_state(), tma::bulk_commit();
      }
      if constexpr (kOutput) {
        if (more) issue_decay_loads(chunk + 1, 0);
        if constexpr (kQuads) quad_pair_scores(s, warp, lane);
        else diagonal_scores(s, warp, lane);
        __syncthreads();  // q, k are free: the next chunk's tokens stream in behind the products
        phases.mark(kGlaPhaseDiagonal);
        if (more) issue_token_loads(chunk + 1, stage ^ 1);
        pair_scores(s, warp, lane);
        // The state's tile (stored before the walkers' barrier) and A's may leave by tensor copies
        // after this barrier: one fence orders both for the copy engine.
        if constexpr (kSaveStates) fence_async_shared();
        __syncthreads();
        phases.mark(kGlaPhasePairs);
      }
    }
    if constexpr (kOutput) {
      if constexpr (kSaveStates) {  // read before the next step's walkers rewrite them (its top's wait)
        if (tid == 0) {
          send_state();
          if (p.saved_chunk_scores && vb0 == 0)  // A: rows slot·64 of the [slots·64, 64] table
            tma::store_box(scores_map, s.scores, 0, static_cast<int>(slot * kChunk), 0);
          tma::bulk_commit();
        }
      }
      const int64_t t = chunk * kChunk;
      const int valid = plan.valid(chunk);
      float* const partial = kb.partial(p, plan.seq.batch, plan.seq.start + t, h, vb0);
      staged_row = kStagedOutput && valid == kChunk && !partial ? t : -1;
      if (staged_row >= 0) {
        chunk_output<kRowBlocks>(s, s.v[stage], warp, lane, valid, p.scale,
                                 [&](int r, int c, float a, float b) { stage_pair(s, r, c, a, b); });
        fence_async_shared();  // the stores reach the copy engine's view at the next barrier
      } else {
        E* const out = row0(p.o, t, vb0);
        const int64_t stride = partial ? p.H * p.V : p.o.stride_time;
        chunk_output<kRowBlocks>(s, s.v[stage], warp, lane, valid, p.scale, [&](int r, int c, float a, float b) {
          store_pair(out, partial, r * stride + c, a, b);
        });
      }
      phases.mark(kGlaPhaseOutput);
    } else {
      if (tid < KD) total_decay *= s.decay_all[tid];
    }
    S.advance(factored ? s.inverse_keys() : s.k_end, s.decay_all, s.v[stage], lane, factored);
    phases.mark(kGlaPhaseAdvance);
  }
  phases.finish(plan.end_chunk - plan.first_chunk, true);
  if constexpr (kStagedOutput) {
    if (staged_row >= 0) {  // the last chunk's o
      __syncthreads();
      if (tid == 0) copy_staged(), tma::bulk_wait_read();
    }
  }
  if constexpr (kCopyStates) {
    if (tid == 0) tma::bulk_wait_read();  // the shared memory must outlive the copies' reads
  }
  if constexpr (kOutput) {
    if (p.final_state && plan.end_chunk == plan.chunks) S.store(p.final_state + state_offset, p.V);
  } else if constexpr (kEnds) {
    S.store(segment_state, p.V);
    if (vb0 == 0 && tid < KD) segment_decay[tid] = total_decay;
  }
}

}  // namespace seqmix::cuda::gla
