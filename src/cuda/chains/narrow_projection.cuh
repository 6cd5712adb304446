// The projection chain's forward for narrow K (≤ 32): out = act(x·Wᵀ + bias)·scale with
// f32 FMAs on the CUDA cores. At K = 16 the work is the output writes (M·N elements) and
// M·N·16 FMAs; the CUTLASS GEMM pays a 64-deep K tile and a full TMA/wgmma pipeline per
// output tile for it (NOTES.md, "Narrow K").
//
// A block of 256 threads owns 256 columns: it stages their weights once in shared memory
// (f32, [K][256], zero past N and K), then its 8 warps walk groups of 4 rows on their own.
// A warp stages its 4 rows of x (f32, any row stride and alignment) in its own slice of
// shared memory; each lane computes 4 rows × 8 consecutive columns, so each weight read
// from shared memory serves 4 rows and each x value is a broadcast; the epilogue is
// activation.cuh's, per column (bias, code, scale as the GEMM's epilogue vectors), and each
// row's 8 columns leave in one 16-byte store (bf16) or two (f32) where aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/chains/activation.cuh"
#include "cuda/chains/narrow_projection.hpp"
#include "cuda/common/runtime.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::narrow {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kColumnsPerLane = 8, kTileColumns = 32 * kColumnsPerLane;
constexpr int kRowsPerWarp = 4;
constexpr int kMaxK = static_cast<int>(kNarrowProjectionMaxK);
static_assert(kMaxK % 4 == 0, "x and weights are read 4 k at a time");

// Where tile column c's weight sits within one k's 256: lane g's columns 8g..8g+3 at 4g,
// 8g+4..8g+7 at 128 + 4g, so each of a warp's two float4 reads per k covers 512
// contiguous bytes (no bank conflicts).
__device__ __forceinline__ int weight_slot(int c) { return c % 8 / 4 * (kTileColumns / 2) + c / 8 * 4 + c % 4; }

// One row's 8 columns from `out` on (`valid` of them inside the run).
__device__ __forceinline__ void store_row(bf16* out, const float (&v)[kColumnsPerLane], int valid) {
  if (valid == kColumnsPerLane && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    alignas(16) __nv_bfloat162 packed[kColumnsPerLane / 2];
#pragma unroll
    for (int j = 0; j < kColumnsPerLane / 2; ++j) packed[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(packed);
    return;
  }
  for (int j = 0; j < valid; ++j) out[j] = __float2bfloat16(v[j]);
}
__device__ __forceinline__ void store_row(float* out, const float (&v)[kColumnsPerLane], int valid) {
  if (valid == kColumnsPerLane && reinterpret_cast<uintptr_t>(out) % 16 == 0) {
    reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  for (int j = 0; j < valid; ++j) out[j] = v[j];
}

template <class Out>
__global__ void __launch_bounds__(kThreads) narrow_projection(int64_t M, int64_t N, int K, Rows x, Rows weight,
                                                              MutableRows out, ColumnEpilogue columns) {
  __shared__ __align__(16) float w[kMaxK][kTileColumns];
  __shared__ __align__(16) float xs[kWarps][kRowsPerWarp][kMaxK];
  const int64_t tile = int64_t(blockIdx.x) * kTileColumns;
  const int depth = (K + 3) / 4 * 4;  // K padded with zeros to the float4 reads
  const auto* weights = static_cast<const bf16*>(weight.data);
  for (int e = threadIdx.x; e < depth * kTileColumns; e += kThreads) {
    const int c = e % kTileColumns, k = e / kTileColumns;
    const int64_t column = tile + c;
    w[k][weight_slot(c)] = column < N && k < K ? __bfloat162float(weights[column * weight.stride + k]) : 0.f;
  }

  // This lane's 8 columns: their epilogue vectors (null: no bias, identity, scale 1).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t first = tile + lane * kColumnsPerLane;
  const int valid = static_cast<int>(std::clamp<int64_t>(N - first, 0, kColumnsPerLane));
  float bias[kColumnsPerLane], scale[kColumnsPerLane];
  int code[kColumnsPerLane];
  bool any_activation = false;
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) {
    const bool inside = j < valid;
    bias[j] = inside && columns.bias ? columns.bias[first + j] : 0.f;
    code[j] = inside && columns.code ? static_cast<int>(columns.code[first + j]) : 0;
    scale[j] = inside && columns.scale ? columns.scale[first + j] : 1.f;
    any_activation |= code[j] != 0;
  }
  __syncthreads();

  const auto* xg = static_cast<const bf16*>(x.data);
  auto* outg = static_cast<Out*>(out.data);
  float(&rows)[kRowsPerWarp][kMaxK] = xs[warp];
  for (int64_t group = int64_t(blockIdx.y) * kWarps + warp; group * kRowsPerWarp < M;
       group += int64_t(gridDim.y) * kWarps) {
    const int64_t row0 = group * kRowsPerWarp;
    __syncwarp();  // the previous group's reads of `rows` are done
    for (int e = lane; e < kRowsPerWarp * depth; e += 32) {
      const int r = e / depth, k = e % depth;
      rows[r][k] = row0 + r < M && k < K ? __bfloat162float(xg[(row0 + r) * x.stride + k]) : 0.f;
    }
    __syncwarp();

    float acc[kRowsPerWarp][kColumnsPerLane] = {};
    for (int k = 0; k < depth; k += 4) {
      float4 xv[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) xv[r] = *reinterpret_cast<const float4*>(&rows[r][k]);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const float4 lo = *reinterpret_cast<const float4*>(&w[k + kk][lane * 4]);
        const float4 hi = *reinterpret_cast<const float4*>(&w[k + kk][kTileColumns / 2 + lane * 4]);
        const float wk[kColumnsPerLane] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float xk = kk == 0 ? xv[r].x : kk == 1 ? xv[r].y : kk == 2 ? xv[r].z : xv[r].w;
#pragma unroll
          for (int j = 0; j < kColumnsPerLane; ++j) acc[r][j] = fmaf(xk, wk[j], acc[r][j]);
        }
      }
    }

    if (valid == 0) continue;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (row0 + r >= M) break;
      float v[kColumnsPerLane];
#pragma unroll
      for (int j = 0; j < kColumnsPerLane; ++j) {
        const float z = acc[r][j] + bias[j];
        v[j] = (any_activation ? proj::activate(z, code[j]) : z) * scale[j];
      }
      store_row(outg + (row0 + r) * out.stride + first, v, valid);
    }
  }
}

// Blocks: every column tile, and enough row blocks to keep each SM at its resident count;
// a block's warps then walk the remaining row groups, so each block stages its weights once.
template <class Out>
void launch(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns,
            void* stream) {
  if (K > kNarrowProjectionMaxK || K < 1) throw Error("seqmix: narrow projection: K outside [1, 32]");
  if (M == 0 || N == 0) return;
  static const int resident = [] {
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, narrow_projection<Out>, kThreads, 0),
          "narrow projection: occupancy");
    return std::max(blocks, 1);
  }();
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "narrow projection: SM count");
  const int64_t column_tiles = (N + kTileColumns - 1) / kTileColumns;
  const int64_t row_blocks = (M + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp);
  const int64_t wanted = std::max<int64_t>(1, int64_t(sms) * resident / column_tiles);
  const int64_t row_grid = std::min({row_blocks, wanted, int64_t{65535}});
  const dim3 grid(static_cast<unsigned>(column_tiles), static_cast<unsigned>(row_grid));
  narrow_projection<Out><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(M, N, static_cast<int>(K), x,
                                                                                   weight, out, columns);
  check_launch("projection chain: narrow_projection");
}

}  // namespace seqmix::cuda::narrow
