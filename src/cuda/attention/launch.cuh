// Launchers: tensor maps for the TMA copies, the grid, the launch.
#pragma once

#include <cuda.h>

#include <algorithm>

#include "cuda/attention/forward.cuh"
#include "cuda/common/runtime.cuh"
#include "cuda/common/tensor_map.hpp"

namespace seqmix::cuda::attn {

// A 4-d map (D, rows, heads, batch) of a [B, S, H, D] view, read in boxes of 64 head-dim
// columns (128 bytes, 128-byte swizzle) × box_rows rows. Rows past `rows` read as zeros.
template <class T>
CUtensorMap tensor_map(const AttentionView& view, int64_t rows, int64_t heads, int64_t batch, int64_t D,
                       int box_rows) {
  const HeadRowsShape shape{std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            D, rows, heads, batch, view.stride_row, view.stride_head, view.stride_batch};
  return make_head_rows_map(view.data, shape, box_rows, "attention operand");
}

// Whether the copy engine can write a [B, S, H, D] view: a 16-byte aligned base and strides
// of 16-byte multiples (elements of 2 bytes).
inline bool copy_aligned(const AttentionView& view) {
  return reinterpret_cast<uintptr_t>(view.data) % 16 == 0 && view.stride_row % 8 == 0 && view.stride_head % 8 == 0 &&
         view.stride_batch % 8 == 0;
}

// The current device's multiprocessor count, asked once per process (one device at a time
// is enough here: the count only sizes the persistent grid).
inline int multiprocessor_count() {
  static const int count = seqmix::cuda::multiprocessor_count();
  return count;
}

// The persistent schedule's tile list (ForwardTiles) for a grid of `ctas`. Causal: sections
// of (head, sequence) pairs whose K and V take about kSectionBytes, so the longest-first
// order inside a section keeps its K/V in L2. Non-causal: one section in the plain grid's
// order (every tile is as long; the query blocks of one head run side by side over the same
// K/V). One section, not one per pair: a walk step that deals a CTA no tile costs a few
// hundred clocks of index arithmetic, and with sections of one pair (16 tiles at S2048)
// seven steps in eight were empty (measured: persistent 3 % slower at S2048 than with the
// plain deal, 1 % at S4096).
inline ForwardTiles persistent_tiles(const AttentionParams& p, int64_t m_blocks, size_t element_bytes, int ctas) {
  constexpr int64_t kSectionBytes = 16 << 20;
  ForwardTiles tiles;
  tiles.m_blocks = static_cast<int>(m_blocks);
  tiles.pairs = static_cast<int>(p.Hq * p.num_sequences);
  const int64_t kv_bytes = std::max<int64_t>(2 * p.max_seqlen_k * p.D * static_cast<int64_t>(element_bytes), 1);
  tiles.section_pairs =
      p.causal ? static_cast<int>(std::clamp<int64_t>(kSectionBytes / kv_bytes, 1, tiles.pairs)) : tiles.pairs;
  tiles.pair_major = !p.causal;
  tiles.count = tiles.m_blocks * tiles.pairs;
  const int section_tiles = tiles.section_pairs * tiles.m_blocks;
  const int sections = (tiles.pairs + tiles.section_pairs - 1) / tiles.section_pairs;
  tiles.rounds = (section_tiles + ctas - 1) / ctas;
  tiles.steps = sections * tiles.rounds;
  return tiles;
}

// The causal query-tile counts a sequence (of 128 rows at D 128 and 256) where the sectioned
// grid measured faster than the 3-D grid on the H100 (NOTES.md, "The causal forward's tiles
// launched longest first across pairs"): 16–64, i.e. 2048–8192 queries, +0.3–2.8 % at D 128 and
// +4.9 % at D 256 S2048; it lost 5 % at 8 tiles (S1024) and 0.5 % at 128 (S16384).
inline constexpr int64_t kSectionsMinQueryTiles = 16, kSectionsMaxQueryTiles = 64;

template <class T, int D, AttentionForwardSchedule kSchedule, int kConsumers = 2>
void launch_forward_schedule(const AttentionParams& p) {
  using Cfg = ForwardConfig<T, D, kSchedule, kConsumers>;
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  ForwardArgs args;
  args.q_map = tensor_map<T>(p.q, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.k_map = tensor_map<T>(p.k, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.v_map = tensor_map<T>(p.v, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.p = p;
  args.narrow_first = attention_forward_narrow_first();
  args.lazy_rescale = attention_forward_lazy_rescale();
  args.staged_output = attention_forward_staged_output();
  if (args.staged_output) args.o_map = tensor_map<T>(p.out, p.rows_q, p.Hq, batch, D, 64);
  const auto kernel = forward_kernel<T, D, kSchedule, kConsumers>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention forward)");
  const int64_t m_blocks = (p.max_seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.Hq), static_cast<unsigned>(p.num_sequences));
  if constexpr (kSchedule == AttentionForwardSchedule::persistent) {
    const int ctas = static_cast<int>(std::clamp<int64_t>(m_blocks * p.Hq * p.num_sequences, 1, multiprocessor_count()));
    args.tiles = persistent_tiles(p, m_blocks, sizeof(T), ctas);
    grid = dim3(static_cast<unsigned>(ctas), 1, 1);
  } else if (p.causal && attention_forward_sections() && m_blocks >= kSectionsMinQueryTiles &&
             m_blocks <= kSectionsMaxQueryTiles) {
    args.tiles = persistent_tiles(p, m_blocks, sizeof(T), multiprocessor_count());
    args.sectioned_grid = true;
    grid = dim3(static_cast<unsigned>(args.tiles.count), 1, 1);
  }
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(args);
  check_launch("attention forward");
}

// by_shape: persistent where it measured faster than pingpong on the H100 once both wrote out
// through shared memory (NOTES.md, "The output through shared memory"): causal D = 64
// (1.01-1.03x) and D = 256 from 4096 keys (1.03-1.04x at two of four points, 0.99x at the
// others; below 4096 keys 0.87-0.97x), and only where a CTA has more than one tile to walk.
// D = 128 stays pingpong (persistent 0.92-0.98x, causal included).
// Query tiles of `rows` rows (ForwardConfig::kBlockM: 64 a consumer warpgroup) over all heads
// and sequences.
inline int64_t query_tiles(const AttentionParams& p, int64_t rows) {
  return (p.max_seqlen_q + rows - 1) / rows * p.Hq * p.num_sequences;
}

template <int D>
AttentionForwardSchedule resolved_schedule(const AttentionParams& p, int consumers) {
  const AttentionForwardSchedule schedule = attention_forward_schedule();
  if (schedule != AttentionForwardSchedule::by_shape) return schedule;
  const bool walks = query_tiles(p, 64 * consumers) > multiprocessor_count();
  const bool persistent = D == 64 ? p.causal : D == 256 && p.max_seqlen_k >= 4096;
  return walks && persistent ? AttentionForwardSchedule::persistent : AttentionForwardSchedule::pingpong;
}

// Consumer warpgroups (attention_forward_warpgroups): at D = 64 three measured 1.03-1.15x
// two without a mask and 1.02-1.11x causal from S = 2048, but 0.89-0.91x causal at S = 512
// and 1024, where a 192-row tile's diagonal blocks are a larger share, and 0.83-0.89x on
// grids of fewer tiles than SMs (B2 H8 S256/S512: 32 and 48 CTAs of 192 rows against 32
// and 64 of 128), whose time is one CTA's. There one warpgroup (tiles of 64 rows, twice the
// CTAs, each without turns) where those tiles still fit one wave (NOTES.md).
template <int D>
int forward_consumers(const AttentionParams& p) {
  if (D != 64) return 2;
  const int chosen = attention_forward_warpgroups();
  if (chosen != 0) return chosen;
  if (query_tiles(p, 64) <= multiprocessor_count()) return 1;
  return (p.causal && p.max_seqlen_q < 2048) || query_tiles(p, 192) < multiprocessor_count() ? 2 : 3;
}

template <class T, int D>
void launch_forward(const AttentionParams& p) {
  const int consumers = forward_consumers<D>(p);
  const AttentionForwardSchedule schedule = resolved_schedule<D>(p, consumers);
  if constexpr (D == 64) {  // one warpgroup: pingpong only (other schedules take two)
    if (consumers == 1 && schedule == AttentionForwardSchedule::pingpong)
      return launch_forward_schedule<T, D, AttentionForwardSchedule::pingpong, 1>(p);
    if (consumers == 3 && schedule == AttentionForwardSchedule::pingpong)
      return launch_forward_schedule<T, D, AttentionForwardSchedule::pingpong, 3>(p);
    if (consumers == 3 && schedule != AttentionForwardSchedule::standard)
      return launch_forward_schedule<T, D, AttentionForwardSchedule::persistent, 3>(p);
  }
  switch (schedule) {
    case AttentionForwardSchedule::standard:
      return launch_forward_schedule<T, D, AttentionForwardSchedule::standard>(p);
    case AttentionForwardSchedule::pingpong:
      return launch_forward_schedule<T, D, AttentionForwardSchedule::pingpong>(p);
    case AttentionForwardSchedule::persistent:
    case AttentionForwardSchedule::by_shape:  // resolved above
      return launch_forward_schedule<T, D, AttentionForwardSchedule::persistent>(p);
  }
}

}  // namespace seqmix::cuda::attn
