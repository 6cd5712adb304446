// Gated scan backward. With g_t = dL/dh_t and c_t = decay_t·g_t (what step t passes back):
//   g_t = u_t + c_{t+1},  u_t = dy_t ⊙ SiLU(z_t),  c_{T+1} = dL/dh_T (final state),
//   db_t = g_t,  da_t = g_t·h_{t-1}·decay'(a_t),  dz_t = dy_t·h_t·SiLU'(z_t),
//   d h_0 = c_1.
// c_t = decay_t·(u_t + c_{t+1}) is an affine scan run backwards in time, so it uses the
// same tile scan as the forward. It needs h_{t-1}, rebuilt inside each tile from the
// state entering the tile: the forward's tile_states when the caller kept them, or else
// a first pass forward over a and b that stores them in the workspace. With split sequences, a block starts
// its forward pass from the forward split maps of the splits before it and its reverse
// pass from the reverse maps of the splits after it.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/gated_scan/summary.cuh"

namespace seqmix::cuda::scan {

template <class T>
__global__ void __launch_bounds__(kThreads) backward_kernel(const GatedScanParams p) {
  constexpr int kVec = Pack<T>::kVec;
  __shared__ ScanShared<kVec> shared;
  const BlockCoords c = BlockCoords::make<T>(p.seq);
  const TileRange range = TileRange::make(p, c);
  if (range.empty()) return;
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;
  const Workspace w = Workspace::make(p);
  const bool recompute = p.tile_states == nullptr;
  float* tile_states = (recompute ? w.tile_states : p.tile_states) + c.tile_row(p.seq, 0) * p.D;

  // Pass 1, forward: the state entering each tile, kept by segment 0 in registers.
  float carry[kVec];
  if (recompute) {
    entering_state(p, c, n, carry);
    ForwardTile<T> cur, next;
    cur.load(p, c, range.first, false);
    for (int64_t tile = range.first; tile < range.end; ++tile) {
      if (tile + 1 < range.end) next.load(p, c, tile + 1, false);
      float x[kSteps][kVec], A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
      cur.decays(p, x);
      cur.own_map(x, A, H);
      exclusive_segment_scan(shared, c.lane, false, A, H, tile_A, tile_H);
      if (c.segment == 0) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          if (c.d0 + i < p.D) tile_states[tile * p.D + c.d0 + i] = carry[i];
          carry[i] = tile_A[i] * carry[i] + tile_H[i];
        }
      }
      cur = next;
    }
  }

  // Pass 2, backward in time. shared.carry holds c flowing into the tile from later tiles.
  if (c.segment == 0) {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      carry[i] = p.d_final_state.data && c.d0 + i < p.D ? p.d_final_state.data[n * p.d_final_state.stride + c.d0 + i]
                                                        : 0.f;
    if (p.split_tiles > 0) apply_split_maps(w.reverse_maps, n, gridDim.z - 1, blockIdx.z, -1, p.D, c.d0, carry);
#pragma unroll
    for (int i = 0; i < kVec; ++i) shared.carry[i][c.lane] = carry[i];
  }
  __syncthreads();  // pass 1 wrote the tile states from segment 0; all threads read them below
  ReverseTile<T> cur, next;
  cur.load(p, c, range.end - 1, gated, true);
  for (int64_t tile = range.end - 1; tile >= range.first; --tile) {
    if (tile > range.first) next.load(p, c, tile - 1, gated, true);

    // h inside the tile, from the stored entering state.
    float x[kSteps][kVec], A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
    cur.decays(p, x);
    cur.own_map(x, A, H);
    exclusive_segment_scan(shared, c.lane, false, A, H, tile_A, tile_H);
    float h_before[kSteps + 1][kVec];  // h_before[s] = h before step s; [kSteps] after the last
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float entering = c.d0 + i < p.D ? tile_states[tile * p.D + c.d0 + i] : 0.f;
      h_before[0][i] = A[i] * entering + H[i];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) h_before[s + 1][i] = x[s][i] * h_before[s][i] + cur.b[s][i];
    }

    float u[kSteps][kVec];
    cur.direct_grads(gated, u);
    cur.own_reverse_map(x, u, A, H);
    exclusive_segment_scan(shared, c.lane, true, A, H, tile_A, tile_H);
    float flow[kVec];  // c flowing into this thread's last step from later steps
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float from_later_tiles = shared.carry[i][c.lane];
      flow[i] = A[i] * from_later_tiles + H[i];
      tile_H[i] = tile_A[i] * from_later_tiles + tile_H[i];
    }
    __syncthreads();  // every thread has read the carry before segment 0 replaces it
    if (c.segment == 0) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) shared.carry[i][c.lane] = tile_H[i];
    }

#pragma unroll
    for (int s = kSteps - 1; s >= 0; --s) {
      float da[kVec], db[kVec], dz[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const float g = u[s][i] + flow[i];
        db[i] = g;
        da[i] = g * h_before[s][i] * ForwardTile<T>::decay_grad(p, x[s][i]);
        if (gated) dz[i] = cur.dy[s][i] * h_before[s + 1][i] * silu_grad(cur.z[s][i]);
        flow[i] = x[s][i] * g;
      }
      const int64_t t = c.step(tile, s);
      store<T>(p.da, c, t, p.D, p.vector_aligned, da);
      store<T>(p.db, c, t, p.D, p.vector_aligned, db);
      if (gated) store<T>(p.dz, c, t, p.D, p.vector_aligned, dz);
    }
    cur = next;
  }

  __syncthreads();
  if (c.segment == 0 && p.d_initial_state.data && range.first == 0) {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (c.d0 + i < p.D) p.d_initial_state.data[n * p.d_initial_state.stride + c.d0 + i] = shared.carry[i][c.lane];
  }
}

}  // namespace seqmix::cuda::scan
