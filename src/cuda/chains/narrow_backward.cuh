// The projection chain's backward GEMMs for narrow K (≤ 32, GLA's rank-16 gate), after dz is
// in place: dx [M, K] = dz·W and dW [N, K] = dzᵀ·x. The CUTLASS GEMMs give these shapes
// 16 output columns on 256-wide tiles, and dW's whole token count as one mainloop on a few
// CTAs (NOTES.md, "Narrow K: the backward").
//
// Both on the tensor cores through mma.sync m16n8k16 (bf16 in, f32 accumulate), each summing
// partial products into a zeroed f32 buffer with atomics, then one pass to bf16:
// - dW: a warp owns 32 columns of dz and walks 16-row tiles, accumulating dWᵀ (K × 32) in
//   registers (A = xᵀ, B = the dz tile), then adds it once.
// - dx: a warp owns 16-row tiles and one share of the columns (A = the dz tile, B = W), so
//   that small token counts still fill the GPU; the shares add into dx.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/chains/narrow_projection.cuh"
#include "cuda/chains/scratch.cuh"

namespace seqmix::cuda::narrow {

// One bf16 at (row, column) of a row-major matrix, 0 outside [rows) × [columns).
__device__ __forceinline__ bf16 at(const bf16* base, int64_t stride, int64_t row, int64_t rows, int64_t column,
                                   int64_t columns) {
  return row < rows && column < columns ? base[row * stride + column] : __float2bfloat16(0.f);
}

// Elements (row, column) and (row + 1, column) as one mma operand register.
__device__ __forceinline__ uint32_t down_pair(const bf16* base, int64_t stride, int64_t row, int64_t rows,
                                              int64_t column, int64_t columns) {
  const __nv_bfloat162 v(at(base, stride, row, rows, column, columns), at(base, stride, row + 1, rows, column, columns));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// dWᵀ slab [K (m, two m16 tiles at most) × 32 columns (n, four n8 tiles)] = xᵀ · dz over the
// warp's row tiles (k).
__global__ void __launch_bounds__(kThreads) weight_gradient(int64_t M, int64_t N, int K, Rows x, Rows dz,
                                                            float* dweight) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int64_t slab = int64_t(blockIdx.x) * kSlabColumns;
  const int m_tiles = (K + 15) / 16;
  const auto* xg = static_cast<const bf16*>(x.data);
  const auto* dzg = static_cast<const bf16*>(dz.data);
  float acc[kMaxSteps][4][4] = {};
  const int64_t tiles = (M + kTileRows - 1) / kTileRows;
  for (int64_t tile = int64_t(blockIdx.y) * kWarps + warp; tile < tiles; tile += int64_t(gridDim.y) * kWarps) {
    const int64_t r = tile * kTileRows + 2 * q;  // this lane's k (token) pairs: r, r + 1 and r + 8, r + 9
    uint32_t b[4][2];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int64_t column = slab + 8 * t + g;
      b[t][0] = down_pair(dzg, dz.stride, r, M, column, N);
      b[t][1] = down_pair(dzg, dz.stride, r + 8, M, column, N);
    }
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s) {
      if (s >= m_tiles) break;
      const uint32_t a[4] = {down_pair(xg, x.stride, r, M, 16 * s + g, K), down_pair(xg, x.stride, r, M, 16 * s + g + 8, K),
                             down_pair(xg, x.stride, r + 8, M, 16 * s + g, K),
                             down_pair(xg, x.stride, r + 8, M, 16 * s + g + 8, K)};
#pragma unroll
      for (int t = 0; t < 4; ++t) mma_bf16(acc[s][t], a, b[t][0], b[t][1]);
    }
  }
  // acc[s][t]: (k = 16s + g (+8 for the last two), column = slab + 8t + 2q + {0, 1}).
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = 16 * s + g + 8 * (e / 2);
        const int64_t column = slab + 8 * t + 2 * q + e % 2;
        if (k < K && column < N) atomicAdd(&dweight[column * K + k], acc[s][t][e]);
      }
}

// dx tile [16 rows × K (n, four n8 tiles at most)] = dz [16 × this share's columns] · W.
__global__ void __launch_bounds__(kThreads) input_gradient(int64_t M, int64_t N, int K, Rows dz, Rows weight,
                                                           int64_t share, float* dx) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int n_tiles = (K + 7) / 8;
  const int64_t begin = int64_t(blockIdx.x) * share, end = std::min(N, begin + share);
  const auto* dzg = static_cast<const bf16*>(dz.data);
  const auto* w = static_cast<const bf16*>(weight.data);
  const int64_t tiles = (M + kTileRows - 1) / kTileRows;
  for (int64_t tile = int64_t(blockIdx.y) * kWarps + warp; tile < tiles; tile += int64_t(gridDim.y) * kWarps) {
    const int64_t row = tile * kTileRows + g;
    float acc[4][4] = {};
    for (int64_t c = begin; c < end; c += 16) {
      // Columns past this share's end read as zeros (pair's bound is the share's end).
      const int last = static_cast<int>(std::min<int64_t>(end - c, 16));
      const int k = 2 * q;
      const bf16* dz_at = dzg + c;
      const uint32_t a[4] = {pair(dz_at, dz.stride, row, M, k, last), pair(dz_at, dz.stride, row + 8, M, k, last),
                             pair(dz_at, dz.stride, row, M, k + 8, last),
                             pair(dz_at, dz.stride, row + 8, M, k + 8, last)};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        if (t >= n_tiles) break;
        const uint32_t b0 = down_pair(w, weight.stride, c + k, end, 8 * t + g, K);
        const uint32_t b1 = down_pair(w, weight.stride, c + k + 8, end, 8 * t + g, K);
        mma_bf16(acc[t], a, b0, b1);
      }
    }
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row + 8 * (e / 2);
        const int column = 8 * t + 2 * q + e % 2;
        if (t < n_tiles && r < M && column < K) atomicAdd(&dx[r * K + column], acc[t][e]);
      }
  }
}

// out [rows, columns] (row stride) = in [rows, columns] (contiguous f32) in bf16.
__global__ void store_bf16(const float* in, int64_t rows, int64_t columns, MutableRows out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * columns;
       i += int64_t(gridDim.x) * blockDim.x)
    static_cast<bf16*>(out.data)[i / columns * out.stride + i % columns] = __float2bfloat16(in[i]);
}

inline void gradients(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dz, MutableRows dx,
                      MutableRows dweight, void* stream_handle) {
  if (K > kNarrowProjectionMaxK || K < 1) throw Error("seqmix: narrow projection backward: K outside [1, 32]");
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const chains::Scratch<float> sums((M + N) * K, stream);
  float* dx32 = sums.get();
  float* dw32 = sums.get() + M * K;
  check(cudaMemsetAsync(sums.get(), 0, (M + N) * K * sizeof(float), stream), "narrow projection backward: zero");
  const int sms = multiprocessor_count();
  constexpr int64_t kWarpsPerSm = 16;
  const int64_t warps = int64_t(sms) * kWarpsPerSm;
  const int64_t tiles = (M + kTileRows - 1) / kTileRows, row_blocks = (tiles + kWarps - 1) / kWarps;
  if (M > 0 && N > 0) {
    // dW: one warp per (slab, row stripe); the stripes add their partial sums.
    const int64_t slabs = (N + kSlabColumns - 1) / kSlabColumns;
    const int64_t stripes = std::clamp<int64_t>(warps / kWarps / slabs, 1, std::min<int64_t>(row_blocks, 65535));
    weight_gradient<<<dim3(static_cast<unsigned>(slabs), static_cast<unsigned>(stripes)), kThreads, 0, stream>>>(
        M, N, static_cast<int>(K), x, dz, dw32);
    check_launch("projection chain: narrow weight gradient");
    // dx: the columns split into shares (multiples of 16) until the warps fill the GPU.
    const int64_t row_grid = std::min<int64_t>(row_blocks, 65535);
    const int64_t shares_wanted = std::clamp<int64_t>(warps / kWarps / row_grid, 1, (N + 15) / 16);
    const int64_t share = chains::round_up((N + shares_wanted - 1) / shares_wanted, 16);
    const int64_t shares = (N + share - 1) / share;
    input_gradient<<<dim3(static_cast<unsigned>(shares), static_cast<unsigned>(row_grid)), kThreads, 0, stream>>>(
        M, N, static_cast<int>(K), dz, weight, share, dx32);
    check_launch("projection chain: narrow input gradient");
  }
  store_bf16<<<chains::grid_for(M * K, 256), 256, 0, stream>>>(dx32, M, K, dx);
  store_bf16<<<chains::grid_for(N * K, 256), 256, 0, stream>>>(dw32, N, K, dweight);
  check_launch("projection chain: narrow gradients to bf16");
}

}  // namespace seqmix::cuda::narrow
