// The whole backward of a narrow-K run (K ≤ 16: GLA's rank-16 gate) in one pass over its
// gradient dy: dz = dy ⊙ act'(x·Wᵀ + bias)·scale stays in registers, and the same tile feeds
// dx = dz·W, dWᵀ = xᵀ·dz and dbias = Σ dz. The separate path (gather dy into dz, the
// derivative kernel in place, then narrow_backward.cuh's dx and dW kernels, which read dz
// back as 2-byte pairs) moved ~5× the gradient's bytes: 319 µs at 32768 tokens for a
// 67 MB gradient (NOTES.md, "Narrow K").
//
// A warp owns a group of kSlabs × 32 columns and walks 16-row tiles. Per tile and 32-column
// slab (mma.sync m16n8k16, bf16 in, f32 accumulate):
//   z   = x_tile · W_slabᵀ              4 mma, A = x (row layout), B = weights in registers
//   dz  = dy ⊙ act'(z + bias)·scale     in the accumulator layout, packed to bf16
//   dx += dz · W_slab                   the accumulator pairs of two n8 tiles are an A
//                                       fragment (k = the slab's columns)
//   dWᵀ += xᵀ · dz                      A = x's fragment transposed, B = dz's 8×8 blocks
//                                       transposed (movmatrix: no shared memory)
// dx leaves per tile (f32 atomics into a zeroed [M, K] buffer), dWᵀ once per block (the
// warps summed in shared memory first), dbias once per warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/chains/narrow_projection.cuh"
#include "cuda/chains/scratch.cuh"

namespace seqmix::cuda::narrow_fused {
namespace {

using narrow::bf16;

// One bf16 of a row-major matrix, 0 outside [rows) × [columns).
__device__ __forceinline__ bf16 at(const bf16* base, int64_t stride, int64_t row, int64_t rows, int64_t column,
                                   int64_t columns) {
  return row < rows && column < columns ? base[row * stride + column] : __float2bfloat16(0.f);
}

// out [rows, columns] (row stride) = in [rows, columns] (contiguous f32) in bf16.
__global__ void rows_to_bf16(const float* in, int64_t rows, int64_t columns, MutableRows out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * columns;
       i += int64_t(gridDim.x) * blockDim.x)
    static_cast<bf16*>(out.data)[i / columns * out.stride + i % columns] = __float2bfloat16(in[i]);
}

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kSlabs = 4, kGroupColumns = 32 * kSlabs;  // columns a warp owns

// The transpose of an 8×8 bf16 block held one row pair per lane (lane g·4 + q: row g,
// columns 2q, 2q + 1): afterwards lane g·4 + q holds rows 2q, 2q + 1 of column g.
__device__ __forceinline__ uint32_t transpose(uint32_t v) {
  uint32_t out;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(out) : "r"(v));
  return out;
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// dy at (row, column) and (row, column + 1) as f32 (zeros outside [M) × [N)); dy's base and
// row stride even, so the pair is one 4-byte load when both columns are inside.
__device__ __forceinline__ float2 dy_pair(const bf16* dy, int64_t stride, int64_t row, int64_t M, int64_t column,
                                          int64_t N) {
  if (row >= M || column >= N) return make_float2(0.f, 0.f);
  const bf16* p = dy + row * stride + column;
  if (column + 1 < N) return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
  return make_float2(__bfloat162float(p[0]), 0.f);
}

template <bool kBias>
__global__ void __launch_bounds__(kThreads)
    fused_backward(int64_t M, int64_t N, int K, Rows x, Rows weight, Rows dy, ColumnEpilogue columns, float* dx,
                   float* dweight_t, float* dbias) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int64_t group = int64_t(blockIdx.x) * kGroupColumns;
  const auto* w = static_cast<const bf16*>(weight.data);
  const auto* dyg = static_cast<const bf16*>(dy.data);
  const auto* xg = static_cast<const bf16*>(x.data);

  // Weights, for z (B: k = K index, n = column; lane: column 8t + g, k 2q.., 2q + 8..) and
  // for dx (B: k = column, n = K index; lane: columns 16s + 2q, + 1 of K index 8n + g).
  uint32_t wz[kSlabs][4][2], wx[kSlabs][2][2][2];
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab) {
    const int64_t c0 = group + 32 * slab;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      wz[slab][t][0] = narrow::pair(w, weight.stride, c0 + 8 * t + g, N, 2 * q, K);
      wz[slab][t][1] = narrow::pair(w, weight.stride, c0 + 8 * t + g, N, 2 * q + 8, K);
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t c = c0 + 16 * s + 2 * q + 8 * h;
          const int k = 8 * n + g;
          const bf16 lo = at(w, weight.stride, c, N, k, K);
          const bf16 hi = at(w, weight.stride, c + 1, N, k, K);
          const __nv_bfloat162 v(lo, hi);
          wx[slab][s][n][h] = *reinterpret_cast<const uint32_t*>(&v);
        }
  }

  float dwt[kSlabs][4][4] = {};   // dWᵀ: K index g (+8), column 8t + 2q (+1) of each slab
  float db[kSlabs][4][2] = {};    // dbias partial: column 8t + 2q (+1), rows g and g + 8 summed
  // This warp's row tiles: first, first + step, ...; the column groups walk them from
  // different starting points, so that the groups' dx atomics do not meet on the same rows.
  const int64_t tiles = (M + narrow::kTileRows - 1) / narrow::kTileRows;
  const int64_t first = int64_t(blockIdx.y) * kWarps + warp, step = int64_t(gridDim.y) * kWarps;
  const int64_t count = first < tiles ? (tiles - first + step - 1) / step : 0;
  const int64_t rotation = count * blockIdx.x / gridDim.x;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t tile = first + (i + rotation) % count * step;
    const int64_t row0 = tile * narrow::kTileRows;
    // x's fragment (rows g, g + 8; K index 2q.., 2q + 8..) and its transpose (xᵀ as A:
    // K index g, g + 8; rows 2q.., 2q + 8..).
    uint32_t a[4];
    a[0] = narrow::pair(xg, x.stride, row0 + g, M, 2 * q, K);
    a[1] = narrow::pair(xg, x.stride, row0 + g + 8, M, 2 * q, K);
    a[2] = narrow::pair(xg, x.stride, row0 + g, M, 2 * q + 8, K);
    a[3] = narrow::pair(xg, x.stride, row0 + g + 8, M, 2 * q + 8, K);
    const uint32_t at[4] = {transpose(a[0]), transpose(a[2]), transpose(a[1]), transpose(a[3])};
    float dxa[2][4] = {};
#pragma unroll
    for (int slab = 0; slab < kSlabs; ++slab) {
      const int64_t c0 = group + 32 * slab;
      float z[4][4] = {};
#pragma unroll
      for (int t = 0; t < 4; ++t) narrow::mma_bf16(z[t], a, wz[slab][t][0], wz[slab][t][1]);
      uint32_t dz[4][2];  // bf16 pairs: [tile][row g, row g + 8], columns 8t + 2q, + 1
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int64_t c = c0 + 8 * t + 2 * q;
        float d[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 v = dy_pair(dyg, dy.stride, row0 + g + 8 * h, M, c, N);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t column = c + e;
            const bool inside = column < N;
            const float bias = inside && columns.bias ? __ldg(columns.bias + column) : 0.f;
            const int code = inside && columns.code ? static_cast<int>(__ldg(columns.code + column)) : 0;
            const float scale = inside && columns.scale ? __ldg(columns.scale + column) : 1.f;
            const float f = narrow::activation_of<narrow::Mode::derivative>(z[t][2 * h + e] + bias, code);
            d[2 * h + e] = (e == 0 ? v.x : v.y) * f * scale;
          }
        }
        if constexpr (kBias) {
          db[slab][t][0] += d[0] + d[2];
          db[slab][t][1] += d[1] + d[3];
        }
        dz[t][0] = pack(d[0], d[1]);
        dz[t][1] = pack(d[2], d[3]);
      }
      // dx [16 × 16] += dz [16 × 32] · W_slab [32 × 16].
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const uint32_t a_dz[4] = {dz[2 * s][0], dz[2 * s][1], dz[2 * s + 1][0], dz[2 * s + 1][1]};
#pragma unroll
        for (int n = 0; n < 2; ++n) narrow::mma_bf16(dxa[n], a_dz, wx[slab][s][n][0], wx[slab][s][n][1]);
      }
      // dWᵀ [16 × 8 per tile] += xᵀ [16 × 16 rows] · dz [16 rows × 8].
#pragma unroll
      for (int t = 0; t < 4; ++t) narrow::mma_bf16(dwt[slab][t], at, transpose(dz[t][0]), transpose(dz[t][1]));
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = row0 + g + 8 * (e / 2);
        const int k = 8 * n + 2 * q + e % 2;
        if (row < M && k < K) atomicAdd(&dx[row * K + k], dxa[n][e]);
      }
  }
  // dWᵀ: the block's warps meet in shared memory, then one global atomic per value and block.
  __shared__ float block_dw[kGroupColumns * 16];
  for (int i = threadIdx.x; i < kGroupColumns * 16; i += kThreads) block_dw[i] = 0.f;
  __syncthreads();
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab)
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = g + 8 * (e / 2), column = 32 * slab + 8 * t + 2 * q + e % 2;
        atomicAdd(&block_dw[column * 16 + k], dwt[slab][t][e]);
      }
  __syncthreads();
  for (int i = threadIdx.x; i < kGroupColumns * 16; i += kThreads) {
    const int64_t column = group + i / 16;
    const int k = i % 16;
    if (k < K && column < N) atomicAdd(&dweight_t[column * K + k], block_dw[i]);
  }
#pragma unroll
  for (int slab = 0; slab < kSlabs; ++slab)
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if constexpr (kBias) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float v = db[slab][t][e];
#pragma unroll
          for (int offset = 4; offset < 32; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
          const int64_t column = group + 32 * slab + 8 * t + 2 * q + e;
          if (g == 0 && column < N) atomicAdd(&dbias[column], v);
        }
      }
    }
}

// Grid: the column groups × as many row stripes as fill the SMs once; f32 sums in a zeroed
// scratch, then one pass each to bf16.
inline void launch(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy, ColumnEpilogue columns,
                   MutableRows dx, MutableRows dweight, void* dbias, void* stream_handle) {
  if (!narrow_fused_backward_fits(K, dy)) throw Error("seqmix: narrow fused backward: operands it does not take");
  const auto stream = static_cast<cudaStream_t>(stream_handle);
  const int64_t sums_count = (M + N) * K + (dbias ? N : 0);
  const chains::Scratch<float> sums(sums_count, stream);
  float* dx32 = sums.get();
  float* dw32 = sums.get() + M * K;
  float* db32 = dbias ? sums.get() + (M + N) * K : nullptr;
  check(cudaMemsetAsync(sums.get(), 0, sums_count * sizeof(float), stream), "narrow fused backward: zero");
  if (M > 0 && N > 0) {
    const int sms = multiprocessor_count();
    const int64_t groups = (N + kGroupColumns - 1) / kGroupColumns;
    const int64_t tiles = (M + narrow::kTileRows - 1) / narrow::kTileRows;
    // One wave at the resident count (2 blocks of 4 warps a SM at ~220-250 registers).
    static const int resident = [] {
      int a = 0, b = 0;
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, fused_backward<false>, kThreads, 0), "occupancy");
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fused_backward<true>, kThreads, 0), "occupancy");
      return std::max(std::min(a, b), 1);
    }();
    const int64_t stripes = std::clamp<int64_t>(int64_t(sms) * resident / groups, 1,
                                                std::min<int64_t>((tiles + kWarps - 1) / kWarps, 65535));
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(stripes));
    if (dbias)
      fused_backward<true><<<grid, kThreads, 0, stream>>>(M, N, static_cast<int>(K), x, weight, dy, columns, dx32, dw32,
                                                          db32);
    else
      fused_backward<false><<<grid, kThreads, 0, stream>>>(M, N, static_cast<int>(K), x, weight, dy, columns, dx32,
                                                           dw32, nullptr);
    check_launch("projection chain: narrow fused backward");
  }
  rows_to_bf16<<<chains::grid_for(M * K, 256), 256, 0, stream>>>(dx32, M, K, dx);
  rows_to_bf16<<<chains::grid_for(N * K, 256), 256, 0, stream>>>(dw32, N, K, dweight);
  if (dbias) chains::to_bf16<<<chains::grid_for(N, 256), 256, 0, stream>>>(db32, N, static_cast<bf16*>(dbias));
  check_launch("projection chain: narrow fused backward to bf16");
}

}  // namespace
}  // namespace seqmix::cuda::narrow_fused
