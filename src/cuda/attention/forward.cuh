// Attention forward on Hopper: one CTA per (128 query rows, query head, sequence).
//   warpgroup 0  producer: one thread issues TMA copies of the Q tile once and of K and V
//                tiles into a ring of kStages shared-memory stages (mbarrier pipeline);
//                it gives its registers to the consumers (setmaxnreg).
//   warpgroups 1, 2  consumers (ForwardConfig's kConsumers at D = 64: 1 and 64 query rows,
//                or 1, 2, 3 and 192): 64 query rows each. Per key block: S = Q·Kᵀ by wgmma from
//                shared memory, online softmax on the fp32 accumulators, P converted to
//                16-bit in registers and O += P·V by wgmma with A from registers;
//                S of the next block is issued before the PV product of the current one,
//                so the softmax overlaps the tensor cores (intra-warpgroup overlap).
// Two schedules (AttentionForwardSchedule, params.hpp): `standard` frees a K/V stage once
// its PV product is done; `pingpong` frees K as soon as its QKᵀ product is in (the producer
// copies the next K one iteration earlier), makes the two consumer warpgroups take turns
// issuing their products (named barriers), so one warpgroup's softmax runs while the
// other's products occupy the tensor cores, and at D = 128 walks key blocks of 176.
// `persistent` is pingpong in a grid of one CTA per SM that walks an ordered list of tiles
// (ForwardTiles): the producer loads the next tile's Q as soon as the current tile's last
// QKᵀ product is in and its first K/V blocks as stages free up, so the next tile's copies
// run under this tile's last PV product and epilogue.
// Key blocks run from the last to the first, so the masked ones (the sequence end, the
// causal diagonal) come first and the rest skip the mask.
#pragma once

#include <cuda.h>

#include <type_traits>

#include "cuda/attention/params.hpp"
#include "cuda/attention/sm90.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/proxy.cuh"

namespace seqmix::cuda::attn {

// kConsumers: consumer warpgroups, 2, or at D = 64 under the turn-taking schedules
// (attention_forward_warpgroups) 3 or 1. At D = 64 a score costs half the tensor work it
// costs at D = 128 but the same softmax, and the softmax is latency-bound per warp (NOTES.md),
// so a third warpgroup gives the schedulers more independent softmax work while the other
// two take the tensor cores. Its registers: 160 a consumer thread (S 64, P 32, O 32 at
// D = 64). One (no turns): tiles of 64 rows, twice the CTAs, for grids of fewer tiles than
// SMs, whose time is one CTA's.
template <class T, int D, AttentionForwardSchedule kSchedule, int kConsumers = 2>
struct ForwardConfig {
  static_assert(D == 64 || D == 128 || D == 256, "head dims 64, 128, 256");
  static constexpr bool kPingpong = kSchedule != AttentionForwardSchedule::standard;
  static_assert(kConsumers == 2 || (kConsumers != 2 && D == 64 && kPingpong), "one or three consumers: D = 64, pingpong");
  // Turns between the consumer warpgroups (none with one).
  static constexpr bool kTurns = kPingpong && kConsumers > 1;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per CTA: 64 per consumer warpgroup
  // Keys per pipeline stage. Pingpong at D = 128: 176 (fewer turns, barriers and O
  // rescales per key; S, P and O then take 196 of the consumers' 240 registers).
  static constexpr int kBlockN = D == 128 && kPingpong ? 176 : D <= 128 ? 128 : 64;
  // A tile's first key block (the last by key: the sequence's end or the causal bound) is
  // ragged; with blocks of 176 its QKᵀ product and softmax run at a narrower width where its
  // keys fit (first_block_width), so its masked columns are not exponentiated. Widths 64
  // and 112 under pingpong; 64 only when persistent, where a 112-wide variant serialized the
  // kernel's wgmma pipeline for want of registers (ptxas C7511).
  static constexpr int kNarrowWidths =
      kBlockN != 176 ? 0 : kSchedule == AttentionForwardSchedule::persistent ? 1 : 2;
  static constexpr int kStages = 2;
  static constexpr int kChunks = D / 64;  // 128-byte swizzle atoms across the head dim
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  // setmaxnreg: the producer keeps 24 registers a thread, the consumers share the rest
  // (64 K registers an SM: 128·24 + 256·240 or 384·160).
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumers == 3 ? 160 : 240;
  static constexpr uint32_t kQBytes = kBlockM * D * sizeof(T);
  static constexpr uint32_t kKVBytes = kBlockN * D * sizeof(T);
  // Shared memory, each tile stored as kChunks column chunks of rows × 128 bytes.
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  static constexpr uint32_t kBarrierOffset = kVOffset + kStages * kKVBytes;
  // q_full, q_empty, k_full[], v_full[], k_empty[], v_empty[]
  static constexpr uint32_t kBarriers = 2 + 4 * kStages;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

// Named barriers of the pingpong turns (0 is __syncthreads): warpgroup w issues after
// barrier kTurnBarrier + w completes, i.e. after the warpgroup before it in the ring has
// issued.
inline constexpr int kTurnBarrier = 1;
// Named barrier of a consumer warpgroup's staged output (store_output_staged): one each, after
// the turn barriers of up to three warpgroups.
inline constexpr int kStageBarrier = kTurnBarrier + 3;

// One tile of work: 128 query rows of one query head of one sequence.
struct ForwardTile {
  int m_block, head, sequence;
};

// The persistent schedule's list of tiles. The (head, sequence) pairs are cut into sections
// of `section_pairs`; a section's tiles come before the next section's. Causal: within a
// section the query blocks from the last (the longest tile) to the first, pairs fastest, so
// the tiles start longest first inside each section, and a section's K and V stay small
// enough for L2 (the host sizes it). Non-causal (`pair_major`, one section): the plain
// grid's order, a pair's query blocks last to first, then the next pair's, so the CTAs of a
// round share few pairs' K and V.
//
// Which CTA takes which tile: a section's list is dealt to the CTAs in rounds of gridDim.x
// tiles, the rounds counted over the whole walk going forward and backward in turn (a
// snake), the first round of each section starting where the previous section's last round
// stopped. With tiles sorted long to short inside a section, the CTA that drew the longest
// tile of one round draws the shortest of the next, so every CTA gets about the same number
// of key blocks. Dealing plainly (CTA c takes tiles c, c + gridDim.x, ...) gave the causal
// CTAs up to 1.3x the mean work, the sections restarting long to short: measured 0.77-0.89x
// the plain grid's speed. (Alternating per section-local round instead left sections of a
// single round, D = 256, always dealt forward: 0.58-0.67x.)
struct ForwardTiles {
  int m_blocks = 0;       // query tiles per (head, sequence)
  int pairs = 0;          // Hq · sequences
  int section_pairs = 1;  // (head, sequence) pairs per section
  int count = 0;          // m_blocks · pairs
  int rounds = 1;         // rounds of gridDim.x tiles per section (the last section may use fewer)
  int steps = 0;          // sections · rounds: the length of every CTA's walk
  bool pair_major = false;  // the order inside a section: query blocks fastest (else pairs)
};

// The tile index a CTA takes at step `k` of its walk (section k / rounds, round k % rounds;
// the deal's direction flips with every step), or -1 where the step deals it none (the
// section's last round is short).
__device__ __forceinline__ int persistent_tile_index(const ForwardTiles& t, int k, int cta, int ctas) {
  const int section = k / t.rounds, round = k - section * t.rounds;
  const int section_tiles = t.section_pairs * t.m_blocks;
  const int tiles_here = min(t.section_pairs, t.pairs - section * t.section_pairs) * t.m_blocks;
  int seat = cta - (section * section_tiles) % ctas;  // this CTA's seat in the section's deal
  if (seat < 0) seat += ctas;
  const int place = round * ctas + ((k & 1) ? ctas - 1 - seat : seat);
  return place < tiles_here ? section * section_tiles + place : -1;
}

__device__ __forceinline__ ForwardTile persistent_tile(const ForwardTiles& t, int index, int Hq) {
  const int section_tiles = t.section_pairs * t.m_blocks;
  const int section = index / section_tiles;
  const int first_pair = section * t.section_pairs;
  const int pairs_here = min(t.section_pairs, t.pairs - first_pair);  // the last section may be short
  const int i = index - section * section_tiles;
  const int pair = first_pair + (t.pair_major ? i / t.m_blocks : i % pairs_here);
  const int m_block = t.m_blocks - 1 - (t.pair_major ? i % t.m_blocks : i / pairs_here);
  return {m_block, pair % Hq, pair / Hq};
}

// The kernel's arguments: tensor maps live in parameter space (__grid_constant__).
struct ForwardArgs {
  CUtensorMap q_map, k_map, v_map;  // 4-d: (D, rows, heads, batch), box (64, rows of a tile, 1, 1)
  AttentionParams p;
  ForwardTiles tiles;  // the persistent schedule's list, and the sectioned grid's
  // Non-persistent: CTA blockIdx.x of a 1-D grid takes tile blockIdx.x of `tiles`' list
  // (attention_forward_sections), instead of the 3-D grid's cell.
  bool sectioned_grid = false;
  bool narrow_first = false;  // ForwardConfig::kNarrowWidths taken (attention_forward_narrow_first)
  bool lazy_rescale = false;  // kLazyRescaleLog2 as the threshold, else 0 (attention_forward_lazy_rescale)
  // Non-persistent: out through shared memory and o_map (box 64 columns × 64 rows), where a
  // warpgroup's rows lie inside its sequence or the tensor clips them
  // (attention_forward_staged_output).
  bool staged_output = false;
  CUtensorMap o_map;
};

// How far (log2 domain) a block's maximum may exceed a row's running maximum before the row
// moves to it and its output is rescaled: exponents stay below 2^8, exact enough in the
// 16-bit P and the float sums, and most blocks after a tile's first skip the rescale.
inline constexpr float kLazyRescaleLog2 = 8.f;

// One sequence's place in the tensors.
struct Sequence {
  int64_t q_start, k_start;  // first row within the rows dimension
  int len_q, len_k;
  int batch;  // coordinate of the batch dimension (0 with cu_seqlens)
};

__device__ __forceinline__ int64_t load_offset(const void* cu, bool is_int64, int i) {
  return is_int64 ? static_cast<const int64_t*>(cu)[i] : static_cast<const int32_t*>(cu)[i];
}

__device__ __forceinline__ Sequence sequence_of(const AttentionParams& p, int n) {
  if (!p.cu_seqlens_q)
    return {0, 0, static_cast<int>(p.rows_q), static_cast<int>(p.rows_k), n};
  const int64_t q0 = load_offset(p.cu_seqlens_q, p.cu_seqlens_q_int64, n);
  const int64_t q1 = load_offset(p.cu_seqlens_q, p.cu_seqlens_q_int64, n + 1);
  const int64_t k0 = load_offset(p.cu_seqlens_k, p.cu_seqlens_k_int64, n);
  const int64_t k1 = load_offset(p.cu_seqlens_k, p.cu_seqlens_k_int64, n + 1);
  return {q0, k0, static_cast<int>(q1 - q0), static_cast<int>(k1 - k0), 0};
}

// The keys a query tile sees end here: at the sequence end, or at the causal diagonal
// (query i sees key j iff j <= i + len_k - len_q).
template <int kBlockM>
__device__ __forceinline__ int key_end(const Sequence& s, int m_block, bool causal) {
  int end = s.len_k;
  if (causal) end = min(end, (m_block + 1) * kBlockM + s.len_k - s.len_q);
  return max(end, 0);
}

// Key blocks a query tile needs.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int key_blocks(const Sequence& s, int m_block, bool causal) {
  return (key_end<kBlockM>(s, m_block, causal) + kBlockN - 1) / kBlockN;
}

// The width a tile's first key block runs at, given the keys it holds: when `narrow`, the
// narrowest of the first kNarrowWidths of 64 and 112 (ForwardConfig::kNarrowWidths) they fit,
// else kBlockN.
template <int kNarrowWidths, int kBlockN>
__device__ __forceinline__ int first_block_width(int keys, bool narrow) {
  if (kNarrowWidths == 0 || !narrow) return kBlockN;
  if (keys <= 64) return 64;
  return kNarrowWidths > 1 && keys <= 112 ? 112 : kBlockN;
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Online softmax state of the two rows a thread holds in a 64-row accumulator (rows
// lane/4 and lane/4 + 8 of its warp's 16), in the log2 domain.
struct RowState {
  float max[2] = {-INFINITY, -INFINITY};  // running max of scale·log2(e)·s
  float sum[2] = {0.f, 0.f};              // this thread's share of Σ exp2(· − max)
};

// The largest of a row's scores in s (the thread's kBlockN / 4 values of row r), or the
// smallest when kSmallest: a pairwise tree, 6 dependent steps at kBlockN = 176 instead of 22.
template <bool kSmallest, int kBlockN>
__device__ __forceinline__ float row_extreme(const float (&s)[kBlockN / 2], int r) {
  constexpr int kGroups = kBlockN / 8;
  float m[kGroups];
#pragma unroll
  for (int c = 0; c < kGroups; ++c)
    m[c] = kSmallest ? fminf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]) : fmaxf(s[4 * c + 2 * r], s[4 * c + 2 * r + 1]);
#pragma unroll
  for (int width = 1; width < kGroups; width *= 2)
#pragma unroll
    for (int c = 0; c + width < kGroups; c += 2 * width)
      m[c] = kSmallest ? fminf(m[c], m[c + width]) : fmaxf(m[c], m[c + width]);
  return m[0];
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}

// The maximum a row's exponents are taken against after a block whose largest scaled score
// is `block_max` (log2 domain): the running maximum `row_max` is kept unless the block's
// exceeds it by more than `threshold` (its exponents then stay below 2^threshold), else it
// moves to the block's and `correction` (what the row's sum and output are multiplied by)
// is the exponent of the move; exactly 1 when kept. A threshold of 0 moves it whenever it
// grows. Returns the base of the block's exponents (0 for a row with nothing visible yet).
__device__ __forceinline__ float advance_row_max(float& row_max, float block_max, float threshold,
                                                 float& correction) {
  const bool moves = block_max > row_max + threshold;
  const float base_max = moves ? block_max : row_max;
  const float base = base_max == -INFINITY ? 0.f : base_max;
  correction = moves ? ex2_fast(row_max - base) : 1.f;
  row_max = base_max;
  return base;
}

// The exponents of a thread's two rows of s, one row after the other: the row maximum (of
// the scaled scores, in the log2 domain), the correction of the row's running state, the
// exponents and their sum.
template <int kBlockN>
__device__ __forceinline__ void softmax_row_by_row(float (&s)[kBlockN / 2], RowState& st, float (&correction)[2],
                                                   float scale_log2, float threshold, bool positive) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float block_max;  // of the scaled scores, in the log2 domain
    if (positive)
      block_max = quad_max(row_extreme<false, kBlockN>(s, r)) * scale_log2;
    else
      block_max = -quad_max(-row_extreme<true, kBlockN>(s, r)) * scale_log2;
    const float base = advance_row_max(st.max[r], block_max, threshold, correction[r]);
    float sum = st.sum[r] * correction[r];
#pragma unroll
    for (int c = 0; c < kBlockN / 8; ++c) {
      s[4 * c + 2 * r] = ex2_fast(fmaf(s[4 * c + 2 * r], scale_log2, -base));
      s[4 * c + 2 * r + 1] = ex2_fast(fmaf(s[4 * c + 2 * r + 1], scale_log2, -base));
      sum += s[4 * c + 2 * r] + s[4 * c + 2 * r + 1];
    }
    st.sum[r] = sum;
  }
}

// The same with both rows side by side: their reductions, shuffles and exponent chains are
// independent, so one warp keeps more instructions in flight (ncu: 36 % of the pingpong
// consumers' samples were waits on the previous instruction's latency when the rows went one
// after the other). The sums go into two partial sums per row: four addition chains.
template <int kBlockN>
__device__ __forceinline__ void softmax_rows_together(float (&s)[kBlockN / 2], RowState& st,
                                                      float (&correction)[2], float scale_log2, float threshold,
                                                      bool positive) {
  float block_max[2];  // of the raw scores (their negated minimum when the scale is negative)
#pragma unroll
  for (int r = 0; r < 2; ++r)
    block_max[r] = positive ? row_extreme<false, kBlockN>(s, r) : -row_extreme<true, kBlockN>(s, r);
#pragma unroll
  for (int step = 1; step <= 2; step *= 2)
#pragma unroll
    for (int r = 0; r < 2; ++r) block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xffffffff, block_max[r], step));
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
    base[r] = advance_row_max(st.max[r], (positive ? block_max[r] : -block_max[r]) * scale_log2, threshold,
                              correction[r]);
  float sum[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int c = 0; c < kBlockN / 8; ++c)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float& x = s[4 * c + 2 * r + j];
        x = ex2_fast(fmaf(x, scale_log2, -base[r]));
        sum[r][j] += x;
      }
#pragma unroll
  for (int r = 0; r < 2; ++r) st.sum[r] = st.sum[r] * correction[r] + (sum[r][0] + sum[r][1]);
}

// Scores s (64 x kBlockN accumulator fragment) -> unnormalised probabilities in place;
// returns in correction[r] the factor the output rows must be rescaled by.
// limit[r]: keys at or past it are masked (only when kMask).
// The scores stay unscaled until the exponent: the row's largest scaled score is the scale
// times its largest raw score (its smallest when the scale is negative), and each
// probability is exp2(s · scale·log2(e) − max), one FFMA before the ex2 instead of a
// multiply of every score up front and a subtraction after.
// kRowsTogether: both rows side by side (pingpong and persistent at D = 128 and 256: +1-3 %
// on the H100), or one after the other (standard, where both warpgroups run their softmax at
// the same time and the side-by-side order measured 3-4 % slower; D = 64, 0 to -1 %).
template <bool kMask, bool kRowsTogether, int kBlockN>
__device__ __forceinline__ void softmax_step(float (&s)[kBlockN / 2], RowState& st, float (&correction)[2],
                                             float scale_log2, float threshold, int key0, const int (&limit)[2],
                                             int lane) {
  const bool positive = scale_log2 > 0.f;
  if constexpr (kMask) {
    const float hidden = positive ? -INFINITY : INFINITY;  // becomes -inf once scaled
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      const int key = key0 + (i / 4) * 8 + 2 * (lane % 4) + (i & 1);
      if (key >= limit[(i >> 1) & 1]) s[i] = hidden;
    }
  }
  if constexpr (kRowsTogether)
    softmax_rows_together<kBlockN>(s, st, correction, scale_log2, threshold, positive);
  else
    softmax_row_by_row<kBlockN>(s, st, correction, scale_log2, threshold, positive);
}

template <int D>
__device__ __forceinline__ void rescale_output(float (&o)[D / 2], const float (&correction)[2]) {
#pragma unroll
  for (int c = 0; c < D / 8; ++c) {
    o[4 * c] *= correction[0];
    o[4 * c + 1] *= correction[0];
    o[4 * c + 2] *= correction[1];
    o[4 * c + 3] *= correction[1];
  }
}

// The accumulator fragment of S, as 16-bit A-operand fragments of P for the PV wgmma:
// the m64nNk16 accumulator layout and the register A layout coincide per 16 columns.
template <class T, int kBlockN>
__device__ __forceinline__ void probabilities_to_operand(const float (&s)[kBlockN / 2],
                                                         uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) p[kk][j] = pack2<T>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
}

// The epilogue of a thread's two rows (row0 and row0 + 8): O / rowsum as packed pairs of
// columns 8c + 2·(lane % 4), handed to put(r, c, pair), and the log-sum-exp (natural log)
// stored for the rows below len_q.
template <class T, int D, class Put>
__device__ __forceinline__ void finish_rows(const AttentionParams& p, const Sequence& seq, int head, int row0,
                                            const float (&o)[D / 2], const RowState& st, int lane, Put put) {
  constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float total = quad_sum(st.sum[r]);
    const float inv = total > 0.f ? 1.f / total : 0.f;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) put(r, c, pack2<T>(o[4 * c + 2 * r] * inv, o[4 * c + 2 * r + 1] * inv));
    const int row = row0 + 8 * r;
    if (row < seq.len_q && lane % 4 == 0)
      p.lse[seq.batch * p.lse_stride_batch + head * p.lse_stride_head + (seq.q_start + row) * p.lse_stride_row] =
          total > 0.f ? (st.max[r] + __log2f(total)) * kLn2 : -INFINITY;
  }
}

// O / rowsum to out by direct stores (rows below len_q only), and the lse. Each row's address
// is formed inside the store: a row pointer held across both rows made ptxas serialize the
// persistent D = 128 kernel's wgmma pipeline (NOTES.md).
template <class T, int D>
__device__ __forceinline__ void store_output(const AttentionParams& p, const Sequence& seq, int head, int row0,
                                             const float (&o)[D / 2], const RowState& st, int lane) {
  finish_rows<T, D>(p, seq, head, row0, o, st, lane, [&](int r, int c, uint32_t pair) {
    const int row = row0 + 8 * r;
    if (row >= seq.len_q) return;
    T* out = static_cast<T*>(p.out.data) + seq.batch * p.out.stride_batch + (seq.q_start + row) * p.out.stride_row +
             head * p.out.stride_head;
    *reinterpret_cast<uint32_t*>(out + 8 * c + 2 * (lane % 4)) = pair;
  });
}

// O / rowsum through shared memory, and the lse: the consumer warpgroup's 64 rows written
// into `rows` (its rows of the Q tile, free after its last QKᵀ product: chunks of 64 columns
// `chunk_bytes` apart, rows of 128 bytes in the 128-byte swizzle that o_map's copies use),
// then stored by one thread with a tensor copy a chunk (rows past the tensor's are clipped:
// the caller keeps varlen rows past the sequence's end out of it). `first_row`: the
// warpgroup's first row in the tile's sequence; row0 as in finish_rows.
template <class T, int D>
__device__ __forceinline__ void store_output_staged(const CUtensorMap& o_map, uint8_t* rows, uint32_t chunk_bytes,
                                                    int barrier, const AttentionParams& p, const Sequence& seq,
                                                    int head, int first_row, int row0, const float (&o)[D / 2],
                                                    const RowState& st, int lane) {
  const int local = row0 - first_row;  // and local + 8: the same row % 8, so the same swizzle
  uint8_t* row_bytes = rows + local * 128 + 4 * (lane % 4);
  finish_rows<T, D>(p, seq, head, row0, o, st, lane, [&](int r, int c, uint32_t pair) {
    const int unit = (c % 8) ^ (local % 8);
    *reinterpret_cast<uint32_t*>(row_bytes + (c / 8) * chunk_bytes + 8 * r * 128 + unit * 16) = pair;
  });
  fence_async_shared();
  named_barrier_sync(barrier, 128);
  if (threadIdx.x % 128 == 0) {
#pragma unroll
    for (int chunk = 0; chunk < D / 64; ++chunk)
      tma::store_box(o_map, rows + chunk * chunk_bytes, 64 * chunk, static_cast<int>(seq.q_start) + first_row, head,
                     seq.batch);
    tma::bulk_commit();
    tma::bulk_wait_read();
  }
}

template <class T, int D, AttentionForwardSchedule kSchedule, int kConsumers>
__global__ void __launch_bounds__(ForwardConfig<T, D, kSchedule, kConsumers>::kThreads, 1)
    forward_kernel(const __grid_constant__ ForwardArgs args) {
  using Cfg = ForwardConfig<T, D, kSchedule, kConsumers>;
  constexpr bool kPingpong = Cfg::kPingpong;
  constexpr bool kPersistent = kSchedule == AttentionForwardSchedule::persistent;
  // The softmax's rows side by side where that measured faster (softmax_step).
  constexpr bool kRowsTogether = kPingpong && D >= 128;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  const AttentionParams& p = args.p;

  // The tiles of this CTA: its grid cell (x reversed: each pair's longest causal tiles first)
  // or its place in the ordered list (ForwardTiles; sectioned_grid), or, when persistent, the
  // steps of its walk through that list. Producer and
  // consumers call this with the same steps and skip the same ones.
  const int walk_steps = kPersistent ? args.tiles.steps : 1;
  auto tile_at = [&](int step) -> ForwardTile {
    if constexpr (kPersistent) {
      const int index =
          persistent_tile_index(args.tiles, step, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
      if (index < 0) return {args.tiles.m_blocks, 0, 0};  // no tile: past every sequence's end
      return persistent_tile(args.tiles, index, static_cast<int>(p.Hq));
    } else {
      const int cta = static_cast<int>(blockIdx.x);
      if (args.sectioned_grid) return persistent_tile(args.tiles, cta, static_cast<int>(p.Hq));
      return {static_cast<int>(gridDim.x - 1 - blockIdx.x), static_cast<int>(blockIdx.y),
              static_cast<int>(blockIdx.z)};
    }
  };

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* q_tile = smem + Cfg::kQOffset;
  uint8_t* k_tiles = smem + Cfg::kKOffset;
  uint8_t* v_tiles = smem + Cfg::kVOffset;
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
  uint64_t* q_empty = q_full + 1;  // persistent: the Q tile may be overwritten
  uint64_t* k_full = q_empty + 1;
  uint64_t* v_full = k_full + kStages;
  // standard: k_empty guards the whole stage (K and V); pingpong: K and V separately.
  uint64_t* k_empty = v_full + kStages;
  uint64_t* v_empty = k_empty + kStages;

  if (threadIdx.x == 0) {
    tma::barrier_init(q_full, 1);
    tma::barrier_init(q_empty, Cfg::kConsumerWarps);
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(&k_full[s], 1);
      tma::barrier_init(&v_full[s], 1);
      tma::barrier_init(&k_empty[s], Cfg::kConsumerWarps);
      tma::barrier_init(&v_empty[s], Cfg::kConsumerWarps);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int lane = threadIdx.x % 32;
  const int heads_per_kv = static_cast<int>(p.Hq / p.Hkv);

  // Producer and consumers walk the same tiles and count the same two things: tiles with
  // work (the Q tile's phase) and key blocks over all tiles (the K/V stages' phases).
  if (warpgroup == 0) {  // producer
    release_registers<Cfg::kProducerRegisters>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&args.q_map);
      prefetch_tensor_map(&args.k_map);
      prefetch_tensor_map(&args.v_map);
      int tiles_loaded = 0, blocks_loaded = 0;
      for (int step = 0; step < walk_steps; ++step) {
        const ForwardTile tile = tile_at(step);
        const Sequence seq = sequence_of(p, tile.sequence);
        if (tile.m_block * kBlockM >= seq.len_q) continue;
        const int n_blocks = key_blocks<kBlockM, kBlockN>(seq, tile.m_block, p.causal);
        if (n_blocks == 0) continue;
        const int kv_head = tile.head / heads_per_kv;
        tma::wait(q_empty, (tiles_loaded & 1) ^ 1);
        ++tiles_loaded;
        const int q_row = static_cast<int>(seq.q_start) + tile.m_block * kBlockM;
        tma::arrive_expect_bytes(q_full, Cfg::kQBytes);
        for (int c = 0; c < Cfg::kChunks; ++c)
          tma::load_box(q_tile + c * kBlockM * 128, args.q_map, 64 * c, q_row, tile.head, seq.batch, q_full);
        for (int it = 0; it < n_blocks; ++it, ++blocks_loaded) {
          const int n = n_blocks - 1 - it, stage = blocks_loaded % kStages;
          const uint32_t phase = (blocks_loaded / kStages) & 1;
          tma::wait(&k_empty[stage], phase ^ 1);
          const int k_row = static_cast<int>(seq.k_start) + n * kBlockN;
          uint8_t* k_dst = k_tiles + stage * Cfg::kKVBytes;
          uint8_t* v_dst = v_tiles + stage * Cfg::kKVBytes;
          tma::arrive_expect_bytes(&k_full[stage], Cfg::kKVBytes);
          for (int c = 0; c < Cfg::kChunks; ++c)
            tma::load_box(k_dst + c * kBlockN * 128, args.k_map, 64 * c, k_row, kv_head, seq.batch, &k_full[stage]);
          if constexpr (kPingpong) tma::wait(&v_empty[stage], phase ^ 1);
          tma::arrive_expect_bytes(&v_full[stage], Cfg::kKVBytes);
          for (int c = 0; c < Cfg::kChunks; ++c)
            tma::load_box(v_dst + c * kBlockN * 128, args.v_map, 64 * c, k_row, kv_head, seq.batch, &v_full[stage]);
        }
      }
    }
    return;
  }

  // consumers
  claim_registers<Cfg::kConsumerRegisters>();
  const int wg = warpgroup - 1;
  const int warp = (threadIdx.x % 128) / 32;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const float threshold = args.lazy_rescale ? kLazyRescaleLog2 : 0.f;
  const uint8_t* q_rows = q_tile + wg * 64 * 128;
  auto release = [&](uint64_t* empty) {
    __syncwarp();
    if (lane == 0) tma::arrive(empty);
  };
  // S_j = Q·K_jᵀ is issued before O += P_{j-1}·V_{j-1}, so the softmax of block j runs
  // while the tensor cores still work on the previous block's PV product.
  // s holds W / 2 scores a thread for the first W keys of the stage (W = kBlockN but for a
  // narrow first block).
  auto issue_scores = [&](auto& s, int stage) {
    constexpr int W = 2 * static_cast<int>(sizeof(s) / sizeof(float));
    const uint8_t* k_tile = k_tiles + stage * Cfg::kKVBytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int chunk = kk / 4, offset = (kk % 4) * 32;
      gmma_ss<T, W>(smem_descriptor(q_rows + chunk * kBlockM * 128 + offset, 16),
                    smem_descriptor(k_tile + chunk * kBlockN * 128 + offset, 16), s, kk > 0);
    }
    wgmma_commit();
  };
  auto issue_output = [&](const uint32_t(&prob)[kBlockN / 16][4], float(&o)[D / 2], int stage) {
    const uint8_t* v_tile = v_tiles + stage * Cfg::kKVBytes;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      gmma_rs<T, D>(prob[kk], smem_descriptor(v_tile + kk * 16 * 128, kBlockN * 128), o);
    wgmma_commit();
  };
  // After the QKᵀ product of a stage (pingpong: K is free; persistent, after the tile's
  // last one: Q is free) and after its PV product.
  auto scores_done = [&](int stage, bool last_scores) {
    if constexpr (kPingpong) release(&k_empty[stage]);
    if constexpr (kPersistent)
      if (last_scores) release(q_empty);
  };
  auto output_done = [&](int stage) { release(kPingpong ? &v_empty[stage] : &k_empty[stage]); };
  // Pingpong turns around each issue of products: n_blocks + 1 issues per warpgroup and tile,
  // the warpgroups in a ring (0, 1[, 2], 0, ...). The last warpgroup lets warpgroup 0 go
  // first and does not pass the turn after its last issue, so each barrier completes exactly
  // n_blocks + 1 times per tile (128 waiting + 128 arriving) and the next tile starts from
  // the same state.
  constexpr int kLastConsumer = kConsumers - 1;
  auto take_turn = [&] {
    if constexpr (Cfg::kTurns) named_barrier_sync(kTurnBarrier + wg, 256);
  };
  auto pass_turn = [&](bool last_issue) {
    if constexpr (Cfg::kTurns)
      if (wg != kLastConsumer || !last_issue) named_barrier_arrive(kTurnBarrier + (wg + 1) % kConsumers, 256);
  };

  // Only the parities matter: bits 0-1 count key blocks mod 4 (stage and stage phase of
  // 2 stages), bit 2 tiles mod 2 (the Q tile's phase). One register through the main loop.
  static_assert(kStages == 2, "the packed counter holds key blocks mod 2 · kStages");
  uint32_t counters = 0;
  for (int step = 0; step < walk_steps; ++step) {
    const ForwardTile tile = tile_at(step);
    const int m_block = tile.m_block;
    const Sequence seq = sequence_of(p, tile.sequence);
    if (m_block * kBlockM >= seq.len_q) continue;
    const int end = key_end<kBlockM>(seq, m_block, p.causal);
    const int n_blocks = (end + kBlockN - 1) / kBlockN;
    const int first_width =
        first_block_width<Cfg::kNarrowWidths, kBlockN>(end - (n_blocks - 1) * kBlockN, args.narrow_first);
    const int row0 = m_block * kBlockM + wg * 64 + warp * 16 + lane / 4;  // and row0 + 8
    // out through shared memory (store_output_staged) where this warpgroup's rows lie inside
    // the sequence or past the tensor's end; persistent: only for a tile with key blocks (a
    // tile without them loads no Q, and the next tile's Q may be landing in that memory),
    // which then frees its Q tile after the copy, not after its last QKᵀ product.
    // Persistent at D = 128 only: at D = 64 (three warpgroups) and 256 the persistent kernels
    // spilled with it (ptxas: 56 and 4 bytes). Formed where it is used.
    auto staged = [&] {
      if constexpr (kPersistent && D != 128) return false;
      return args.staged_output && (p.cu_seqlens_q == nullptr || m_block * kBlockM + wg * 64 + 64 <= seq.len_q) &&
             (!kPersistent || n_blocks > 0);
    };
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    RowState st;
    // s: the scores of the block's first W keys (W < kBlockN: a narrow first block, whose
    // softmax is always the masked one, one instance a width).
    auto softmax = [&](auto& s, int n, float(&correction)[2]) {
      constexpr int W = 2 * static_cast<int>(sizeof(s) / sizeof(float));
      const int key0 = n * kBlockN;
      const bool mask = W < kBlockN || key0 + kBlockN > seq.len_k ||
                        (p.causal && key0 + kBlockN - 1 > m_block * kBlockM + seq.len_k - seq.len_q);
      // Formed here, for masked blocks only, rather than held through the main loop: at
      // D = 128 the persistent schedule's two registers more would spill.
      int limit[2];
      for (int r = 0; r < 2; ++r)
        limit[r] = p.causal ? min(seq.len_k, row0 + 8 * r + seq.len_k - seq.len_q + 1) : seq.len_k;
      if (mask)
        softmax_step<true, kRowsTogether, W>(s, st, correction, scale_log2, threshold, key0, limit, lane);
      else if constexpr (W == kBlockN)
        softmax_step<false, kRowsTogether, W>(s, st, correction, scale_log2, threshold, key0, limit, lane);
    };
    // Stage and phase of this tile's key block `it`, counted over all of the CTA's tiles.
    auto stage_of = [&](int it) { return static_cast<int>((counters + it) % kStages); };
    auto phase_of = [&](int it) { return ((counters + it) / kStages) & 1; };

    if (n_blocks > 0) {
      tma::wait(q_full, (counters >> 2) & 1);
      float s[kBlockN / 2];
      uint32_t prob[kBlockN / 16][4];
      float correction[2];
      tma::wait(&k_full[stage_of(0)], phase_of(0));
      if (Cfg::kTurns && wg == kLastConsumer) named_barrier_arrive(kTurnBarrier, 256);  // warpgroup 0 first
      // The first block at width W: its scores in the first W / 2 registers of s, its
      // probabilities in the first W / 16 slices of prob.
      auto first_block = [&](auto width) {
        constexpr int W = decltype(width)::value;
        float(&scores)[W / 2] = reinterpret_cast<float(&)[W / 2]>(s);
        take_turn();
        wgmma_fence();
        issue_scores(scores, stage_of(0));
        pass_turn(false);
        wgmma_wait<0>();
        fence_registers(scores);
        scores_done(stage_of(0), n_blocks == 1 && !staged());
        softmax(scores, n_blocks - 1, correction);  // o is still zero: no rescale
        probabilities_to_operand<T, W>(scores, reinterpret_cast<uint32_t(&)[W / 16][4]>(prob));
        // The PV product takes every slice (a narrower one serialized the wgmma pipeline):
        // the keys past W weigh zero.
#pragma unroll
        for (int kk = W / 16; kk < kBlockN / 16; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j) prob[kk][j] = 0u;
      };
      if constexpr (Cfg::kNarrowWidths > 0) {
        if (first_width == 64)
          first_block(std::integral_constant<int, 64>{});
        else if constexpr (Cfg::kNarrowWidths > 1) {
          if (first_width == 112)
            first_block(std::integral_constant<int, 112>{});
          else
            first_block(std::integral_constant<int, kBlockN>{});
        } else {
          first_block(std::integral_constant<int, kBlockN>{});
        }
      } else {
        first_block(std::integral_constant<int, kBlockN>{});
      }
      for (int it = 1; it < n_blocks; ++it) {
        const int stage = stage_of(it), previous = stage_of(it - 1);
        tma::wait(&k_full[stage], phase_of(it));
        if constexpr (kPingpong) tma::wait(&v_full[previous], phase_of(it - 1));  // before the turn
        take_turn();
        wgmma_fence();
        issue_scores(s, stage);
        if constexpr (!kPingpong) tma::wait(&v_full[previous], phase_of(it - 1));
        issue_output(prob, o, previous);
        pass_turn(false);
        wgmma_wait<1>();  // the scores are in; the PV product may still run
        fence_registers(s);
        scores_done(stage, it == n_blocks - 1 && !staged());
        softmax(s, n_blocks - 1 - it, correction);
        wgmma_wait<0>();
        fence_registers(o);
        fence_registers(prob);
        output_done(previous);
        // Skipped by a whole warp when none of its rows moved its maximum (lazy rescale).
        if (!args.lazy_rescale || __any_sync(0xffffffff, correction[0] != 1.f || correction[1] != 1.f))
          rescale_output<D>(o, correction);
        probabilities_to_operand<T, kBlockN>(s, prob);
      }
      const int last = stage_of(n_blocks - 1);
      tma::wait(&v_full[last], phase_of(n_blocks - 1));
      take_turn();
      wgmma_fence();
      issue_output(prob, o, last);
      pass_turn(true);
      wgmma_wait<0>();
      fence_registers(o);
      fence_registers(prob);
      output_done(last);
      counters = ((counters & 4) ^ 4) | ((counters + n_blocks) & 3);
    }
    if (staged()) {
      store_output_staged<T, D>(args.o_map, q_tile + wg * 64 * 128, kBlockM * 128, kStageBarrier + wg, p, seq,
                                tile.head, m_block * kBlockM + wg * 64, row0, o, st, lane);
      if constexpr (kPersistent) {  // the Q tile is free for the next tile's copy once read
        named_barrier_sync(kStageBarrier + wg, 128);
        release(q_empty);
      }
      continue;
    }
    store_output<T, D>(p, seq, tile.head, row0, o, st, lane);
  }
}

}  // namespace seqmix::cuda::attn
