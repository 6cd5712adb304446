// The projection chain's forward for narrow K (≤ 32): out = act(x·Wᵀ + bias)·scale. At K = 16
// (GLA's rank-16 gate) the work is the output writes (M·N elements) and the activation of
// each; the CUTLASS GEMM pays a 64-deep K tile and a full TMA/wgmma pipeline per output tile
// for it, and f32 FMAs on the CUDA cores spend more issue slots on the product than on the
// writes (NOTES.md, "Narrow K").
//
// Tensor cores through mma.sync m16n8k16 (bf16 in, f32 accumulate): one or two k-steps cover
// K. A warp owns 32 columns (a "slab": four n8 tiles) and walks 16-row tiles; the slab's
// weight fragments stay in registers for the whole walk, and the next tile's x fragment is
// loaded before this tile's epilogue. The slab's columns are dealt to the four n8 tiles so
// that each lane's accumulators are 8 consecutive columns of two rows: each row leaves in one
// 16-byte store (bf16) or two (f32), a warp writing 64 contiguous bytes per row. In its
// derivative mode the same kernel is the backward's recompute: dz ⊙= act'(z)·scale in place.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/chains/dependent_launch.cuh"
#include "cuda/chains/narrow_projection.hpp"
#include "cuda/chains/params.hpp"
#include "cuda/common/environment.hpp"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/runtime.cuh"
#include "cuda/common/vector_store.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::narrow {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
// The forward at five blocks (20 warps) a SM: at most 96 registers a thread, as it had
// before its whole-tile paths (which would take 110 and four blocks). The derivative keeps
// its 127 (capped at 96 it spills).
constexpr int kForwardBlocksPerSm = 5;
constexpr int kSlabColumns = 32, kColumnsPerLane = 8, kTileRows = 16;
constexpr int kMaxSteps = static_cast<int>(kNarrowProjectionMaxK) / 16;  // k-steps of 16
static_assert(kNarrowProjectionMaxK % 16 == 0, "K is covered by whole m16n8k16 steps");

// The slab column that n8 tile t's column n (0..7) stands for: lane group q = n / 2 of the
// accumulator layout gets columns 8q..8q+7 across the four tiles (tile t: 8q + 2t, 8q + 2t + 1).
__device__ __forceinline__ int slab_column(int tile, int n) { return n / 2 * 8 + tile * 2 + n % 2; }

// Two consecutive bf16 of row `row` at k, k + 1 as one mma operand register; zeros past K
// or past the last row (any row stride and alignment).
__device__ __forceinline__ uint32_t pair(const bf16* base, int64_t stride, int64_t row, int64_t rows, int k, int K) {
  if (row >= rows || k >= K) return 0u;
  const bf16* p = base + row * stride + k;
  if (k + 1 < K && reinterpret_cast<uintptr_t>(p) % 4 == 0) return *reinterpret_cast<const uint32_t*>(p);
  const bf16 hi = k + 1 < K ? p[1] : __float2bfloat16(0.f);
  const __nv_bfloat162 v(p[0], hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// kOrdered: volatile, so the compiler keeps it in program order with the stores (the
// kernels here as they were measured); otherwise the compiler may hoist it above earlier
// stores, which the gate epilogue needs for independent work (gate_epilogue.cuh).
template <bool kOrdered = true>
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#define SEQMIX_MMA_M16N8K16_BF16                                                                  \
  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
  "{%0,%1,%2,%3};\n"                                                                             \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                            \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)
  if constexpr (kOrdered) asm volatile(SEQMIX_MMA_M16N8K16_BF16);
  else asm(SEQMIX_MMA_M16N8K16_BF16);
#undef SEQMIX_MMA_M16N8K16_BF16
}

__device__ __forceinline__ float sigmoid_fast(float z) { return rcp_fast(1.f + exp_fast(-z)); }

// log(1 + e) for e in [0, 1] (e = exp(−|z|) in the softplus): three terms of the series below
// 2⁻⁷ (error below 2⁻²³ relative), the hardware logarithm above, where log1p ≥ 0.0078 keeps
// its ~2⁻²² absolute error below 2e-5 relative. libdevice's log1pf and expf made the
// activation the kernel's largest cost.
__device__ __forceinline__ float log1p_unit(float e) {
  return e < 0.0078125f ? e * (1.f - e * (0.5f - e * (1.f / 3.f))) : lg2_fast(1.f + e) * kLn2;
}

// log2(1 + e) for e in [0, 1], the same two forms in base 2, both computed and one selected:
// the branch above compiles to both paths predicated (eight issue slots), this to seven.
__device__ __forceinline__ float log2_1p_unit(float e) {
  const float series = e * fmaf(e, fmaf(e, kLog2e / 3.f, -0.5f * kLog2e), kLog2e);
  const float hardware = lg2_fast(1.f + e);
  return e < 0.0078125f ? series : hardware;
}

// log σ(z) = min(z, 0) − ln 2·log2(1 + e^{−|z|}): the logarithm's ln 2 goes into the one FMA
// that subtracts it (no multiply of its own; folding it into the column's scale instead held
// eight scaled factors across the tile loop and made the 96-register kernel spill).
__device__ __forceinline__ float log_sigmoid_fast(float z) {
  return fmaf(-kLn2, log2_1p_unit(ex2_fast(-fabsf(z) * kLog2e)), fminf(z, 0.f));
}

// What the kernel writes for z = x·Wᵀ + bias: the forward's act(z)·scale, or the backward's
// dz = dy·act'(z)·scale with dy read from `out` itself (in place, bf16).
enum class Mode { forward, derivative };

// activation.cuh's activate (kMode forward) or activation_derivative (derivative) for one
// code, with the hardware exponential and logarithm (same codes, same overflow-free forms).
template <Mode kMode, int kCode>
__device__ __forceinline__ float activation_of(float z) {
  if constexpr (kMode == Mode::forward) {
    if constexpr (kCode == 1) return z * sigmoid_fast(z);
    if constexpr (kCode == 2) return sigmoid_fast(z);
    if constexpr (kCode == 3) return log_sigmoid_fast(z);
    if constexpr (kCode == 4) return fmaxf(z, 0.f) + log1p_unit(exp_fast(-fabsf(z)));  // softplus
    return z;
  } else {
    if constexpr (kCode == 1) {
      const float s = sigmoid_fast(z);
      return s * (1.f + z * (1.f - s));
    }
    if constexpr (kCode == 2) {
      const float s = sigmoid_fast(z);
      return s * (1.f - s);
    }
    if constexpr (kCode == 3) return sigmoid_fast(-z);  // σ(−z)
    if constexpr (kCode == 4) return sigmoid_fast(z);
    return 1.f;
  }
}

// The same for a code known only at run time.
template <Mode kMode>
__device__ __forceinline__ float activation_of(float z, int code) {
  switch (code) {
    case 1: return activation_of<kMode, 1>(z);
    case 2: return activation_of<kMode, 2>(z);
    case 3: return activation_of<kMode, 3>(z);
    case 4: return activation_of<kMode, 4>(z);
    default: return activation_of<kMode, 0>(z);
  }
}

// A lane's 8 columns of one row: v ← act(z)·scale (forward) or v·act'(z)·scale (derivative,
// v holding dy). kCode ≥ 0: every column has that code (one switch per row instead of one
// per element); −1: each column its own.
template <Mode kMode, int kCode>
__device__ __forceinline__ void finish(float (&v)[8], const float (&z)[8], const int (&code)[8],
                                       const float (&scale)[8]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float f;
    if constexpr (kCode < 0) f = activation_of<kMode>(z[j], code[j]);
    else f = activation_of<kMode, kCode>(z[j]);
    v[j] = (kMode == Mode::forward ? f : v[j] * f) * scale[j];
  }
}

template <Mode kMode>
__device__ __forceinline__ void finish(float (&v)[8], const float (&z)[8], const int (&code)[8],
                                       const float (&scale)[8], int lane_code) {
  switch (lane_code) {
    case 0: return finish<kMode, 0>(v, z, code, scale);
    case 1: return finish<kMode, 1>(v, z, code, scale);
    case 2: return finish<kMode, 2>(v, z, code, scale);
    case 3: return finish<kMode, 3>(v, z, code, scale);
    case 4: return finish<kMode, 4>(v, z, code, scale);
    default: return finish<kMode, -1>(v, z, code, scale);
  }
}

// Eight bf16 held in one 16-byte word, as f32.
__device__ __forceinline__ void unpack_row(const uint4& raw, float (&v)[kColumnsPerLane]) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int j = 0; j < kColumnsPerLane / 2; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    v[2 * j] = f.x, v[2 * j + 1] = f.y;
  }
}

// One row's 8 bf16 columns (`valid` of them inside the run) as f32.
__device__ __forceinline__ void load_row(const bf16* in, float (&v)[kColumnsPerLane], int valid) {
  if (valid == kColumnsPerLane && reinterpret_cast<uintptr_t>(in) % 16 == 0)
    return unpack_row(*reinterpret_cast<const uint4*>(in), v);
  for (int j = 0; j < kColumnsPerLane; ++j) v[j] = j < valid ? __bfloat162float(in[j]) : 0.f;
}

// Two floats as one register of two bf16, the first in the low half.
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// One row's 8 columns, all inside the run, 16-byte aligned: one 16-byte store (bf16) or two (f32).
__device__ __forceinline__ void store_whole_row(bf16* out, const float (&v)[kColumnsPerLane]) {
  store_global_16(out, make_uint4(bf16_pair(v[0], v[1]), bf16_pair(v[2], v[3]), bf16_pair(v[4], v[5]),
                                  bf16_pair(v[6], v[7])));
}
__device__ __forceinline__ void store_whole_row(float* out, const float (&v)[kColumnsPerLane]) {
  store_global_16(out, make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                                  __float_as_uint(v[3])));
  store_global_16(out + 4, make_uint4(__float_as_uint(v[4]), __float_as_uint(v[5]), __float_as_uint(v[6]),
                                      __float_as_uint(v[7])));
}
// One row's 8 columns from `out` on (`valid` of them inside the run).
__device__ __forceinline__ void store_row(bf16* out, const float (&v)[kColumnsPerLane], int valid) {
  if (valid == kColumnsPerLane && reinterpret_cast<uintptr_t>(out) % 16 == 0) return store_whole_row(out, v);
  for (int j = 0; j < valid; ++j) out[j] = __float2bfloat16(v[j]);
}
__device__ __forceinline__ void store_row(float* out, const float (&v)[kColumnsPerLane], int valid) {
  if (valid == kColumnsPerLane && reinterpret_cast<uintptr_t>(out) % 16 == 0) return store_whole_row(out, v);
  for (int j = 0; j < valid; ++j) out[j] = v[j];
}

// x fragment (m16 × k16 per step, row-major A layout) of the tile starting at row0. `whole`:
// K a multiple of 16, 4-byte aligned pairs and all 16 rows inside M, so every pair is one
// plain load (the checked form costs ~20 instructions a pair, ~10 an output of the tile).
__device__ __forceinline__ void load_x(uint32_t (&a)[kMaxSteps][4], const bf16* x, int64_t stride, int64_t M,
                                       int64_t row0, int K, int lane, bool whole) {
  const int64_t r = row0 + lane / 4;
  const int k = lane % 4 * 2;
  if (whole) {
    const bf16* p = x + r * stride + k;
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s) {
      const bool step = 16 * s < K;
      a[s][0] = step ? *reinterpret_cast<const uint32_t*>(p + 16 * s) : 0u;
      a[s][1] = step ? *reinterpret_cast<const uint32_t*>(p + 8 * stride + 16 * s) : 0u;
      a[s][2] = step ? *reinterpret_cast<const uint32_t*>(p + 16 * s + 8) : 0u;
      a[s][3] = step ? *reinterpret_cast<const uint32_t*>(p + 8 * stride + 16 * s + 8) : 0u;
    }
    return;
  }
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    a[s][0] = pair(x, stride, r, M, 16 * s + k, K);
    a[s][1] = pair(x, stride, r + 8, M, 16 * s + k, K);
    a[s][2] = pair(x, stride, r, M, 16 * s + k + 8, K);
    a[s][3] = pair(x, stride, r + 8, M, 16 * s + k + 8, K);
  }
}

// This lane's 8 pre-activations z = x·Wᵀ + bias of row `half` (0: lane / 4, 1: + 8) of its
// tile, from the four n8 accumulators.
__device__ __forceinline__ void pre_activations(const float (&acc)[4][4], int half, const float (&bias)[kColumnsPerLane],
                                                float (&z)[kColumnsPerLane]) {
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) z[j] = acc[j / 2][2 * half + j % 2] + bias[j];
}

// kCode ≥ 0: every column of the call has that activation code (the host knows it: GLA's
// gate is one log-sigmoid segment), and tiles whose 16 rows are all inside M take an
// epilogue without a check or a switch. ncu counted ~30 instructions an output in the
// general form, half of them branches, convergence barriers, predicates and addresses.
template <class Out, Mode kMode, int kCode = -1>
__global__ void __launch_bounds__(kThreads, kMode == Mode::forward ? kForwardBlocksPerSm : 1)
    narrow_projection(int64_t M, int64_t N, int K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns,
                      bool weights_before_wait) {
  static_assert(kCode < 0 || kMode == Mode::forward, "a compiled-in code is built for the forward only");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t slab = int64_t(blockIdx.x) * kSlabColumns;
  const int steps = (K + 15) / 16;

  // The slab's weight fragments (k16 × n8 "col" B layout: lane holds n = lane / 4 and
  // k = 2·(lane % 4) + {0, 1}, + 8), for the columns each tile stands for; zeros past N.
  const auto* w = static_cast<const bf16*>(weight.data);
  uint32_t b[kMaxSteps][4][2];
  const auto load_weights = [&] {
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s)
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int64_t column = slab + slab_column(t, lane / 4);
        const int k = 16 * s + lane % 4 * 2;
        b[s][t][0] = pair(w, weight.stride, column, N, k, K);
        b[s][t][1] = pair(w, weight.stride, column, N, k + 8, K);
      }
  };
  // Launched as a programmatic dependent: x is usually the previous GEMM's output (GLA's
  // low-rank code) and the column vectors may be the previous kernel's, so they are read after
  // that kernel has finished. The weights too, unless the host says they were complete before
  // it (weights_before_wait): then their L2 round trip overlaps the previous kernel's end
  // (measured −0.6 to −0.8 µs at 2048 tokens on the H100, NOTES.md).
  if (weights_before_wait) load_weights();
  wait_for_previous_grid();
  if (!weights_before_wait) load_weights();

  // This lane's 8 output columns and their epilogue vectors (null: no bias, identity, scale 1).
  const int64_t first = slab + lane % 4 * kColumnsPerLane;
  const int valid = static_cast<int>(std::clamp<int64_t>(N - first, 0, kColumnsPerLane));
  float bias[kColumnsPerLane], scale[kColumnsPerLane];
  int code[kColumnsPerLane];
#pragma unroll
  for (int j = 0; j < kColumnsPerLane; ++j) {
    const bool inside = j < valid;
    bias[j] = inside && columns.bias ? columns.bias[first + j] : 0.f;
    code[j] = inside && columns.code ? static_cast<int>(columns.code[first + j]) : 0;
    scale[j] = inside && columns.scale ? columns.scale[first + j] : 1.f;
  }
  // One code for all 8 columns (a lane straddles two segments only at a boundary), or −1.
  int lane_code = code[0];
#pragma unroll
  for (int j = 1; j < kColumnsPerLane; ++j)
    if (code[j] != code[0]) lane_code = -1;

  const auto* xg = static_cast<const bf16*>(x.data);
  auto* outg = static_cast<Out*>(out.data);
  // This lane's 8 columns inside N and every row's piece of them 16-byte aligned.
  const bool whole_lane = valid == kColumnsPerLane && out.stride % kColumnsPerLane == 0 &&
                          reinterpret_cast<uintptr_t>(outg + first) % 16 == 0;
  const int64_t tiles = (M + kTileRows - 1) / kTileRows, step = int64_t(gridDim.y) * kWarps;
  int64_t tile = int64_t(blockIdx.y) * kWarps + warp;
  // x's pairs plain loads wherever a tile is whole (load_x).
  const bool x_aligned = K % 16 == 0 && x.stride % 2 == 0 && reinterpret_cast<uintptr_t>(xg) % 4 == 0;
  const auto whole_x = [&](int64_t t) { return x_aligned && (t + 1) * kTileRows <= M; };
  uint32_t a[kMaxSteps][4];
  if (tile < tiles) load_x(a, xg, x.stride, M, tile * kTileRows, K, lane, whole_x(tile));
  for (; tile < tiles; tile += step) {
    float acc[4][4] = {};
#pragma unroll
    for (int s = 0; s < kMaxSteps; ++s)
      if (s < steps)
#pragma unroll
        for (int t = 0; t < 4; ++t) mma_bf16(acc[t], a[s], b[s][t][0], b[s][t][1]);
    // The next tile's x while this one's activations and stores run.
    if (tile + step < tiles) load_x(a, xg, x.stride, M, (tile + step) * kTileRows, K, lane, whole_x(tile + step));

    if (valid == 0) continue;
    if constexpr (kCode >= 0) {
      if (whole_lane && (tile + 1) * kTileRows <= M) {
        Out* at = outg + (tile * kTileRows + lane / 4) * out.stride + first;
#pragma unroll
        for (int half = 0; half < 2; ++half, at += 8 * out.stride) {
          float z[kColumnsPerLane], v[kColumnsPerLane];
          pre_activations(acc, half, bias, z);
          finish<kMode, kCode>(v, z, code, scale);
          store_whole_row(at, v);
        }
        continue;
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = tile * kTileRows + lane / 4 + 8 * half;
      if (row >= M) break;
      Out* at = outg + row * out.stride + first;
      float z[kColumnsPerLane], v[kColumnsPerLane];
      pre_activations(acc, half, bias, z);
      if constexpr (kMode == Mode::derivative) load_row(at, v, valid);
      finish<kMode>(v, z, code, scale, lane_code);
      store_row(at, v, valid);
    }
  }
}

// Blocks: every 32-column slab, and as many row blocks as fill the SMs once at the resident
// count; each warp then walks its share of the 16-row tiles with the slab's weights in
// registers.
template <class Out, Mode kMode, int kCode>
void launch_with_code(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns,
                      void* stream, bool weights_before_wait) {
  const int sms = multiprocessor_count();
  static const int resident = [] {
    int blocks = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, narrow_projection<Out, kMode, kCode>, kThreads, 0),
          "narrow projection: occupancy");
    return std::max(blocks, 1);
  }();
  const int64_t slabs = (N + kSlabColumns - 1) / kSlabColumns;
  const int64_t tiles = (M + kTileRows - 1) / kTileRows;
  const int64_t row_blocks = (tiles + kWarps - 1) / kWarps;
  // One wave: a second, partial wave of blocks made 1.55 waves at 32768 tokens (ncu).
  const int64_t wanted = std::max<int64_t>(1, int64_t(sms) * resident / slabs);
  const int64_t row_grid = std::min({row_blocks, wanted, int64_t{65535}});
  const dim3 grid(static_cast<unsigned>(slabs), static_cast<unsigned>(row_grid));
  launch_dependent(narrow_projection<Out, kMode, kCode>, grid, kThreads, 0, static_cast<cudaStream_t>(stream),
                   "projection chain: narrow_projection", M, N, static_cast<int>(K), x, weight, out, columns,
                   weights_before_wait && flag_from_environment("SEQMIX_CHAINS_NARROW_EARLY_WEIGHTS", true));
}

// The forward of a call whose columns are all log-sigmoid (GLA's low-rank gate) takes the
// kernel with that code compiled in; every other call the general one.
// SEQMIX_CHAINS_NARROW_EARLY_WEIGHTS=0 reads the weights after the wait in every call.
template <class Out, Mode kMode = Mode::forward>
void launch(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns,
            void* stream, bool weights_before_wait = false) {
  if (K > kNarrowProjectionMaxK || K < 1) throw Error("seqmix: narrow projection: K outside [1, 32]");
  if (M == 0 || N == 0) return;
  constexpr int kLogSigmoid = 3;
  if constexpr (kMode == Mode::forward)
    if (columns.uniform_code == kLogSigmoid)
      return launch_with_code<Out, kMode, kLogSigmoid>(M, N, K, x, weight, out, columns, stream,
                                                       weights_before_wait);
  launch_with_code<Out, kMode, -1>(M, N, K, x, weight, out, columns, stream, weights_before_wait);
}

}  // namespace seqmix::cuda::narrow
