// A projection run of few columns over a deep K (Gated DeltaNet's gates: 32 columns, K =
// d = 2048): out = act(x·Wᵀ + bias)·scale. The CUTLASS GEMM spends a whole 256-wide tile
// and K-deep mainloop on each 128 or 256 rows for these 32 columns (35–55 µs at 2048–8192
// tokens, NOTES.md "Gated DeltaNet's forward"); the work is reading x once (8 MB at 2048
// tokens, mostly from L2 right after the main GEMM read it).
//
// A block owns kMTiles × 16 rows and a slab of 32 columns; its 8 warps split K, each
// walking chunks of 32: a lane loads 16 bytes (8 consecutive k) of each of its rows of x and
// of its weight rows, and feeds them to mma.sync m16n8k16 twice. The k order inside a step
// is permuted (lane t's k 8t..8t+3 in the first step, 8t+4..8t+7 in the second) the same way
// for x and the weights, so the sums are unchanged and no shuffle or shared memory is
// needed. The warps' partial tiles are then summed through shared memory and the first
// kMTiles warps run the epilogue with narrow_projection.cuh's finish: a lane's 8 consecutive
// columns of two rows, one 16-byte store per row (the same column deal as the narrow-K
// kernel). In derivative mode the run is the backward's recompute, dz ⊙= act'(z)·scale in
// place.
#pragma once

#include "cuda/chains/narrow_projection.cuh"

namespace seqmix::cuda::narrow_columns {

using narrow::bf16;
using narrow::Mode;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kChunk = 32;  // k per warp step: 4 lanes × 8

// Blocks of kMTiles × 16 rows (16 up to 4224 tokens, about one block a SM; 32 above). 16-row
// blocks: one block a SM, a warp loading 4 chunks before it multiplies. 32-row blocks: two
// blocks a SM (128 registers), one chunk at a time. Measured on the H100 (ChainsCudaTiming.NarrowColumns, the
// kernel alone, L2 flushed): at 2048 tokens one chunk at a time took 15.1 µs and the batch of
// 4 12.9; at 8192 tokens the batched single-block form took 27.4 µs against 22.1.
template <int kMTiles>
constexpr int kBatch = kMTiles == 1 ? 4 : 1;
template <int kMTiles>
constexpr int kBlocksPerSm = kMTiles == 1 ? 1 : 2;

// x is read once: past L1. The weights are read by every block: kept in L1.
__device__ __forceinline__ uint4 load_once(const bf16* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint4 load_kept(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Each lane has kBatch·(2·kMTiles + 4) 16-byte loads in flight.
template <class Out, Mode kMode, int kMTiles>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm<kMTiles>)
    narrow_columns(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = int64_t(blockIdx.x) * kMTiles * 16, slab = int64_t(blockIdx.y) * narrow::kSlabColumns;

  // This lane's rows of x (g and g + 8 of each m16 tile) and weight rows (column g of each
  // n8 tile, as narrow::slab_column deals them), at its 8 k of every chunk; rows past M or
  // N read a valid row and are zeroed.
  const auto* xg = static_cast<const bf16*>(x.data);
  const auto* wg = static_cast<const bf16*>(weight.data);
  const bf16* x_row[kMTiles][2];
  bool x_inside[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 16 * m + g + 8 * h;
      x_inside[m][h] = r < M;
      x_row[m][h] = xg + std::min(r, M - 1) * x.stride + 8 * t;
    }
  const bf16* w_row[4];
  bool w_inside[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t c = slab + narrow::slab_column(j, g);
    w_inside[j] = c < N;
    w_row[j] = wg + std::min(c, N - 1) * weight.stride + 8 * t;
  }

  // This lane's 8 output columns and their epilogue vectors (null: no bias, identity, scale
  // 1), loaded before the products so that their latency is not one more round trip at the
  // end. Only the first kMTiles warps use them.
  const int64_t first = slab + t * narrow::kColumnsPerLane;
  const int valid = static_cast<int>(std::clamp<int64_t>(N - first, 0, narrow::kColumnsPerLane));
  float bias[narrow::kColumnsPerLane], scale[narrow::kColumnsPerLane];
  int code[narrow::kColumnsPerLane];
#pragma unroll
  for (int j = 0; j < narrow::kColumnsPerLane; ++j) {
    const bool inside = warp < kMTiles && j < valid;
    bias[j] = inside && columns.bias ? columns.bias[first + j] : 0.f;
    code[j] = inside && columns.code ? static_cast<int>(columns.code[first + j]) : 0;
    scale[j] = inside && columns.scale ? columns.scale[first + j] : 1.f;
  }
  int lane_code = code[0];
#pragma unroll
  for (int j = 1; j < narrow::kColumnsPerLane; ++j)
    if (code[j] != code[0]) lane_code = -1;

  float acc[kMTiles][4][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // A warp's chunks are k0, k0 + kWarps·kChunk, ...; kB of them load together. K is a
  // multiple of 8: a lane's 8 values of a chunk are all inside or all past K.
  constexpr int64_t kStride = int64_t(kWarps) * kChunk;
  constexpr int kB = kBatch<kMTiles>;
  for (int64_t k0 = int64_t(warp) * kChunk; k0 < K; k0 += kB * kStride) {
    uint4 xa[kB][kMTiles][2], wb[kB][4];
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int64_t k = k0 + b * kStride;
      const bool k_inside = k + 8 * t < K;
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) xa[b][m][h] = k_inside && x_inside[m][h] ? load_once(x_row[m][h] + k) : zero;
#pragma unroll
      for (int j = 0; j < 4; ++j) wb[b][j] = k_inside && w_inside[j] ? load_kept(w_row[j] + k) : zero;
    }
#pragma unroll
    for (int b = 0; b < kB; ++b)
#pragma unroll
      for (int step = 0; step < 2; ++step)
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          const uint32_t a[4] = {word(xa[b][m][0], 2 * step), word(xa[b][m][1], 2 * step),
                                 word(xa[b][m][0], 2 * step + 1), word(xa[b][m][1], 2 * step + 1)};
#pragma unroll
          for (int j = 0; j < 4; ++j)
            narrow::mma_bf16(acc[m][j], a, word(wb[b][j], 2 * step), word(wb[b][j], 2 * step + 1));
        }
  }

  // The warps' partial tiles, summed: [warp][value][lane] keeps each store and load a full
  // row of 32 banks.
  __shared__ float partial[kWarps][kMTiles * 16][32];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][(m * 4 + j) * 4 + e][lane] = acc[m][j][e];
  __syncthreads();
  if (warp >= kMTiles) return;
  const int m = warp;
  if (valid == 0) return;
  float sum[4][4] = {};
#pragma unroll
  for (int w = 0; w < kWarps; ++w)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) sum[j][e] += partial[w][(m * 4 + j) * 4 + e][lane];

  auto* outg = static_cast<Out*>(out.data);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + 16 * m + g + 8 * h;
    if (row >= M) break;
    Out* at = outg + row * out.stride + first;
    float z[narrow::kColumnsPerLane], v[narrow::kColumnsPerLane];
#pragma unroll
    for (int j = 0; j < narrow::kColumnsPerLane; ++j) z[j] = sum[j / 2][2 * h + j % 2] + bias[j];
    if constexpr (kMode == Mode::derivative) narrow::load_row(at, v, valid);
    narrow::finish<kMode>(v, z, code, scale, lane_code);
    narrow::store_row(at, v, valid);
  }
}

// Blocks of 16 rows while that leaves fewer than about two blocks per SM (2048 tokens: 128
// blocks), else 32 (half the weight reads per row of x).
template <class Out, Mode kMode = Mode::forward>
void launch(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue columns,
            void* stream) {
  if (!narrow_columns_fit(N, K, x, weight)) throw Error("seqmix: narrow columns: operands it does not take");
  if (M == 0 || N == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned slabs = static_cast<unsigned>((N + narrow::kSlabColumns - 1) / narrow::kSlabColumns);
  if (M <= 16 * 264) {
    const dim3 grid(static_cast<unsigned>((M + 15) / 16), slabs);
    narrow_columns<Out, kMode, 1><<<grid, kThreads, 0, s>>>(M, N, K, x, weight, out, columns);
  } else {
    const dim3 grid(static_cast<unsigned>((M + 31) / 32), slabs);
    narrow_columns<Out, kMode, 2><<<grid, kThreads, 0, s>>>(M, N, K, x, weight, out, columns);
  }
  check_launch("projection chain: narrow_columns");
}

}  // namespace seqmix::cuda::narrow_columns
