// Gated scan forward: y_t = h_t ⊙ SiLU(z_t), h_t = a_t ⊙ h_{t-1} + b_t.
// One block per (sequence, channel slab, split of the sequence), tiles of 128 steps, the
// next tile's loads in flight while the current one is scanned (tile.cuh). When there
// are too few (sequence, slab) pairs to fill the GPU, the sequence is split: a first
// launch (summary.cuh) reduces each split to one affine map, and each block of the main
// launch composes the maps of the splits before it to find its starting state.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/gated_scan/tile.cuh"

namespace seqmix::cuda::scan {

// One thread's steps of a tile in registers: kStepsT steps of one channel vector.
template <class T, int kStepsT = kSteps>
struct ForwardTile {
  static constexpr int kTileSteps = kStepsT;
  Pack<T> a[kStepsT], b[kStepsT], z[kStepsT];

  __device__ void load(const GatedScanParams& p, const BlockCoords& c, int64_t tile, bool gated, bool need_b = true) {
    const float decay_identity = ForwardTile::decay_identity(p);
#pragma unroll
    for (int s = 0; s < kStepsT; ++s) {
      const int64_t t = c.step(tile, s);
      a[s] = scan::load<T>(p.a, c, t, p.D, p.vector_aligned, decay_identity);
      if (need_b) b[s] = scan::load<T>(p.b, c, t, p.D, p.vector_aligned, 0.f);
      if (gated) z[s] = scan::load<T>(p.z, c, t, p.D, p.vector_aligned, 0.f);
    }
  }
  // What masked steps' a holds, so they are the identity map: a factor of 1 (log 0; the
  // logit saturates).
  __device__ static float decay_identity(const GatedScanParams& p) {
    return p.decay == 1 ? 0.f : p.decay == 2 ? 1e30f : 1.f;
  }
  // The factors of h_{t-1}, computed once per tile.
  template <int kVec>
  __device__ void decays(const GatedScanParams& p, float (&x)[kStepsT][kVec]) const {
#pragma unroll
    for (int s = 0; s < kStepsT; ++s)
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[s][i] = decay_of(p, a[s][i]);
  }
  // The factor of h_{t-1} given a_t in the params' form.
  __device__ static float decay_of(const GatedScanParams& p, float a_value) {
    return decay_factor(p.decay, a_value);
  }
  // d(decay)/d(a), given the decay value.
  __device__ static float decay_grad(const GatedScanParams& p, float decay_value) {
    return p.decay == 1 ? decay_value : p.decay == 2 ? decay_value * (1.f - decay_value) : 1.f;
  }
  // The thread's own map h ↦ A·h + H over its steps, given the decays x.
  template <int kVec>
  __device__ void own_map(const float (&x)[kStepsT][kVec], float (&A)[kVec], float (&H)[kVec]) const {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      A[i] = 1.f;
      H[i] = 0.f;
#pragma unroll
      for (int s = 0; s < kStepsT; ++s) {
        H[i] = x[s][i] * H[i] + b[s][i];
        A[i] *= x[s][i];
      }
    }
  }
};

// The state entering the block's first tile, for the thread's channels: the initial
// state, carried through the maps of all earlier splits.
template <int kVec>
__device__ void entering_state(const GatedScanParams& p, const BlockCoords& c, int64_t n, float (&carry)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    carry[i] = p.initial_state.data && c.d0 + i < p.D ? p.initial_state.data[n * p.initial_state.stride + c.d0 + i]
                                                      : 0.f;
  if (p.split_tiles > 0)
    apply_split_maps(Workspace::make(p).forward_maps, n, 0, blockIdx.z, 1, p.D, c.d0, carry);
}

// Blocks per SM the forward is compiled for (SEQMIX_SCAN_FORWARD_BLOCKS overrides it, to
// measure): 3 fits its 80 registers; 4 caps them at 64.
#ifndef SEQMIX_SCAN_FORWARD_BLOCKS
#define SEQMIX_SCAN_FORWARD_BLOCKS 3
#endif

template <class T>
__global__ void __launch_bounds__(kThreads, SEQMIX_SCAN_FORWARD_BLOCKS) forward_kernel(const GatedScanParams p) {
  constexpr int kVec = Pack<T>::kVec;
  __shared__ ScanShared<kVec> shared;
  const BlockCoords c = BlockCoords::make<T>(p.seq);
  const TileRange range = TileRange::make(p, c);
  if (range.empty()) return;
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;

  if (c.segment == 0) {
    float carry[kVec];
    entering_state(p, c, n, carry);
#pragma unroll
    for (int i = 0; i < kVec; ++i) shared.carry[i][c.lane] = carry[i];
  }  // the scan's first barrier publishes the carry

  ForwardTile<T> cur, next;
  cur.load(p, c, range.first, gated);
  for (int64_t tile = range.first; tile < range.end; ++tile) {
    if (tile + 1 < range.end) next.load(p, c, tile + 1, gated);

    float x[kSteps][kVec], A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
    cur.decays(p, x);
    cur.own_map(x, A, H);
    exclusive_segment_scan(shared, c.lane, false, A, H, tile_A, tile_H);

    float h[kVec], carry[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      carry[i] = shared.carry[i][c.lane];
      h[i] = A[i] * carry[i] + H[i];
    }
    __syncthreads();  // every thread has read the carry before segment 0 replaces it
    if (c.segment == 0) {
      float* states = p.tile_states ? p.tile_states + c.tile_row(p.seq, tile) * p.D : nullptr;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        if (states && c.d0 + i < p.D) states[c.d0 + i] = carry[i];  // kept for the backward
        shared.carry[i][c.lane] = tile_A[i] * carry[i] + tile_H[i];
      }
    }

#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      float y[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        h[i] = x[s][i] * h[i] + cur.b[s][i];
        y[i] = gated ? h[i] * silu(cur.z[s][i]) : h[i];
      }
      store<T>(p.y, c, c.step(tile, s), p.D, p.vector_aligned, y);
    }
    cur = next;
  }

  __syncthreads();
  if (c.segment == 0 && p.final_state.data && range.end == range.tiles) {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (c.d0 + i < p.D) p.final_state.data[n * p.final_state.stride + c.d0 + i] = shared.carry[i][c.lane];
  }
}

}  // namespace seqmix::cuda::scan
