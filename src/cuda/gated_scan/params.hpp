// Host-side description of a gated-scan launch: plain pointers and strides, no CUDA
// types, so src/core can fill it in without including CUDA headers.
#pragma once

#include <cstdint>

namespace seqmix::cuda {

// Where the sequences of a [B, T, D] batch live: B rows of length T, or with
// cu_seqlens (B = 1) N variable-length sequences.
struct SequenceLayout {
  int64_t num_sequences;         // N
  int64_t T;                     // the padded length (max length with cu_seqlens)
  const void* cu_seqlens;        // device pointer or nullptr
  bool cu_seqlens_int64;
};

// A [B, T, D] operand: element (b, t, d) lives at data + b*stride_batch + t*stride_time + d.
struct BtdView {
  void* data = nullptr;
  int64_t stride_batch = 0, stride_time = 0;
};

// A [N, D] float state: element (n, d) at data + n*stride + d.
struct StateView {
  float* data = nullptr;
  int64_t stride = 0;
};

struct GatedScanParams {
  SequenceLayout seq;
  int64_t D;
  int64_t tensor_batches = 0, tensor_rows = 0;  // B and T of the [B, T, D] tensors (B = 1 with cu_seqlens)
  int decay;            // seqmix::Decay: 0 direct, 1 log, 2 logit
  bool vector_aligned;  // every row start and pointer allows 16-byte accesses (and so 8-byte ones)
  BtdView a, b, z, y;   // z.data == nullptr: no gate
  StateView initial_state, final_state;
  // Backward only.
  BtdView dy, da, db, dz;
  StateView d_final_state, d_initial_state;
  // Scratch of gated_scan_workspace_floats(...) floats, or nullptr (forward only: then
  // the sequence is not split). Regions: a tile-state table (backward, when tile_states
  // is not given), then [N, splits, 2, D] forward and [N, splits, 2, D] reverse split maps.
  float* workspace = nullptr;
  // Tile-state table [tile_rows, D]: the state entering each tile, at row
  // tile_state_row(...). The forward writes it when given; the backward reads it when
  // given and skips recomputing it.
  float* tile_states = nullptr;
  int64_t tile_rows = 0;
  int64_t split_tiles = 0;  // tiles per split (grid.z = splits); set by the launcher
  void* stream = nullptr;
};

enum class ScanDtype { bf16, f16, f32 };

// Time steps each thread holds per tile (SEQMIX_SCAN_STEPS overrides it, to measure
// variants), and so the steps one block of 64 segments scans per tile (see tile.cuh).
#ifndef SEQMIX_SCAN_STEPS
#define SEQMIX_SCAN_STEPS 2
#endif
inline constexpr int kScanStepsPerThread = SEQMIX_SCAN_STEPS;
inline constexpr int64_t kScanTileSteps = 64 * kScanStepsPerThread;

inline constexpr int64_t scan_tiles(int64_t T) { return (T + kScanTileSteps - 1) / kScanTileSteps; }

// The tile-state table has a row per tile of every sequence. Sequence n, whose first
// token is row0 of the flattened B·T tokens, starts at row floor(row0 / tile) + n: rows
// never overlap, and B·T tokens in N sequences need at most ceil(B·T / tile) + N rows.
inline constexpr int64_t tile_state_rows(int64_t tokens, int64_t N) { return scan_tiles(tokens) + N; }
inline constexpr int64_t tile_state_row(int64_t row0, int64_t n, int64_t tile) {
  return row0 / kScanTileSteps + n + tile;
}

// Splitting sequences stops at this many (sequence, split) pairs: twice the SMs of any
// GPU this targets, so the split maps stay small.
inline constexpr int64_t kMaxSplitBlocks = 512;
inline constexpr int64_t max_splits(int64_t N, int64_t tiles) {
  const int64_t cap = (kMaxSplitBlocks + N - 1) / N;
  return tiles < cap ? tiles : cap;
}

// Floats of workspace a launch may use for `tokens` = B·T tokens in N sequences of at
// most T tokens: the tile-state table and both split-map regions.
inline constexpr int64_t gated_scan_workspace_floats(int64_t tokens, int64_t T, int64_t N, int64_t D) {
  return (tile_state_rows(tokens, N) + 4 * N * max_splits(N, scan_tiles(T))) * D;
}

// The layer kernel (layer.cuh): projection, scan and gate in one launch. x [B, T, d] and
// y [B, T, D] have a contiguous last dimension; weight [3·D, d] holds the a, b, z rows.
struct GatedScanLayerParams {
  const void* x = nullptr;
  int64_t x_stride_batch = 0, x_stride_time = 0;
  const void* weight = nullptr;
  int64_t weight_stride = 0;
  void* y = nullptr;
  int64_t y_stride_batch = 0, y_stride_time = 0;
  int64_t B = 0, T = 0, d = 0, D = 0;
  int decay = 2;             // seqmix::Decay
  float* workspace = nullptr;  // layer_workspace_floats(B, T, D): each chunk's (A, H) per channel
  void* stream = nullptr;
};

inline constexpr int64_t kLayerChunk = 64;     // tokens per CTA
inline constexpr int64_t kLayerChannels = 16;  // channels per CTA
inline constexpr int64_t layer_chunks(int64_t T) { return (T + kLayerChunk - 1) / kLayerChunk; }
inline constexpr int64_t layer_slabs(int64_t D) { return (D + kLayerChannels - 1) / kLayerChannels; }
inline constexpr int64_t layer_blocks(int64_t B, int64_t T, int64_t D) { return B * layer_chunks(T) * layer_slabs(D); }
inline constexpr int64_t layer_workspace_floats(int64_t B, int64_t T, int64_t D) { return 2 * B * layer_chunks(T) * D; }

template <ScanDtype dtype>
void gated_scan_layer_forward(const GatedScanLayerParams& p);
// How many CTAs of the layer kernel the current device runs at once (its grid may not exceed it).
template <ScanDtype dtype>
int64_t gated_scan_layer_capacity();

template <ScanDtype dtype>
void gated_scan_forward(const GatedScanParams& p);
template <ScanDtype dtype>
void gated_scan_backward(const GatedScanParams& p);

}  // namespace seqmix::cuda
