// The chunked method for matrix states (8 < m ≤ 64, n ≤ 64; bf16 and f32) on tensor cores, in
// three launches like chunked_tensor.cuh, with each block walking a whole state of W
// columns instead of a slice of 8 (NOTES.md, version 18):
//   1. chunk summaries: one block per chunk (but the last) walks
//        X ← A_s·X + [0 | b_s]   from X = [I | 0],  X = [P | v], W = 128 columns,
//      and writes P (the chunk's transfer matrix) and v (its state from a zero start);
//   2. the state entering every chunk: the sequential kernel over the summaries;
//   3. every chunk re-walked from its start state, X ← A_s·X + b_s with W = 64 columns,
//      writing h.
// A step is one warpgroup's wgmma products on the transposed state,
//   Xᵀ ← Xᵀ·A_sᵀ   (the backward's reverse chain: Xᵀ·A_s),
// so the accumulators (rows: X's W columns in W / 64 tiles of 64; columns: the NP = 32 or
// 64 padded state rows) are, split into two bf16 parts X = X_hi + X_lo (about 2⁻¹⁷ relative
// a step, as the walk on tensor cores keeps its state: walk_wgmma.cuh), the A operand of
// the next step's wgmma m64nNPk16 from registers (the RS form: the accumulator and
// A-operand layouts coincide per 16 columns). A_s is the B operand straight from its stage
// (K-major as it comes from memory; MN-major for the reverse chain). So no state goes
// through shared memory and n ≤ 32 has no padded rows in its products. A_s and b_s come
// through a ring of stages by cp.async; b_s is read transposed by ldmatrix.trans, bf16
// states leave by stmatrix.trans into a staging tile in the output's row layout, then as
// 16-byte rows after the next step's barrier.
// f32 (NOTES.md, version 19): three tf32 products X_lo·A_hi + X_hi·A_lo + X_hi·A_hi a
// k-slice (about f32 accuracy). tf32 wgmma takes its B operand K-major only, so every step
// the threads split A_s's stage into A_hi and A_lo (transposed for the reverse chain), with
// k permuted within every 8 so that the accumulators serve as the A operand without
// shuffles (split_permuted), published by a second barrier; b_s is read from its stage at
// the accumulators' elements and states leave through one staging tile (two stages).
#pragma once

#include <algorithm>
#include <type_traits>

#include "cuda/attention/mma.cuh"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/methods.hpp"

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

namespace seqmix::cuda::linrec {

// One launch's chains (the forward's, or the backward's two side by side), chunks of
// `chunk` steps. Summaries: maps [G, chunks, n, n] and offsets [G, chunks, n, m] (float);
// the re-walk starts every chunk but the first from starts [G, chunks, n, m] (float), which
// the pass over the summaries fills. Chunk 0's start is the chain's: the summaries' blocks
// of chunk 0 copy it into starts for the pass, and the re-walk's read it from the chain, so
// no launch of its own copies it (NOTES.md, version 21).
struct WideChunkParams {
  SeqChain chains[2];
  float* maps[2] = {nullptr, nullptr};
  float* offsets[2] = {nullptr, nullptr};
  float* starts[2] = {nullptr, nullptr};
  int64_t T = 0, chunk = 0, chunks = 0;
  int n = 0, m = 0;
};

template <class T, int W>
struct WideLayout {
  static_assert(W == 64 || W == 128, "the re-walk's state (m ≤ 64) or a summary's [P | v]");
  static constexpr bool kF32 = sizeof(T) == 4;
  static constexpr int N = 64, kThreads = 128;
  static constexpr int kK = kF32 ? 8 : 16;  // k per wgmma
  // Two blocks an SM: bf16 four stages (81 KB), f32 two (113 KB).
  static constexpr int kStages = kF32 ? 2 : 4;
  static constexpr int kUnitElems = 16 / int(sizeof(T));
  static constexpr int kUnitsPerRow = N / kUnitElems;
  static constexpr int kTileBytes = N * N * int(sizeof(T));  // 64 × 64 elements
  static constexpr int kStageBytes = 2 * kTileBytes;         // A_s, b_s
  // After the stages: f32's A_s split into tf32 hi and lo, then the staging of the outputs
  // in their row layout (bf16: two tiles, written and read a step apart; f32: one, read and
  // written on either side of its step's second barrier).
  static constexpr int kSplit = kStages * kStageBytes;
  static constexpr int kStaging = kSplit + (kF32 ? 2 * kTileBytes : 0);
  static constexpr int kStagingTiles = kF32 ? 1 : 2;
  static constexpr int kBytes = kStaging + kStagingTiles * kTileBytes;
  static constexpr int kAlignSlack = 1024;
  static constexpr int kRowBytes = 128;  // a tile row in at(): the hardware's 128-byte swizzle
  // Byte offset of element (row, col) of a tile of 64 rows in 128-byte swizzled rows (K-major
  // operands: col = k; b_s and the staged outputs: [k][r]).
  __device__ static constexpr int at(int row, int col) { return swizzled_offset<N, int(sizeof(T))>(row, col); }
};

// Step s (of `steps`) of chain c's chunk `chunk` in group `group` into its stage: A_s and
// b_s, zeros past n and m, one commit group; the reverse chain's identity step as the
// identity written in.
template <class T, class L>
__device__ __forceinline__ void issue_wide_stage(const WideChunkParams& p, const SeqChain& c, int64_t chunk,
                                                 int64_t group, int64_t s, int64_t steps, unsigned char* a_stage) {
  constexpr int N = L::N, U = L::kUnitElems;
  if (s < steps) {
    const int n = p.n, m = p.m, tid = threadIdx.x;
    const bool identity = c.identity_first && chunk == 0 && s == 0;
    const T* A_s = static_cast<const T*>(c.A) + group * c.a_group + (chunk * p.chunk + s) * c.a_step;
    const T* b_s = static_cast<const T*>(c.b) + group * c.b_group + (chunk * p.chunk + s) * c.b_step;
    // A thread's units step by a multiple of the swizzle's 8 rows.
    using Units = ThreadUnits<L::kThreads, L::kUnitsPerRow>;
    constexpr int kRowStep = Units::kRowStep;
    static_assert(kRowStep % 8 == 0, "a thread's units keep their swizzle");
    const Units units(tid);
    const int row0 = units.row0, col = units.unit * U;
    unsigned char* const to = a_stage + L::at(row0, col);
    const T* const a_from = A_s + row0 * n + col;
    const T* const b_from = b_s + row0 * m + col;
#pragma unroll
    for (int k = 0; k < N * L::kUnitsPerRow / L::kThreads; ++k) {
      const int row = row0 + k * kRowStep;
      if (identity) {
        *reinterpret_cast<uint4*>(to + k * kRowStep * L::kRowBytes) = identity_unit<T>(row, col, n);
      } else {
        const bool a_ok = row < n && col < n;
        copy_async<16>(to + k * kRowStep * L::kRowBytes, a_ok ? a_from + k * kRowStep * n : A_s, a_ok);
      }
      const bool b_ok = row < n && col < m;
      copy_async<16>(to + L::kTileBytes + k * kRowStep * L::kRowBytes, b_ok ? b_from + k * kRowStep * m : b_s, b_ok);
    }
  }
  copy_async_commit();
}

// f32: A_s's stage as the tf32 B operand in two parts, hi = tf32(A_s) and lo = A_s − hi,
// K-major with k permuted within every 8 (position c holds k = 2c for c < 4, 2(c − 4) + 1
// after), so that the accumulators' column pairs (2·tig, 2·tig + 1) are the A operand's
// columns (tig, tig + 4) as they stand: B[j][c] = A_s[j][π(c)], or A_s[π(c)][j] for the
// reverse chain (Aᵀ). Each thread: one 8 × 4 block (8 k, 4 j), read and written as 16-byte rows.
template <class L, bool kTransposed>
__device__ __forceinline__ void split_permuted(const unsigned char* stage, unsigned char* hi, unsigned char* lo) {
  static_assert(L::kF32 && L::N * L::N / 32 == L::kThreads * 1, "one 8 × 4 block a thread");
  const int tid = threadIdx.x, k0 = (tid % 8) * 8, j0 = (tid / 8) * 4;
  float x[8][4];  // x[e][a] = the operand element (k0 + e, j0 + a): A_s[j0 + a][k0 + e], or A_s[k0 + e][j0 + a]
  if constexpr (kTransposed) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float4 v = *reinterpret_cast<const float4*>(stage + L::at(k0 + e, j0));
      x[e][0] = v.x, x[e][1] = v.y, x[e][2] = v.z, x[e][3] = v.w;
    }
  } else {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const float4 v0 = *reinterpret_cast<const float4*>(stage + L::at(j0 + a, k0));
      const float4 v1 = *reinterpret_cast<const float4*>(stage + L::at(j0 + a, k0 + 4));
      x[0][a] = v0.x, x[1][a] = v0.y, x[2][a] = v0.z, x[3][a] = v0.w;
      x[4][a] = v1.x, x[5][a] = v1.y, x[6][a] = v1.z, x[7][a] = v1.w;
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    float h[8], l[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const float v = x[c < 4 ? 2 * c : 2 * (c - 4) + 1][a];
      h[c] = __uint_as_float(to_tf32(v)), l[c] = v - h[c];
    }
    const int at0 = L::at(j0 + a, k0), at1 = L::at(j0 + a, k0 + 4);
    *reinterpret_cast<float4*>(hi + at0) = make_float4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<float4*>(hi + at1) = make_float4(h[4], h[5], h[6], h[7]);
    *reinterpret_cast<float4*>(lo + at0) = make_float4(l[0], l[1], l[2], l[3]);
    *reinterpret_cast<float4*>(lo + at1) = make_float4(l[4], l[5], l[6], l[7]);
  }
}

// stmatrix.trans of four 8×8 tiles of 16-bit pairs (the mma fragment layout), each stored
// transposed: lane l gives the address of row l % 8 of tile l / 8.
__device__ __forceinline__ void stmatrix_x4_trans(void* row, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(
                   tma::shared_address(row)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The wgmma instruction of a step's products: m64nNPk16 bf16 or m64nNPk8 tf32, A from
// registers, B K-major (bf16's reverse chain: MN-major; f32's split stages are K-major).
template <class T, int NP, bool kTransposed>
struct WideProduct {
  static constexpr auto kB = kTransposed ? cute::SM90::GMMA::Major::MN : cute::SM90::GMMA::Major::K;
  using Bf16 = std::conditional_t<NP == 64, cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, kB>,
                                  cute::SM90::GMMA::MMA_64x32x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K, kB>>;
  using Tf32 = std::conditional_t<NP == 64, cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_RS_TN<>,
                                  cute::SM90::GMMA::MMA_64x32x8_F32TF32TF32_RS_TN<>>;
  using Op = std::conditional_t<sizeof(T) == 4, Tf32, Bf16>;
};

template <class T, int W, bool kSummary, bool kTransposed, int NP>
__device__ __forceinline__ void wide_chain(const WideChunkParams& p, unsigned char* smem) {
  using L = WideLayout<T, W>;
  using Op = typename WideProduct<T, NP, kTransposed>::Op;
  constexpr bool kF32 = L::kF32;
  constexpr int D = L::kStages, kTiles = W / 64, kAcc = NP / 2, kSlices = NP / L::kK;
  const int k_chain = blockIdx.z;
  const SeqChain& c = p.chains[k_chain];
  const int64_t chunk = blockIdx.x, group = blockIdx.y;
  const int n = p.n, m = p.m;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const bool last_chunk = chunk == p.chunks - 1;
  const int64_t steps = last_chunk ? p.T - chunk * p.chunk : p.chunk;
  const auto stage = [&](int64_t s) { return smem + static_cast<int>(s % D) * L::kStageBytes; };
  const auto issue = [&](int64_t s) { issue_wide_stage<T, L>(p, c, chunk, group, s, steps, stage(s)); };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue(d);
  // Element e of the chain's start state [n, m] (zeros without one).
  const auto chain_start = [&](int e) { return c.start ? start_element<T>(c, group * c.start_group + e) : 0.f; };
  if constexpr (kSummary)
    if (chunk == 0)
      for (int e = tid; e < n * m; e += L::kThreads) p.starts[k_chain][group * p.chunks * n * m + e] = chain_start(e);

  // Accumulator element i of tile t: row r = 64·t + 16·warp + gid (+8 for (i / 2) odd) of Xᵀ
  // (column r of X), column k = 8·(i / 4) + 2·tig + i % 2 (row k of X).
  const auto r_of = [&](int t, int i) { return 64 * t + 16 * warp + gid + 8 * ((i / 2) % 2); };
  const auto k_of = [&](int i) { return 8 * (i / 4) + 2 * tig + i % 2; };
  // bf16's ldmatrix / stmatrix of a 16-column slice ks of this warp's 16 rows: lane l's row
  // of the transposed tiles (row k of a [k][r] tile, from column r0).
  const int q = lane / 8, tile_k = 8 * (q / 2) + lane % 8, tile_r = 16 * warp + 8 * (q % 2);
  float acc[kTiles][kAcc];
  const float* start = kSummary ? nullptr : p.starts[k_chain] + (group * p.chunks + chunk) * n * m;
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int r = r_of(t, i), k = k_of(i);
      if constexpr (kSummary) acc[t][i] = r == k && k < n ? 1.f : 0.f;  // [I | 0]
      else acc[t][i] = k < n && r < m ? (chunk == 0 ? chain_start(k * m + r) : start[k * m + r]) : 0.f;
    }
  // The A operand of tile t's next products from its accumulators, hi and lo parts, into
  // slot `slot`: bf16 pairs (the accumulator layout per 16 columns), kept from one step to
  // the next for every tile; or tf32 with the columns (2·tig, 2·tig + 1) of every 8 taken as
  // (tig, tig + 4) (split_permuted permutes B's k to match), formed for one tile at a time
  // right before its products (registers: three products of two tiles would not fit).
  constexpr int kSlots = kF32 ? 1 : kTiles;
  uint32_t hi[kSlots][kSlices][4], lo[kSlots][kSlices][4];
  const auto split = [&](int t, int slot) {
#pragma unroll
    for (int ks = 0; ks < kSlices; ++ks) {
      if constexpr (kF32) {
        constexpr int kOrder[4] = {0, 2, 1, 3};  // a0 (gid, tig), a1 (gid + 8, tig), a2 (gid, tig + 4), a3
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float x = acc[t][4 * ks + kOrder[j]];
          hi[slot][ks][j] = to_tf32(x);
          lo[slot][ks][j] = to_tf32(x - __uint_as_float(hi[slot][ks][j]));
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float x0 = acc[t][8 * ks + 2 * j], x1 = acc[t][8 * ks + 2 * j + 1];
          const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
          const float2 hf = __bfloat1622float2(h);
          const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
          hi[slot][ks][j] = *reinterpret_cast<const uint32_t*>(&h);
          lo[slot][ks][j] = *reinterpret_cast<const uint32_t*>(&l);
        }
      }
    }
  };
  if constexpr (!kF32)
#pragma unroll
    for (int t = 0; t < kTiles; ++t) split(t, t);

  constexpr int kU = kSummary ? 1 : 0;  // the tile of Xᵀ that b_s adds to
  const int64_t out_at = group * c.out_group + chunk * p.chunk * c.out_step;
  // Outputs of the re-walk: bf16's float states (the backward's chains) straight from the
  // accumulators; the states in the input type and the last state through the staging.
  float* out_f = !kSummary && !kF32 && c.out_float ? static_cast<float*>(c.out) + out_at : nullptr;
  T* out_t = !kSummary && (kF32 || !c.out_float) && c.out ? static_cast<T*>(c.out) + out_at : nullptr;
  T* last = !kSummary && c.last && last_chunk ? static_cast<T*>(c.last) + group * c.last_group : nullptr;
  unsigned char* split_hi = smem + L::kSplit;  // f32: A_s's tf32 parts, the B operands
  unsigned char* split_lo = split_hi + L::kTileBytes;
  // [64 k][64 r] tiles in the output's row layout; step s's in tile s % kStagingTiles.
  const auto staging = [&](int64_t s) {
    return smem + L::kStaging + static_cast<int>(s % L::kStagingTiles) * L::kTileBytes;
  };
  // f32 at NP = 64: a loop, not unrolled, so that its addresses do not stay live across the
  // whole step (its re-walk's spills 344 → 184 bytes; G16 T4096 n64 m64 2.53 → 2.37 ms).
  constexpr int kCopyUnroll = kF32 && NP == 64 ? 1 : 64 * L::kUnitsPerRow / L::kThreads;
  // A thread's units step by whole rows, as issue_wide_stage's do.
  const auto copy_staged = [&](int64_t s, T* dst) {  // step s's staged state to dst [n, m]
    using Units = ThreadUnits<L::kThreads, L::kUnitsPerRow>;
    constexpr int kRowStep = Units::kRowStep;
    const Units units(tid);
    const int row0 = units.row0, col = units.unit * L::kUnitElems;
    const unsigned char* const from = staging(s) + L::at(row0, col);
    T* const to = dst + row0 * m + col;
#pragma unroll kCopyUnroll
    for (int e = 0; e < 64 * L::kUnitsPerRow / L::kThreads; ++e)
      if (row0 + e * kRowStep < n && col < m)
        *reinterpret_cast<uint4*>(to + e * kRowStep * m) =
            *reinterpret_cast<const uint4*>(from + e * kRowStep * L::kRowBytes);
  };

  for (int64_t s = 0; s < steps; ++s) {
    copy_async_wait<D - 2>();
    if constexpr (!kF32) fence_async_shared();
    __syncthreads();
    issue(s + D - 1);
    const unsigned char* a = stage(s);
    if (out_t && s > 0) copy_staged(s - 1, out_t + (s - 1) * c.out_step);
    if constexpr (kF32) {  // the split parts are B; published by a second barrier
      split_permuted<L, kTransposed>(a, split_hi, split_lo);
      fence_async_shared();
      __syncthreads();
    }
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      if constexpr (kF32) {  // one tile's operands live at a time (all of them: the products overwrite
                             // the accumulators they come from); the small terms first
        split(t, 0);
        attn::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kSlices; ++ks) {
          const uint64_t b_hi = attn::smem_descriptor(split_hi + L::at(0, ks * L::kK), 16);
          const uint64_t b_lo = attn::smem_descriptor(split_lo + L::at(0, ks * L::kK), 16);
          wgmma_rs<Op>(lo[0][ks], b_hi, acc[t], ks > 0);
          wgmma_rs<Op>(hi[0][ks], b_lo, acc[t], true);
          wgmma_rs<Op>(hi[0][ks], b_hi, acc[t], true);
        }
        attn::wgmma_commit();
        attn::wgmma_wait<0>();
        attn::fence_registers(acc[t]);
      } else {
        attn::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < kSlices; ++ks) {
          const uint64_t b_desc = kTransposed ? attn::smem_descriptor(a + ks * L::kK * 128, 64 * 128)
                                              : attn::smem_descriptor(a + L::at(0, ks * L::kK), 16);
          wgmma_rs<Op>(lo[t][ks], b_desc, acc[t], ks > 0);
          wgmma_rs<Op>(hi[t][ks], b_desc, acc[t], true);
        }
        attn::wgmma_commit();
      }
    }
    if constexpr (!kF32) {
      attn::wgmma_wait<0>();
#pragma unroll
      for (int t = 0; t < kTiles; ++t) attn::fence_registers(acc[t]);
    }
    const unsigned char* b_stage = a + L::kTileBytes;
    if constexpr (kF32) {  // b_s[k][r] at the accumulators' elements
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[kU][i] += *reinterpret_cast<const float*>(b_stage + L::at(k_of(i), r_of(0, i)));
    } else {
#pragma unroll
      for (int ks = 0; ks < kSlices; ++ks) {
        uint32_t bv[4];
        attn::ldmatrix_x4_trans(bv, b_stage + L::at(16 * ks + tile_k, tile_r));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bv[j]));
          acc[kU][8 * ks + 2 * j] += v.x, acc[kU][8 * ks + 2 * j + 1] += v.y;
        }
      }
    }
    if constexpr (!kF32)
#pragma unroll
      for (int t = 0; t < kTiles; ++t) split(t, t);
    if constexpr (!kSummary) {
      if (out_t || last) {  // into the staging tile
        if constexpr (kF32) {
#pragma unroll
          for (int i = 0; i < kAcc; ++i) *reinterpret_cast<float*>(staging(s) + L::at(k_of(i), r_of(0, i))) = acc[0][i];
        } else {
#pragma unroll
          for (int ks = 0; ks < kSlices; ++ks) stmatrix_x4_trans(staging(s) + L::at(16 * ks + tile_k, tile_r), hi[0][ks]);
        }
      }
      if (out_f) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) {
          const int r = r_of(0, i), k = k_of(i);
          if (k < n && r < m) out_f[s * c.out_step + k * m + r] = acc[0][i];
        }
      }
    }
  }
  copy_async_wait<0>();
  if constexpr (kSummary) {  // P = X's first n columns, v the next m
    float* maps = p.maps[k_chain] + (group * p.chunks + chunk) * n * n;
    float* offsets = p.offsets[k_chain] + (group * p.chunks + chunk) * n * m;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const int r = r_of(0, i), k = k_of(i);
      if (k < n && r < n) maps[k * n + r] = acc[0][i];
      if (k < n && r < m) offsets[k * m + r] = acc[1][i];
    }
  } else if (steps > 0 && (out_t || last)) {
    __syncthreads();  // the last step's staged state published
    if (out_t) copy_staged(steps - 1, out_t + (steps - 1) * c.out_step);
    if (last) copy_staged(steps - 1, last);
  }
}

// NP: the padded state size (32 or 64).
template <class T, int W, bool kSummary, int NP>
__global__ void __launch_bounds__(128, 2) wide_chunk_kernel(const __grid_constant__ WideChunkParams p) {
  extern __shared__ __align__(16) unsigned char wide_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(wide_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  if (p.chains[blockIdx.z].transposed) wide_chain<T, W, kSummary, true, NP>(p, smem);
  else wide_chain<T, W, kSummary, false, NP>(p, smem);
}

template <class T, int W, bool kSummary>
void launch_wide_chunks(const WideChunkParams& p, int64_t blocks, int64_t G, int count, cudaStream_t stream) {
  using L = WideLayout<T, W>;
  const auto kernel = p.n <= 32 ? wide_chunk_kernel<T, W, kSummary, 32> : wide_chunk_kernel<T, W, kSummary, 64>;
  constexpr int smem = L::kBytes + L::kAlignSlack;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (wide chunks)");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(G), static_cast<unsigned>(count));
  kernel<<<grid, L::kThreads, smem, stream>>>(p);
  check_launch(kSummary ? "linear_recurrence wide chunk summaries" : "linear_recurrence wide chunks");
}

// The three launches for one or two chains side by side, in the split chunked method's
// scratch (chunk_summaries).
template <class T>
void solve_chunked_wide(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t m,
                        int64_t chunk, float* scratch, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t L = std::min(chunk, T_len), chunks = (T_len + L - 1) / L;
  const ChunkSummaries summaries = chunk_summaries(chains, count, G, chunks, n, m, scratch);
  WideChunkParams w;
  for (int k = 0; k < count; ++k) {
    w.chains[k] = chains[k];
    w.maps[k] = summaries.maps[k], w.offsets[k] = summaries.offsets[k], w.starts[k] = summaries.starts[k];
  }
  w.T = T_len, w.chunk = L, w.chunks = chunks;
  w.n = static_cast<int>(n), w.m = static_cast<int>(m);
  if (chunks > 1) {
    launch_wide_chunks<T, 128, true>(w, chunks - 1, G, count, stream);
    launch_sequential<float>(summaries.pass, G, stream_ptr);
  }
  launch_wide_chunks<T, 64, false>(w, chunks, G, count, stream);
}

}  // namespace seqmix::cuda::linrec

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER
