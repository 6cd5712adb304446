// Split maps for sequences cut into splits (see forward.cuh): each block reduces its
// split to one affine map — forward, h ↦ A·h + H over the split; or reverse, for the
// backward's c flowing from the split's end to its start — and writes it to the
// workspace.
#pragma once

#include <type_traits>

#include "cuda/gated_scan/forward.cuh"

namespace seqmix::cuda::scan {

template <class T, int kStepsT = kSteps>
struct ReverseTile : ForwardTile<T, kStepsT> {
  Pack<T> dy[kStepsT];

  // All that the backward reads; b is left out where only the reverse map is wanted.
  __device__ void load(const GatedScanParams& p, const BlockCoords& c, int64_t tile, bool gated, bool need_b) {
    ForwardTile<T, kStepsT>::load(p, c, tile, gated, need_b);
#pragma unroll
    for (int s = 0; s < kStepsT; ++s) dy[s] = scan::load<T>(p.dy, c, c.step(tile, s), p.D, p.vector_aligned, 0.f);
  }
  // u_t = dy_t ⊙ SiLU(z_t): what step t adds to dL/dh_t directly.
  __device__ float u(bool gated, int s, int i) const {
    return gated ? dy[s][i] * silu(this->z[s][i]) : dy[s][i];
  }
  // The thread's own reverse map c_in ↦ A·c_in + H, c_t = decay_t·(u_t + c_{t+1}),
  // given the decays x and the direct gradients u.
  template <int kVec>
  __device__ static void own_reverse_map(const float (&x)[kStepsT][kVec], const float (&u)[kStepsT][kVec],
                                         float (&A)[kVec], float (&H)[kVec]) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      A[i] = 1.f;
      H[i] = 0.f;
#pragma unroll
      for (int s = kStepsT - 1; s >= 0; --s) {
        H[i] = x[s][i] * (u[s][i] + H[i]);
        A[i] *= x[s][i];
      }
    }
  }
  template <int kVec>
  __device__ void direct_grads(bool gated, float (&u_out)[kStepsT][kVec]) const {
#pragma unroll
    for (int s = 0; s < kStepsT; ++s)
#pragma unroll
      for (int i = 0; i < kVec; ++i) u_out[s][i] = u(gated, s, i);
  }
};

template <class T, bool kReverse>
__global__ void __launch_bounds__(kThreads) summary_kernel(const GatedScanParams p) {
  constexpr int kVec = Pack<T>::kVec;
  __shared__ ScanShared<kVec> shared;
  const BlockCoords c = BlockCoords::make<T>(p.seq);
  const TileRange range = TileRange::make(p, c);
  const bool gated = p.z.data != nullptr;
  const int64_t n = blockIdx.y;

  float split_A[kVec], split_H[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) split_A[i] = 1.f, split_H[i] = 0.f;  // empty splits: identity

  if (!range.empty()) {
    using Tile = std::conditional_t<kReverse, ReverseTile<T>, ForwardTile<T>>;
    Tile cur, next;
    const int64_t first = kReverse ? range.end - 1 : range.first, last = kReverse ? range.first : range.end - 1;
    const int step = kReverse ? -1 : 1;
    // Forward maps need a and b; reverse maps a, z and dy.
    cur.load(p, c, first, kReverse && gated, !kReverse);
    for (int64_t tile = first;; tile += step) {
      if (tile != last) next.load(p, c, tile + step, kReverse && gated, !kReverse);
      float x[kSteps][kVec], A[kVec], H[kVec], tile_A[kVec], tile_H[kVec];
      cur.decays(p, x);
      if constexpr (kReverse) {
        float u[kSteps][kVec];
        cur.direct_grads(gated, u);
        cur.own_reverse_map(x, u, A, H);
      } else {
        cur.own_map(x, A, H);
      }
      exclusive_segment_scan(shared, c.lane, kReverse, A, H, tile_A, tile_H);
#pragma unroll
      for (int i = 0; i < kVec; ++i) {  // the tile comes after what was composed so far
        split_H[i] = tile_A[i] * split_H[i] + tile_H[i];
        split_A[i] *= tile_A[i];
      }
      if (tile == last) break;
      cur = next;
    }
  }
  if (c.segment == 0) {
    const Workspace w = Workspace::make(p);
    float* m = Workspace::map(kReverse ? w.reverse_maps : w.forward_maps, n, blockIdx.z, p.D);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (c.d0 + i < p.D) m[c.d0 + i] = split_A[i], m[p.D + c.d0 + i] = split_H[i];
  }
}

}  // namespace seqmix::cuda::scan
