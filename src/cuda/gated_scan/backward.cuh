// Gated scan backward. With g_t = dL/dh_t and c_t = a_t·g_t (what step t passes back):
//   g_t = u_t + c_{t+1},  u_t = dy_t ⊙ SiLU(z_t),  c_{T+1} = dL/dh_T (final state),
//   db_t = g_t,  da_t = g_t·h_{t-1}·decay'(a_t),  dz_t = dy_t·h_t·SiLU'(z_t),
//   d h_0 = c_1.
// c_t = a_t·(u_t + c_{t+1}) is an affine scan run backwards in time, so it uses the
// same tile scan as the forward. It needs h_{t-1}, which is recomputed: a first
// forward pass over a and b stores the state entering each tile in the workspace, and
// the reverse pass rebuilds h inside each tile from it.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/gated_scan/forward.cuh"

namespace seqmix::cuda::scan {

template <class T>
struct BackwardTile : ForwardTile<T> {
  Pack<T> dy[kSteps];

  __device__ void load(const GatedScanParams& p, const BlockCoords& c, int64_t tile, bool gated) {
    ForwardTile<T>::load(p, c, tile, gated);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) dy[s] = scan::load<T>(p.dy, c, c.step(tile, s), p.D, p.vector_aligned, 0.f);
  }
};

// The thread's own forward map over its steps.
template <class T, int kVec>
__device__ void own_forward_map(const GatedScanParams& p, const ForwardTile<T>& x, float (&A)[kVec],
                                float (&H)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    A[i] = 1.f;
    H[i] = 0.f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const float a = x.decay(p, s, i);
      H[i] = a * H[i] + x.b[s][i];
      A[i] *= a;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) backward_kernel(const GatedScanParams p) {
  constexpr int kVec = Pack<T>::kVec;
  __shared__ ScanShared<kVec> shared;
  const BlockCoords c = BlockCoords::make<T>(p.seq);
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;
  const int64_t tiles = (c.length + kScanTileSteps - 1) / kScanTileSteps;
  const int64_t max_tiles = (p.seq.T + kScanTileSteps - 1) / kScanTileSteps;
  float* workspace = p.workspace + n * max_tiles * p.D;

  // Pass 1, forward: the state entering each tile, kept by segment 0 in registers.
  float carry[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    carry[i] = p.initial_state.data && c.d0 + i < p.D ? p.initial_state.data[n * p.initial_state.stride + c.d0 + i]
                                                      : 0.f;
  {
    ForwardTile<T> cur, next;
    cur.load(p, c, 0, false);
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (tile + 1 < tiles) next.load(p, c, tile + 1, false);
      float A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
      own_forward_map(p, cur, A, H);
      exclusive_segment_scan(shared, c.lane, c.segment, false, A, H, tile_A, tile_H);
      if (c.segment == 0) {
#pragma unroll
        for (int i = 0; i < kVec; ++i) {
          if (c.d0 + i < p.D) workspace[tile * p.D + c.d0 + i] = carry[i];
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
      shared.carry[i][c.lane] = p.d_final_state.data && c.d0 + i < p.D
                                    ? p.d_final_state.data[n * p.d_final_state.stride + c.d0 + i] : 0.f;
  }
  __syncthreads();  // pass 1 wrote the workspace from segment 0; all threads read it below
  BackwardTile<T> cur, next;
  cur.load(p, c, tiles - 1, gated);
  for (int64_t tile = tiles - 1; tile >= 0; --tile) {
    if (tile > 0) next.load(p, c, tile - 1, gated);

    // h inside the tile, from the stored entering state.
    float A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
    own_forward_map(p, cur, A, H);
    exclusive_segment_scan(shared, c.lane, c.segment, false, A, H, tile_A, tile_H);
    float h_before[kSteps + 1][kVec];  // h_before[s] = h before step s; [kSteps] after the last
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float entering = c.d0 + i < p.D ? workspace[tile * p.D + c.d0 + i] : 0.f;
      h_before[0][i] = A[i] * entering + H[i];
#pragma unroll
      for (int s = 0; s < kSteps; ++s) h_before[s + 1][i] = cur.decay(p, s, i) * h_before[s][i] + cur.b[s][i];
    }

    // The reverse map of the thread's steps: c_in ↦ A·c_in + H, c_in flowing from after.
    float u[kSteps][kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      A[i] = 1.f;
      H[i] = 0.f;
#pragma unroll
      for (int s = kSteps - 1; s >= 0; --s) {
        u[s][i] = gated ? cur.dy[s][i] * silu(cur.z[s][i]) : cur.dy[s][i];
        const float a = cur.decay(p, s, i);
        H[i] = a * (u[s][i] + H[i]);
        A[i] *= a;
      }
    }
    exclusive_segment_scan(shared, c.lane, c.segment, true, A, H, tile_A, tile_H);
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
        const float a = cur.decay(p, s, i);
        const float g = u[s][i] + flow[i];
        db[i] = g;
        da[i] = g * h_before[s][i] * ForwardTile<T>::decay_grad(p, a);
        if (gated) dz[i] = cur.dy[s][i] * h_before[s + 1][i] * silu_grad(cur.z[s][i]);
        flow[i] = a * g;
      }
      const int64_t t = c.step(tile, s);
      store<T>(p.da, c, t, p.D, p.vector_aligned, da);
      store<T>(p.db, c, t, p.D, p.vector_aligned, db);
      if (gated) store<T>(p.dz, c, t, p.D, p.vector_aligned, dz);
    }
    cur = next;
  }

  __syncthreads();
  if (c.segment == 0 && p.d_initial_state.data) {
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (c.d0 + i < p.D) p.d_initial_state.data[n * p.d_initial_state.stride + c.d0 + i] = shared.carry[i][c.lane];
  }
}

template <class T>
void launch_backward(const GatedScanParams& p) {
  const dim3 grid(static_cast<unsigned>(num_slabs<T>(p.D)), static_cast<unsigned>(p.seq.num_sequences));
  backward_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("gated_scan backward");
}

}  // namespace seqmix::cuda::scan
