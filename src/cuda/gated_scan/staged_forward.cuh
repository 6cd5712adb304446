// Gated scan forward, staged (staged.cuh): the same tile scan as forward.cuh, with a, b
// and z arriving in shared memory through the copy engine instead of per-thread loads.
#pragma once

#include "cuda/gated_scan/staged.cuh"

namespace seqmix::cuda::scan {

// Wide: 16 lanes, 128-byte rows (whole cache lines), 8 rows per thread; two stages of
// three 16 KB boxes leave room for two blocks per SM. Narrow: 4 lanes (32-byte rows),
// four times the slabs, for batches too short to give every SM a wide block without
// splitting the sequences; four stages of 4 KB boxes.
template <class T>
using WideForward = StagedLayout<T, 16, 2, 3>;
template <class T>
using NarrowForward = StagedLayout<T, 4, 4, 3>;

template <class T, class L>
__global__ void __launch_bounds__(kThreads + 32, 2)
    staged_forward_kernel(const GatedScanParams p, const __grid_constant__ StagedMaps maps) {
  constexpr int kVec = L::kVec, kRows = L::kSteps;
  extern __shared__ __align__(128) unsigned char stages[];
  __shared__ StageBarriers<L::kStages> bars;
  __shared__ ScanShared<kVec, L::kLanes> shared;
  const BlockCoords c = BlockCoords::make<T, L::kLanes>(p.seq);
  const TileRange range = TileRange::make(p, c);
  if (range.empty()) return;
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;

  if (copy_warp_done<L>(bars, stages, maps, gated ? 3 : 2, c, range.first, range.end - range.first, 1)) return;

  const ScanThreadsSync sync;
  if (c.segment == 0) {
    float carry[kVec];
    entering_state(p, c, n, carry);
    publish_carry(shared, c.lane, carry);
  }

  const bool whole = whole_slab<L>(p.D);
  const int first_row = c.segment * kRows;
  for (int64_t tile = range.first, k = 0; tile < range.end; ++tile, ++k) {
    const int64_t t0 = tile * kScanTileSteps + first_row;  // time step of the thread's first row
    const int valid_rows = rows_inside<kRows>(c.length, t0);
    bars.wait_full(k);
    const int s = bars.stage(k);
    const unsigned char *a_box = L::box(stages, s, 0), *b_box = L::box(stages, s, 1), *z_box = L::box(stages, s, 2);

    // The thread's decays and own map h ↦ A·h + H (rows past the sequence: identity).
    float x[kRows][kVec], A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) A[i] = 1.f, H[i] = 0.f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const Pack<T> a = L::vector(a_box, first_row + r, c.lane), b = L::vector(b_box, first_row + r, c.lane);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        x[r][i] = r < valid_rows ? ForwardTile<T>::decay_of(p, a[i]) : 1.f;
        H[i] = x[r][i] * H[i] + (r < valid_rows ? b[i] : 0.f);
        A[i] *= x[r][i];
      }
    }
    exclusive_segment_scan(shared, c.lane, false, A, H, tile_A, tile_H, sync);

    float h[kVec], carry[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      carry[i] = shared.carry[i][c.lane];
      h[i] = A[i] * carry[i] + H[i];
    }
    sync();  // every thread has read the carry before segment 0 replaces it
    if (c.segment == 0) {
      float* states = p.tile_states ? p.tile_states + c.tile_row(p.seq, tile) * p.D : nullptr;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        if (states && c.d0 + i < p.D) states[c.d0 + i] = carry[i];  // kept for the backward
        shared.carry[i][c.lane] = tile_A[i] * carry[i] + tile_H[i];
      }
    }

    RowWriter<T> out(p.y, c, t0);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const Pack<T> b = L::vector(b_box, first_row + r, c.lane);
      float y[kVec];
      if (gated) {
        const Pack<T> z = L::vector(z_box, first_row + r, c.lane);
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          h[i] = x[r][i] * h[i] + b[i];
          y[i] = h[i] * silu(z[i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) y[i] = h[i] = x[r][i] * h[i] + b[i];
      }
      out.put(y, r < valid_rows, whole, c.d0, p.D);
    }
    bars.release(k);
  }

  sync();
  if (c.segment == 0 && p.final_state.data && range.end == range.tiles) write_carry(shared, c, p.final_state, n, p.D);
}

}  // namespace seqmix::cuda::scan
