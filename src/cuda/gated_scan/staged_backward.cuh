// Gated scan backward, staged (staged.cuh): backward.cuh's pass 2 with a, b, dy and z
// arriving in shared memory through the copy engine, tiles taken from the last. It needs
// the forward's tile states (the entering state of every tile); without them the
// register kernel of backward.cuh runs instead.
#pragma once

#include "cuda/gated_scan/staged.cuh"

namespace seqmix::cuda::scan {

// Wide: 8 lanes, 64-byte rows, 4 rows per thread (the backward keeps h, u and the decays
// of every row in registers); three stages of four 8 KB boxes, two blocks per SM.
// Narrow: 4 lanes (32-byte rows), twice the slabs, for short batches (see the forward).
template <class T>
using WideBackward = StagedLayout<T, 8, 3, 4>;
template <class T>
using NarrowBackward = StagedLayout<T, 4, 4, 4>;

template <class T, class L>
__global__ void __launch_bounds__(kThreads + 32, 2)
    staged_backward_kernel(const GatedScanParams p, const __grid_constant__ StagedMaps maps) {
  constexpr int kVec = L::kVec, kRows = L::kSteps;
  extern __shared__ __align__(128) unsigned char stages[];
  __shared__ StageBarriers<L::kStages> bars;
  __shared__ ScanShared<kVec, L::kLanes> shared;
  const BlockCoords c = BlockCoords::make<T, L::kLanes>(p.seq);
  const TileRange range = TileRange::make(p, c);
  if (range.empty()) return;
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;

  if (copy_warp_done<L>(bars, stages, maps, gated ? 4 : 3, c, range.end - 1, range.end - range.first, -1)) return;

  const ScanThreadsSync sync;
  if (c.segment == 0) {  // c flowing into the block's last tile from later steps
    float carry[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      carry[i] = p.d_final_state.data && c.d0 + i < p.D ? p.d_final_state.data[n * p.d_final_state.stride + c.d0 + i]
                                                        : 0.f;
    if (p.split_tiles > 0)
      apply_split_maps(Workspace::make(p).reverse_maps, n, gridDim.z - 1, blockIdx.z, -1, p.D, c.d0, carry);
    publish_carry(shared, c.lane, carry);
  }

  const bool whole = whole_slab<L>(p.D);
  const int first_row = c.segment * kRows;
  const float* tile_states = p.tile_states + c.tile_row(p.seq, 0) * p.D;
  for (int64_t tile = range.end - 1, k = 0; tile >= range.first; --tile, ++k) {
    const int64_t t0 = tile * kScanTileSteps + first_row;
    const int valid_rows = rows_inside<kRows>(c.length, t0);
    float entering[kVec];  // the state entering the tile, kept by the forward
#pragma unroll
    for (int i = 0; i < kVec; ++i) entering[i] = c.d0 + i < p.D ? tile_states[tile * p.D + c.d0 + i] : 0.f;
    bars.wait_full(k);
    const int s = bars.stage(k);
    const unsigned char *a_box = L::box(stages, s, 0), *b_box = L::box(stages, s, 1), *dy_box = L::box(stages, s, 2),
                        *z_box = L::box(stages, s, 3);

    // h inside the tile: decays, the thread's own forward map, the forward tile scan.
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
    float h_before[kRows + 1][kVec];  // h_before[r] = h before row r; [kRows] after the last
#pragma unroll
    for (int i = 0; i < kVec; ++i) h_before[0][i] = A[i] * entering[i] + H[i];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const Pack<T> b = L::vector(b_box, first_row + r, c.lane);
#pragma unroll
      for (int i = 0; i < kVec; ++i) h_before[r + 1][i] = x[r][i] * h_before[r][i] + b[i];
    }

    // u = dy ⊙ SiLU(z) (zero past the sequence), the own reverse map, the reverse scan.
    float u[kRows][kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) A[i] = 1.f, H[i] = 0.f;
#pragma unroll
    for (int r = kRows - 1; r >= 0; --r) {
      const Pack<T> dy = L::vector(dy_box, first_row + r, c.lane);
      const Pack<T> z = gated ? L::vector(z_box, first_row + r, c.lane) : Pack<T>{};
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        u[r][i] = r < valid_rows ? (gated ? dy[i] * silu(z[i]) : dy[i]) : 0.f;
        H[i] = x[r][i] * (u[r][i] + H[i]);
        A[i] *= x[r][i];
      }
    }
    exclusive_segment_scan(shared, c.lane, true, A, H, tile_A, tile_H, sync);
    float flow[kVec];  // c flowing into the thread's last row from later rows
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float from_later_tiles = shared.carry[i][c.lane];
      flow[i] = A[i] * from_later_tiles + H[i];
      tile_H[i] = tile_A[i] * from_later_tiles + tile_H[i];
    }
    sync();  // every thread has read the carry before segment 0 replaces it
    if (c.segment == 0) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) shared.carry[i][c.lane] = tile_H[i];
    }

    const int64_t last = t0 + kRows - 1;  // rows are written last to first
    RowWriter<T> da_out(p.da, c, last, -1), db_out(p.db, c, last, -1), dz_out(p.dz, c, last, -1);
#pragma unroll
    for (int r = kRows - 1; r >= 0; --r) {
      const Pack<T> dy = L::vector(dy_box, first_row + r, c.lane);
      const Pack<T> z = gated ? L::vector(z_box, first_row + r, c.lane) : Pack<T>{};
      float da[kVec], db[kVec], dz[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float g = u[r][i] + flow[i];
        db[i] = g;
        da[i] = g * h_before[r][i] * ForwardTile<T>::decay_grad(p, x[r][i]);
        dz[i] = gated ? dy[i] * h_before[r + 1][i] * silu_grad(z[i]) : 0.f;
        flow[i] = x[r][i] * g;
      }
      const bool in_range = r < valid_rows;
      da_out.put(da, in_range, whole, c.d0, p.D);
      db_out.put(db, in_range, whole, c.d0, p.D);
      if (gated) dz_out.put(dz, in_range, whole, c.d0, p.D);
    }
    bars.release(k);
  }

  sync();
  if (c.segment == 0 && p.d_initial_state.data && range.first == 0) write_carry(shared, c, p.d_initial_state, n, p.D);
}

}  // namespace seqmix::cuda::scan
