// Attention backward: two kernels, each recomputing the probabilities from the saved
// log-sum-exp, with warp-level mma.sync (m16n8k16) on padded shared-memory tiles. A first,
// simple version: synchronous tile loads, no TMA/wgmma pipeline.
// Instantiated for D 64 and 128 (backward_*.cu) and dispatched from src/core/attention.cpp;
// checked against the oracle by the AttentionCudaBackward tests. See NOTES.md.
//   dkdv_kernel: one CTA per (64-key block, kv head, sequence) walks every query block of
//                every query head of its GQA group; dK, dV stay in registers (4 warps x 16
//                keys), so GQA sums need no atomics.
//   dq_kernel:   one CTA per (64-query block, query head, sequence) walks the key blocks;
//                dQ stays in registers (4 warps x 16 queries).
// Both are deterministic (no atomics); the price is S and dP computed twice (7 matrix
// products per tile pair instead of 5). Per query row, delta = rowsum(dO ⊙ O) − d_lse is
// computed where the row is loaded:
//   P = exp(scale·qkᵀ − lse), dS = P ⊙ (dO·Vᵀ − delta), dV = Pᵀ·dO, dK = scale·dSᵀ·Q, dQ = scale·dS·K.
#pragma once

#include "cuda/attention/forward.cuh"
#include "cuda/attention/mma.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/runtime.cuh"

namespace seqmix::cuda::attn {

inline constexpr int kBwdBlock = 64;  // query and key rows per tile
inline constexpr int kBwdThreads = 128;

template <class T, int D>
struct BackwardConfig {
  static constexpr int kStride = D + 8;  // padded row, in elements
  static constexpr int kTileElems = kBwdBlock * kStride;
  // four tiles (Q, dO, K, V) and the per-row lse·log2(e) and delta
  static constexpr int kSmemBytes = 4 * kTileElems * sizeof(T) + 2 * kBwdBlock * sizeof(float);
};

// Rows [row0, row0 + 64) of one head of a view into a padded tile; rows at or past
// `valid` become zeros.
template <class T, int D>
__device__ __forceinline__ void load_tile(T* tile, const AttentionView& v, int batch, int64_t row0, int valid,
                                          int head) {
  constexpr int kChunks = D / 8;  // 16-byte vectors per row
  const T* base = static_cast<const T*>(v.data) + batch * v.stride_batch + head * v.stride_head;
  for (int i = threadIdx.x; i < kBwdBlock * kChunks; i += kBwdThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (r < valid) value = *reinterpret_cast<const uint4*>(base + (row0 + r) * v.stride_row + c);
    *reinterpret_cast<uint4*>(tile + r * BackwardConfig<T, D>::kStride + c) = value;
  }
}

template <class T>
__device__ __forceinline__ float dot_chunk(const uint4& a, const uint4& b) {
  const T* x = reinterpret_cast<const T*>(&a);
  const T* y = reinterpret_cast<const T*>(&b);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s += static_cast<float>(x[i]) * static_cast<float>(y[i]);
  return s;
}

// Per query row of the tile: lse·log2(e) and delta = rowsum(dO ⊙ O) − d_lse. Two threads
// per row; dO comes from the loaded tile, O from global memory.
template <class T, int D>
__device__ __forceinline__ void load_row_stats(float* lse2, float* delta, const T* dout_tile,
                                               const AttentionBackwardParams& bp, const Sequence& seq, int head,
                                               int m0, int valid) {
  const AttentionParams& p = bp.fwd;
  const int r = threadIdx.x / 2, half = threadIdx.x % 2;
  float sum = 0.f;
  const int64_t q_row = seq.q_start + m0 + r;
  if (r < valid) {
    const T* o = static_cast<const T*>(p.out.data) + seq.batch * p.out.stride_batch + q_row * p.out.stride_row +
                 head * p.out.stride_head;
#pragma unroll
    for (int c = half * D / 2; c < (half + 1) * D / 2; c += 8)
      sum += dot_chunk<T>(*reinterpret_cast<const uint4*>(o + c),
                          *reinterpret_cast<const uint4*>(dout_tile + r * BackwardConfig<T, D>::kStride + c));
  }
  sum += __shfl_xor_sync(0xffffffff, sum, 1);
  if (half == 0) {
    float lse = 0.f, d_lse = 0.f;
    if (r < valid) {
      lse = p.lse[seq.batch * p.lse_stride_batch + head * p.lse_stride_head + q_row * p.lse_stride_row];
      if (bp.d_lse)
        d_lse = bp.d_lse[seq.batch * bp.d_lse_stride_batch + head * bp.d_lse_stride_head + q_row * bp.d_lse_stride_row];
    }
    lse2[r] = lse * 1.4426950408889634f;
    delta[r] = sum - d_lse;
  }
}

// s (scores) -> dS in place, dp (dO·Vᵀ) -> P in place, for 8 n8 tiles of one warp.
// (query, key) of element (j, e) come from `coords`; kQueryRows: the tile's rows are queries.
template <bool kQueryRows>
__device__ __forceinline__ void probabilities_and_score_grads(float (&s)[8][4], float (&dp)[8][4],
                                                              const float* lse2, const float* delta,
                                                              const Sequence& seq, bool causal, float scale_log2,
                                                              int m0, int n0, int warp_row0, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = warp_row0 + lane / 4 + (e >= 2 ? 8 : 0), col = 8 * j + 2 * (lane % 4) + (e & 1);
      const int q_local = kQueryRows ? row : col, k_local = kQueryRows ? col : row;
      const int q = m0 + q_local, key = n0 + k_local;
      const bool visible = q < seq.len_q && key < seq.len_k && (!causal || key <= q + seq.len_k - seq.len_q);
      const float prob = visible ? ex2_fast(s[j][e] * scale_log2 - lse2[q_local]) : 0.f;
      s[j][e] = prob * (dp[j][e] - delta[q_local]);
      dp[j][e] = prob;
    }
}

// c[8][4] (16 rows x 64 columns) = A(16 x D rows of `a`, from row a_row0) · Bᵀ (64 rows of `b`)
template <class T, int D>
__device__ __forceinline__ void product_abt(float (&c)[8][4], const SmemTile<T>& a, int a_row0, const SmemTile<T>& b,
                                            int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[j][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t fa[4];
    load_a(fa, a, a_row0, 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t fb[4];
      load_b_rows_n(fb, b, 16 * np, 16 * kk, lane);
      mma_16816<T>(c[2 * np], fa, fb[0], fb[1]);
      mma_16816<T>(c[2 * np + 1], fa, fb[2], fb[3]);
    }
  }
}

// acc[D/8][4] (16 x D) += X (16 x 64, accumulator fragments) · B (64 rows x D of `b`)
template <class T, int D>
__device__ __forceinline__ void accumulate_xb(float (&acc)[D / 8][4], const float (&x)[8][4], const SmemTile<T>& b,
                                              int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t fa[4];
    accumulator_to_a<T, 8>(fa, x, j);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t fb[4];
      load_b_rows_k(fb, b, 16 * j, 16 * np, lane);
      mma_16816<T>(acc[2 * np], fa, fb[0], fb[1]);
      mma_16816<T>(acc[2 * np + 1], fa, fb[2], fb[3]);
    }
  }
}

// 16 rows x D of accumulators (times `scale`) to rows [row0, row0 + 16) of a view, below `valid`.
template <class T, int D>
__device__ __forceinline__ void store_rows(const AttentionView& v, int batch, int64_t row0, int head, int valid,
                                           const float (&acc)[D / 8][4], float scale, int lane) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = lane / 4 + 8 * half;
    if (r >= valid) continue;
    T* out = static_cast<T*>(v.data) + batch * v.stride_batch + (row0 + r) * v.stride_row + head * v.stride_head;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<uint32_t*>(out + 8 * j + 2 * (lane % 4)) =
          pack2<T>(acc[j][2 * half] * scale, acc[j][2 * half + 1] * scale);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kBwdThreads) dkdv_kernel(const AttentionBackwardParams bp) {
  using Cfg = BackwardConfig<T, D>;
  const AttentionParams& p = bp.fwd;
  const int n_block = blockIdx.x, kv_head = blockIdx.y;
  const Sequence seq = sequence_of(p, blockIdx.z);
  const int n0 = n_block * kBwdBlock;
  if (n0 >= seq.len_k) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* tiles = reinterpret_cast<T*>(smem_raw);
  const SmemTile<T> q_tile{tiles, Cfg::kStride}, do_tile{tiles + Cfg::kTileElems, Cfg::kStride},
      k_tile{tiles + 2 * Cfg::kTileElems, Cfg::kStride}, v_tile{tiles + 3 * Cfg::kTileElems, Cfg::kStride};
  float* lse2 = reinterpret_cast<float*>(tiles + 4 * Cfg::kTileElems);
  float* delta = lse2 + kBwdBlock;

  const int valid_k = min(kBwdBlock, seq.len_k - n0);
  load_tile<T, D>(k_tile.data, p.k, seq.batch, seq.k_start + n0, valid_k, kv_head);
  load_tile<T, D>(v_tile.data, p.v, seq.batch, seq.k_start + n0, valid_k, kv_head);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const float scale_log2 = p.scale * 1.4426950408889634f;
  // Causal: query q sees this block once q + len_k − len_q >= n0.
  const int first_q = p.causal ? max(0, n0 - (seq.len_k - seq.len_q)) : 0;
  const int group = static_cast<int>(p.Hq / p.Hkv);
  for (int g = 0; g < group; ++g) {
    const int head = kv_head * group + g;
    for (int m0 = (first_q / kBwdBlock) * kBwdBlock; m0 < seq.len_q; m0 += kBwdBlock) {
      const int valid_q = min(kBwdBlock, seq.len_q - m0);
      __syncthreads();  // the previous tiles are consumed
      load_tile<T, D>(q_tile.data, p.q, seq.batch, seq.q_start + m0, valid_q, head);
      load_tile<T, D>(do_tile.data, bp.dout, seq.batch, seq.q_start + m0, valid_q, head);
      __syncthreads();
      load_row_stats<T, D>(lse2, delta, do_tile.data, bp, seq, head, m0, valid_q);
      __syncthreads();

      float s[8][4], dp[8][4];  // 16 keys x 64 queries per warp: Sᵀ, then dSᵀ; dPᵀ, then Pᵀ
      product_abt<T, D>(s, k_tile, 16 * warp, q_tile, lane);
      product_abt<T, D>(dp, v_tile, 16 * warp, do_tile, lane);
      probabilities_and_score_grads<false>(s, dp, lse2, delta, seq, p.causal, scale_log2, m0, n0, 16 * warp, lane);
      accumulate_xb<T, D>(dv, dp, do_tile, lane);
      accumulate_xb<T, D>(dk, s, q_tile, lane);
    }
  }
  store_rows<T, D>(bp.dk, seq.batch, seq.k_start + n0 + 16 * warp, kv_head, valid_k - 16 * warp, dk, p.scale, lane);
  store_rows<T, D>(bp.dv, seq.batch, seq.k_start + n0 + 16 * warp, kv_head, valid_k - 16 * warp, dv, 1.f, lane);
}

template <class T, int D>
__global__ void __launch_bounds__(kBwdThreads) dq_kernel(const AttentionBackwardParams bp) {
  using Cfg = BackwardConfig<T, D>;
  const AttentionParams& p = bp.fwd;
  const int m_block = gridDim.x - 1 - blockIdx.x, head = blockIdx.y;
  const Sequence seq = sequence_of(p, blockIdx.z);
  const int m0 = m_block * kBwdBlock;
  if (m0 >= seq.len_q) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kv_head = head / static_cast<int>(p.Hq / p.Hkv);

  extern __shared__ __align__(16) uint8_t smem_raw[];
  T* tiles = reinterpret_cast<T*>(smem_raw);
  const SmemTile<T> q_tile{tiles, Cfg::kStride}, do_tile{tiles + Cfg::kTileElems, Cfg::kStride},
      k_tile{tiles + 2 * Cfg::kTileElems, Cfg::kStride}, v_tile{tiles + 3 * Cfg::kTileElems, Cfg::kStride};
  float* lse2 = reinterpret_cast<float*>(tiles + 4 * Cfg::kTileElems);
  float* delta = lse2 + kBwdBlock;

  const int valid_q = min(kBwdBlock, seq.len_q - m0);
  load_tile<T, D>(q_tile.data, p.q, seq.batch, seq.q_start + m0, valid_q, head);
  load_tile<T, D>(do_tile.data, bp.dout, seq.batch, seq.q_start + m0, valid_q, head);
  __syncthreads();
  load_row_stats<T, D>(lse2, delta, do_tile.data, bp, seq, head, m0, valid_q);

  float dq[D / 8][4] = {};
  const float scale_log2 = p.scale * 1.4426950408889634f;
  int end = seq.len_k;  // keys any row of the tile sees
  if (p.causal) end = min(end, m0 + kBwdBlock + seq.len_k - seq.len_q);
  for (int n0 = 0; n0 < end; n0 += kBwdBlock) {
    const int valid_k = min(kBwdBlock, seq.len_k - n0);
    __syncthreads();  // the previous K, V tiles are consumed (and the row stats written)
    load_tile<T, D>(k_tile.data, p.k, seq.batch, seq.k_start + n0, valid_k, kv_head);
    load_tile<T, D>(v_tile.data, p.v, seq.batch, seq.k_start + n0, valid_k, kv_head);
    __syncthreads();

    float s[8][4], dp[8][4];  // 16 queries x 64 keys per warp: S, then dS; dP, then P
    product_abt<T, D>(s, q_tile, 16 * warp, k_tile, lane);
    product_abt<T, D>(dp, do_tile, 16 * warp, v_tile, lane);
    probabilities_and_score_grads<true>(s, dp, lse2, delta, seq, p.causal, scale_log2, m0, n0, 16 * warp, lane);
    accumulate_xb<T, D>(dq, s, k_tile, lane);
  }
  store_rows<T, D>(bp.dq, seq.batch, seq.q_start + m0 + 16 * warp, head, valid_q - 16 * warp, dq, p.scale, lane);
}

template <class T, int D>
void launch_backward(const AttentionBackwardParams& bp) {
  using Cfg = BackwardConfig<T, D>;
  const AttentionParams& p = bp.fwd;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const auto dkdv = dkdv_kernel<T, D>;
  const auto dq = dq_kernel<T, D>;
  check(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention dkdv)");
  check(cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention dq)");
  const unsigned sequences = static_cast<unsigned>(p.num_sequences);
  const dim3 kv_grid(static_cast<unsigned>((p.max_seqlen_k + kBwdBlock - 1) / kBwdBlock),
                     static_cast<unsigned>(p.Hkv), sequences);
  dkdv<<<kv_grid, kBwdThreads, Cfg::kSmemBytes, stream>>>(bp);
  check_launch("attention backward dK, dV");
  const dim3 q_grid(static_cast<unsigned>((p.max_seqlen_q + kBwdBlock - 1) / kBwdBlock),
                    static_cast<unsigned>(p.Hq), sequences);
  dq<<<q_grid, kBwdThreads, Cfg::kSmemBytes, stream>>>(bp);
  check_launch("attention backward dQ");
}

}  // namespace seqmix::cuda::attn
