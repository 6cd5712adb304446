// The one-pass forward's chunk transfer with the running product in registers (vector
// states, m = 1; NOTES.md, version 10). chunk_transfer.cuh keeps [P | v] in shared memory,
// split into tf32 hi and lo, because the product A_s·P takes P as its B operand: every step
// stores 2·N·(N + 8) floats and needs a second barrier. Here the product is transposed,
//   Pᵀ ← Pᵀ·A_sᵀ,
// so warp w's rows 16w..16w+15 of Pᵀ are both its accumulators (mma.sync m16n8k8 tf32,
// 3×tf32 as in chunk_transfer.cuh; bf16 transitions exact, two products) and the A operand
// of its next step: four shuffles inside each quad of lanes per k-slice move an
// accumulator tile into the A fragment's layout. A_sᵀ is the B operand, read from the
// stage as it landed (B[k][j] = A_s[j][k]: row j, k contiguous, conflict-free at the
// stage's row stride) and split in registers. v ← A_s·v + b_s runs on the CUDA cores, two
// threads a row, v in shared memory (two buffers). One barrier a step, no stores of P.
// Measured slower than the wgmma transfer on the H100 (NOTES.md, version 10: the
// mma.sync rate is the limit), so it runs only when asked for.
#pragma once

#include "cuda/linear_recurrence/chunk_transfer.cuh"

namespace seqmix::cuda::linrec {

// Σ_k row[k]·x[k] over `count` elements, as in the re-walk (fused_chunked.cuh).
template <class T, int count>
__device__ __forceinline__ float dot_row(const T* row, const float* x);

// The tf32 A fragment (m16n8k8, also wgmma's per warp) of a 16×8 slice of a product held
// in accumulators: rows gid, gid + 8 × columns tig, tig + 4 of the slice, in a[0..3], from
// the accumulator tile of the same columns (columns 2·tig, 2·tig + 1 of rows gid, gid + 8).
// Lane tig of a quad needs column tig from lane tig / 2 and column tig + 4 from lane
// 2 + tig / 2. Two shuffles a row half: the first brings column tig (even tig) or tig + 4
// (odd), the second the other; each sender picks the element its readers of that shuffle
// want.
__device__ __forceinline__ void tile_as_tf32_a_fragment(const float (&tile)[4], int lane, float (&a)[4]) {
  const int tig = lane % 4, quad = lane & ~3, odd = tig & 1, upper = tig >> 1;
  const int from_x = quad | (upper + 2 * odd), from_y = quad | (upper + 2 * (1 - odd));
  const float x_top = __shfl_sync(0xffffffffu, upper ? tile[1] : tile[0], from_x);
  const float x_bottom = __shfl_sync(0xffffffffu, upper ? tile[3] : tile[2], from_x);
  const float y_top = __shfl_sync(0xffffffffu, upper ? tile[0] : tile[1], from_y);
  const float y_bottom = __shfl_sync(0xffffffffu, upper ? tile[2] : tile[3], from_y);
  a[0] = odd ? y_top : x_top, a[1] = odd ? y_bottom : x_bottom;
  a[2] = odd ? x_top : y_top, a[3] = odd ? x_bottom : y_bottom;
}

// Chunk `chunk_index` of group g of a forward chain (not transposed, no identity step),
// m = 1: emit(row, col, value) for every padded row < N and column ≤ N of [P | v] (column
// N: v). Cfg: the caller's shared-memory layout (stages after kSplitBytes); v's buffers sit
// in the last 4N floats but 2N of the split area, so neither the caller's summary (the
// first N·(N + 8) floats) nor its state buffers (the last 2N) overlap them. Every thread
// leaves after a barrier that follows the last read of the stages.
template <class T, int N, class Cfg, class Emit>
__device__ __forceinline__ void chunk_transfer_in_registers(unsigned char* smem, const SeqChain& c, int64_t g,
                                                            int64_t chunk, int64_t chunk_index, int n, Emit&& emit) {
  constexpr int S = Cfg::kStages, LDA = Cfg::kStrideA, NT = N / 8;
  constexpr bool kExactA = sizeof(T) == 2;  // bf16 is exact in tf32
  static_assert(Cfg::kThreads == 2 * N && N % 16 == 0, "N/16 warps of 16 rows; two threads a row for v");
  static_assert(Cfg::kSplitBytes >= int(sizeof(float)) * (N * (N + 8) + 4 * N), "v's buffers after the summary");
  T* stages = reinterpret_cast<T*>(smem + Cfg::kSplitBytes);
  float* v_buffers = reinterpret_cast<float*>(smem + Cfg::kSplitBytes) - 4 * N;  // [2][N]

  const int64_t s_begin = chunk_index * chunk, len = min(chunk, c.steps - s_begin);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int row = tid / 2, half = tid % 2, k0 = half * (N / 2);  // v: thread (row, half)
  const T* A = static_cast<const T*>(c.A) + g * c.a_group;
  const T* b = static_cast<const T*>(c.b) + g * c.b_group;
  const auto issue = [&](int64_t i) {
    issue_chunk_step<Cfg>(stages + static_cast<int>(i % S) * Cfg::kStageElems, c, A, b, s_begin + i, i < len, n, n,
                          tid);
  };
#pragma unroll
  for (int d = 0; d < S - 1; ++d) issue(d);
  // Step i's stage landed for everyone and step i − 1 is done everywhere (its stage slot
  // and v buffer free): request step i + S − 1 into that slot.
  const auto begin_step = [&](int64_t i) {
    copy_async_wait<S - 2>();
    __syncthreads();
    issue(i + S - 1);
    return stages + static_cast<int>(i % S) * Cfg::kStageElems;
  };

  // acc[t][k]: Pᵀ at row 16·warp + gid + 8·(k / 2), column 8t + 2·tig + k % 2.
  float acc[NT][4];
  {  // the first step forms no product: Pᵀ = A_firstᵀ, v = b_first
    const T* stage = begin_step(0);
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = 16 * warp + gid + 8 * (k / 2), col = 8 * t + 2 * tig + k % 2;
        acc[t][k] = to_float(stage[col * LDA + r]);
      }
    if (half == 0) v_buffers[row] = row < n ? to_float(stage[Cfg::kStageA + row]) : 0.f;
  }
  for (int64_t i = 1; i < len; ++i) {
    const T* stage = begin_step(i);
    {  // v_i = A_i·v_{i-1} + b_i
      const float* v_prev = v_buffers + ((i - 1) % 2) * N;
      float x = dot_row<T, N / 2>(stage + row * LDA + k0, v_prev + k0);
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      if (half == 0) v_buffers[(i % 2) * N + row] = row < n ? x + to_float(stage[Cfg::kStageA + row]) : 0.f;
    }
    float next[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int k = 0; k < 4; ++k) next[t][k] = 0.f;
#pragma unroll
    for (int ks = 0; ks < NT; ++ks) {
      float a[4];
      tile_as_tf32_a_fragment(acc[ks], lane, a);
      unsigned a_hi[4], a_lo[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) a_hi[k] = to_tf32(a[k]), a_lo[k] = to_tf32(a[k] - __uint_as_float(a_hi[k]));
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const T* at = stage + (8 * t + gid) * LDA + 8 * ks + tig;
        const float b0 = to_float(at[0]), b1 = to_float(at[4]);
        const unsigned h0 = kExactA ? __float_as_uint(b0) : to_tf32(b0);
        const unsigned h1 = kExactA ? __float_as_uint(b1) : to_tf32(b1);
        if constexpr (!kExactA)
          mma_tf32(next[t], a_hi, to_tf32(b0 - __uint_as_float(h0)), to_tf32(b1 - __uint_as_float(h1)));
        mma_tf32(next[t], a_lo, h0, h1);
        mma_tf32(next[t], a_hi, h0, h1);
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[t][k] = next[t][k];
  }
  copy_async_wait<0>();
  __syncthreads();  // the last v written; every read of the stages done
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int k = 0; k < 4; ++k) emit(8 * t + 2 * tig + k % 2, 16 * warp + gid + 8 * (k / 2), acc[t][k]);
  if (half == 0) emit(row, N, v_buffers[((len - 1) % 2) * N + row]);
}

}  // namespace seqmix::cuda::linrec
