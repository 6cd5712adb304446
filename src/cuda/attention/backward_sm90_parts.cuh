// Pieces of the Hopper attention backward (backward_sm90.cuh): the wgmma with both operands
// MN-major (dQ = dS·K), the kernel's arguments and float workspace, the preprocess and
// postprocess kernels, the query range of a key block, the Pᵀ/dSᵀ pass, and the bulk
// reduce-adds and turn barriers of the pingpong schedule.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/attention/backward.cuh"
#include "cuda/attention/launch.cuh"
#include "cuda/common/proxy.cuh"

namespace seqmix::cuda::attn::sm90 {

// --- wgmma with operands in shared memory in other majors --------------------------------
// MN, MN: dQ = dS·K (A = dS read from the dSᵀ rows, B = K rows). K, MN: the head-dim-split
// kernel's dV += Pᵀ·dO and dK += dSᵀ·Q (A = the Pᵀ / dSᵀ rows, B = dO / Q rows).

template <class T, int N>
struct GmmaMajors;
#define SEQMIX_ATTN_GMMA_MAJORS(TYPE, TAG, N)                                                                 \
  template <>                                                                                                \
  struct GmmaMajors<TYPE, N> {                                                                               \
    using MN_MN = cute::SM90::GMMA::MMA_64x##N##x16_F32##TAG##TAG##_SS<cute::SM90::GMMA::Major::MN,          \
                                                                       cute::SM90::GMMA::Major::MN>;         \
    using K_MN = cute::SM90::GMMA::MMA_64x##N##x16_F32##TAG##TAG##_SS<cute::SM90::GMMA::Major::K,            \
                                                                      cute::SM90::GMMA::Major::MN>;          \
  };
SEQMIX_ATTN_GMMA_MAJORS(__nv_bfloat16, BF16, 64)
SEQMIX_ATTN_GMMA_MAJORS(__nv_bfloat16, BF16, 128)
SEQMIX_ATTN_GMMA_MAJORS(__half, F16, 64)
SEQMIX_ATTN_GMMA_MAJORS(__half, F16, 128)
#undef SEQMIX_ATTN_GMMA_MAJORS

// d[N/2] (+)= A(64x16, smem, M contiguous) · B(16xN, smem, N contiguous)
template <class T, int N>
__device__ __forceinline__ void gmma_ss_mn(uint64_t a, uint64_t b, float (&d)[N / 2], bool accumulate) {
  gmma_ss_impl<typename GmmaMajors<T, N>::MN_MN>(a, b, d, accumulate, std::make_integer_sequence<int, N / 2>{});
}
// d[N/2] += A(64x16, smem, K contiguous) · B(16xN, smem, N contiguous)
template <class T, int N>
__device__ __forceinline__ void gmma_ss_k_mn(uint64_t a, uint64_t b, float (&d)[N / 2]) {
  gmma_ss_impl<typename GmmaMajors<T, N>::K_MN>(a, b, d, true, std::make_integer_sequence<int, N / 2>{});
}

// The two consumer warpgroups (256 threads) meet at named barrier 1.
__device__ __forceinline__ void consumer_barrier() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

struct Workspace {
  float* dq;
  // Floats of a dQ row: D, or 2·D for the deterministic backward at D = 64, whose two consumer
  // warpgroups (each over its own 64 keys of the block, all 64 columns) add into their own
  // halves, summed in the postprocess, so that neither waits on the other's adds.
  int dq_width;
  float* lse2;
  float* delta;
  // Deterministic backward: per (sequence, query head, query block of 64 rows) the count of
  // dQ adds done so far [num_sequences][Hq][lock_blocks]; nullptr otherwise.
  int* locks = nullptr;
  int lock_blocks = 0;
  // Deterministic without a mask, where every key block of a sequence can be resident at once:
  // the walks rotated (backward_sm90.cuh).
  bool rotated = false;
};

struct BackwardSm90Args {
  CUtensorMap q_map, k_map, v_map, do_map;
  CUtensorMap dq_map;  // the workspace's dQ accumulators (pingpong's reduce-adds)
  // dK and dV (box 64 columns × kBlockN rows), written by tensor copies from the staged K and
  // V tiles when staged_store (attention_backward_staged_store and 16-byte strides).
  CUtensorMap dk_map, dv_map;
  bool staged_store = false;
  AttentionBackwardParams bp;
  Workspace ws;
  // The sectioned 1-D grid (attention_backward_sections; KeyTile), or 0: the 3-D grid.
  int section_pairs = 0;
};

// The key block, kv head and sequence of a CTA: its cell of the 3-D grid (key blocks, kv
// heads, sequences), or in the sectioned 1-D grid its place in the list: sections of
// section_pairs (kv head, sequence) pairs, inside a section key blocks from the first to the
// last (causal walks longest first), pairs fastest; `key_blocks` a sequence at most.
struct KeyTile {
  int n_block, kv_head, sequence;
};

__device__ __forceinline__ KeyTile key_tile(const BackwardSm90Args& args, int key_blocks) {
  if (args.section_pairs == 0)
    return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  const AttentionParams& p = args.bp.fwd;
  const int Hkv = static_cast<int>(p.Hkv), pairs = Hkv * static_cast<int>(p.num_sequences);
  const int index = static_cast<int>(blockIdx.x), section_tiles = args.section_pairs * key_blocks;
  const int section = index / section_tiles, first_pair = section * args.section_pairs;
  const int pairs_here = min(args.section_pairs, pairs - first_pair), local = index - section * section_tiles;
  const int pair = first_pair + local % pairs_here;
  return {local / pairs_here, pair % Hkv, pair / Hkv};
}

__host__ __device__ inline int64_t row_index(const AttentionParams& p, int batch, int head, int64_t row) {
  return (static_cast<int64_t>(batch) * p.Hq + head) * p.rows_q + row;
}

// Byte offset of (row, column) in a tile of 128-byte rows with the 128-byte swizzle (the
// 16-byte chunk index XOR the row within its 8-row group), what the wgmma descriptors read.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col_bytes) {
  return row * 128 + ((((col_bytes >> 4) ^ (row & 7)) << 4) | (col_bytes & 15));
}

// --- preprocess and postprocess --------------------------------------------------------

// One query row per D/8 threads: delta = rowsum(dO ⊙ O) − d_lse, lse2 = lse·log2(e)
// (+inf for rows that saw no key, so their probabilities are 0); zeroes the dQ accumulators.
template <class T, int D>
__global__ void __launch_bounds__(256) preprocess_kernel(const AttentionBackwardParams bp, Workspace ws,
                                                         int64_t rows) {
  constexpr int kLanes = D / 8;
  const AttentionParams& p = bp.fwd;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int part = threadIdx.x % kLanes;
  const bool active = item < rows;  // rows = batch · Hq · rows_q, ordered (batch, head, row)
  const int64_t row = active ? item % p.rows_q : 0;
  const int head = active ? static_cast<int>((item / p.rows_q) % p.Hq) : 0;
  const int batch = active ? static_cast<int>(item / (p.rows_q * p.Hq)) : 0;
  float sum = 0.f;
  if (active) {
    const T* o = static_cast<const T*>(p.out.data) + batch * p.out.stride_batch + row * p.out.stride_row +
                 head * p.out.stride_head;
    const T* d = static_cast<const T*>(bp.dout.data) + batch * bp.dout.stride_batch + row * bp.dout.stride_row +
                 head * bp.dout.stride_head;
    sum = dot_chunk<T>(*reinterpret_cast<const uint4*>(o + 8 * part), *reinterpret_cast<const uint4*>(d + 8 * part));
    for (int half = 0; half < ws.dq_width; half += D) {
      float* dq = ws.dq + item * ws.dq_width + half + 8 * part;
      *reinterpret_cast<float4*>(dq) = make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(dq + 4) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  if (active && part == 0) {
    const float lse = p.lse[batch * p.lse_stride_batch + head * p.lse_stride_head + row * p.lse_stride_row];
    float d_lse = 0.f;
    if (bp.d_lse)
      d_lse = bp.d_lse[batch * bp.d_lse_stride_batch + head * bp.d_lse_stride_head + row * bp.d_lse_stride_row];
    ws.lse2[item] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
    ws.delta[item] = sum - d_lse;
  }
}

// dq = scale · accumulators (the two halves' sum, first plus second, where there are two),
// 8 elements per thread.
template <class T, int D>
__global__ void __launch_bounds__(256) postprocess_kernel(const AttentionBackwardParams bp, Workspace ws,
                                                          int64_t rows) {
  constexpr int kLanes = D / 8;
  const AttentionParams& p = bp.fwd;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int part = threadIdx.x % kLanes;
  if (item >= rows) return;
  const int64_t row = item % p.rows_q;
  const int head = static_cast<int>((item / p.rows_q) % p.Hq);
  const int batch = static_cast<int>(item / (p.rows_q * p.Hq));
  const float* dq = ws.dq + item * ws.dq_width + 8 * part;
  float4 a = *reinterpret_cast<const float4*>(dq);
  float4 b = *reinterpret_cast<const float4*>(dq + 4);
  if (ws.dq_width == 2 * D) {
    const float4 a2 = *reinterpret_cast<const float4*>(dq + D), b2 = *reinterpret_cast<const float4*>(dq + D + 4);
    a = make_float4(a.x + a2.x, a.y + a2.y, a.z + a2.z, a.w + a2.w);
    b = make_float4(b.x + b2.x, b.y + b2.y, b.z + b2.z, b.w + b2.w);
  }
  const float s = p.scale;
  uint4 packed;
  packed.x = pack2<T>(a.x * s, a.y * s);
  packed.y = pack2<T>(a.z * s, a.w * s);
  packed.z = pack2<T>(b.x * s, b.y * s);
  packed.w = pack2<T>(b.z * s, b.w * s);
  T* out = static_cast<T*>(bp.dq.data) + batch * bp.dq.stride_batch + row * bp.dq.stride_row +
           head * bp.dq.stride_head;
  *reinterpret_cast<uint4*>(out + 8 * part) = packed;
}

// Query blocks this key block meets: causal query q sees key n0 iff n0 <= q + len_k − len_q.
struct QueryRange {
  int begin, end;  // query blocks [begin, end)
};

template <int kBlockM>
__device__ __forceinline__ QueryRange query_blocks(const Sequence& s, int n0, bool causal) {
  const int first_q = causal ? max(0, n0 - (s.len_k - s.len_q)) : 0;
  return {first_q / kBlockM, (s.len_q + kBlockM - 1) / kBlockM};
}

// Element i of a thread's 64 × 64 accumulator fragment (rows = keys, columns = queries):
// query column 8·(i / 4) + 2·(lane % 4) + (i & 1), key row lane / 4 + 8·((i / 2) & 1) of the warp's 16.
__device__ __forceinline__ int fragment_column(int i, int lane) { return 8 * (i / 4) + 2 * (lane % 4) + (i & 1); }
__device__ __forceinline__ int fragment_row(int i) { return 8 * ((i >> 1) & 1); }

// Whether query q sees key `key` (both within the sequence, bottom-right causal).
__device__ __forceinline__ bool visible(const Sequence& seq, bool causal, int q, int key) {
  return q < seq.len_q && key < seq.len_k && (!causal || key <= q + seq.len_k - seq.len_q);
}

// dSᵀ of one element from its Pᵀ and dPᵀ. Exact zeros where masked (kMask), whatever the
// operand rows past a sequence end hold: whole 64-row dQ tiles are added, rows past a varlen
// sequence included.
template <bool kMask>
__device__ __forceinline__ float score_grad(float prob, float dp, float row_delta) {
  const float grad = prob * (dp - row_delta);
  if constexpr (kMask) return prob == 0.f ? 0.f : grad;
  return grad;
}

// Sᵀ (64 keys × 64 queries fragment) -> Pᵀ in place, dPᵀ -> dSᵀ in place. kMask: zero the
// elements past the sequence ends or above the causal diagonal.
template <bool kMask>
__device__ __forceinline__ void probabilities_and_grads(float (&s)[32], float (&dp)[32], const float* lse2,
                                                        const float* delta, float scale_log2, const Sequence& seq,
                                                        bool causal, int m0, int key_row0, int lane) {
  // Elements 4g .. 4g + 3 are queries 8g + 2·(lane % 4) + {0, 1} of two key rows: their lse2
  // and delta pairs are adjacent (8-byte aligned), one 8-byte shared load each per group.
  float2 lse2_pair, delta_pair;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int col = fragment_column(i, lane);
    if (i % 4 == 0) {
      lse2_pair = *reinterpret_cast<const float2*>(lse2 + col);
      delta_pair = *reinterpret_cast<const float2*>(delta + col);
    }
    const float row_lse2 = (i & 1) ? lse2_pair.y : lse2_pair.x, row_delta = (i & 1) ? delta_pair.y : delta_pair.x;
    float prob = ex2_fast(s[i] * scale_log2 - row_lse2);
    if constexpr (kMask) {  // visible(), written out: through the call ptxas spills 4 bytes in pingpong D = 128
      const int key = key_row0 + 8 * ((i >> 1) & 1), q = m0 + col;
      if (!(q < seq.len_q && key < seq.len_k && (!causal || key <= q + seq.len_k - seq.len_q))) prob = 0.f;
    }
    s[i] = prob;
    dp[i] = prob * (dp[i] - row_delta);
    if constexpr (kMask) dp[i] = prob == 0.f ? 0.f : dp[i];
  }
}

// The head-dim-split kernel's halves of the pass above: Sᵀ -> Pᵀ in place (one warpgroup) ...
template <bool kMask>
__device__ __forceinline__ void probabilities(float (&s)[32], const float* lse2, float scale_log2, const Sequence& seq,
                                              bool causal, int m0, int key_row0, int lane) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int col = fragment_column(i, lane);
    const float2 lse2_pair = *reinterpret_cast<const float2*>(lse2 + col);
    const int key = key_row0 + fragment_row(i);
    s[i] = ex2_fast(s[i] * scale_log2 - lse2_pair.x);
    s[i + 1] = ex2_fast(s[i + 1] * scale_log2 - lse2_pair.y);
    if constexpr (kMask) {
      if (!visible(seq, causal, m0 + col, key)) s[i] = 0.f;
      if (!visible(seq, causal, m0 + col + 1, key)) s[i + 1] = 0.f;
    }
  }
}

// ... and dPᵀ -> dSᵀ in place from the 16-bit Pᵀ pairs that warpgroup stored (the other).
template <class T, bool kMask>
__device__ __forceinline__ void grads(float (&dp)[32], const uint32_t (&prob_pairs)[16], const float* delta, int lane) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const float2 prob = unpack2<T>(prob_pairs[i / 2]);
    const float2 delta_pair = *reinterpret_cast<const float2*>(delta + fragment_column(i, lane));
    dp[i] = score_grad<kMask>(prob.x, dp[i], delta_pair.x);
    dp[i + 1] = score_grad<kMask>(prob.y, dp[i + 1], delta_pair.y);
  }
}

// --- dQ through shared memory and the turns (pingpong) -----------------------------------------------

// Adds a box of a float tensor map (4-d coordinates, innermost first) from shared memory
// into global memory: one copy-engine operation for the whole box, rows past the map's
// bounds dropped.
__device__ __forceinline__ void tensor_reduce_add(const CUtensorMap& map, const void* src, int c0, int c1, int c2,
                                                  int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          reinterpret_cast<uint64_t>(&map)),
      "r"(tma::shared_address(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Commit and wait on them with tma::bulk_commit, bulk_wait_read (shared memory may be rewritten)
// and bulk_wait_all (done: before the CTA exits).

// The deterministic backward's order of dQ adds: a query block's lock counts the adds made to
// it. The adder waits until `count` adds are done (acquire, then ordered before its own
// bulk reduce, an async-proxy write) ...
__device__ __forceinline__ void wait_for_adds(const int* lock, int count) {
  int done;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(done) : "l"(lock) : "memory");
  } while (done < count);
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
// ... and, once its reduce has completed (bulk_wait_all), counts it (the async-proxy writes
// ordered before the release).
__device__ __forceinline__ void count_add(int* lock) {
  asm volatile("fence.proxy.async.global;" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(lock) : "memory");
}

// --- key-block pairs (clusters of two CTAs) ------------------------------------------------

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of both CTAs arrives, then waits. kRelease: what the thread wrote before (an
// arrival on the other CTA's barrier) is performed first; it costs a GPU-wide MEMBAR, which
// waits for the thread's global stores too. Not `.aligned`: the producer's lanes reach it
// from different branches.
template <bool kRelease>
__device__ __forceinline__ void cluster_sync() {
  if constexpr (kRelease)
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
  else
    asm volatile("barrier.cluster.arrive.relaxed;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// One arrival on the barrier at the same shared-memory offset in CTA `rank` of the cluster.
// Default (CTA-scope) release: `.release.cluster` puts a GPU-wide MEMBAR before it, and the
// only reads it must order (the stage's, by wgmma and bulk reduces) have completed already.
__device__ __forceinline__ void arrive_in_cta(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(tma::shared_address(bar)),
      "r"(rank)
      : "memory");
}

// tma::load_box into the same offset of every CTA in `cta_mask` (bit r: rank r), each
// completing the bytes on its own barrier at `bar`'s offset.
__device__ __forceinline__ void load_box_multicast(void* dst, const CUtensorMap& map, int c0, int c1, int c2, int c3,
                                                   uint64_t* bar, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;" ::"r"(tma::shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(tma::shared_address(bar)),
      "h"(cta_mask)
      : "memory");
}

// Named barriers of the pingpong turns (0 is __syncthreads, 1 the standard schedule's dSᵀ
// barrier): consumer warpgroup w issues after barrier kBackwardTurnBarrier + w completes,
// i.e. after the other warpgroup has issued.
inline constexpr int kBackwardTurnBarrier = 2;

// The dQ accumulators [batch][Hq][rows_q][width] as a 4-d float map (width, rows, heads,
// batch), added to in boxes of 32 columns (128 bytes, 128-byte swizzle) × 64 rows.
inline CUtensorMap dq_workspace_map(float* dq, int width, const AttentionParams& p, int64_t batch) {
  const int64_t row_bytes = width * sizeof(float);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(width), static_cast<cuuint64_t>(p.rows_q),
                              static_cast<cuuint64_t>(p.Hq), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(p.rows_q * row_bytes),
                                 static_cast<cuuint64_t>(p.Hq * p.rows_q * row_bytes)};
  const cuuint32_t box[4] = {32, 64, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult status = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, dq, dims, strides, box,
                                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) check(cudaErrorInvalidValue, "cuTensorMapEncodeTiled (attention dQ workspace)");
  return map;
}

// Floats of the workspace: dQ accumulators (`dq_width` a row), lse2 and delta for every
// (batch, head, row).
inline int64_t workspace_floats(const AttentionParams& p, int dq_width) {
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  return batch * p.Hq * p.rows_q * (dq_width + 2);
}

}  // namespace seqmix::cuda::attn::sm90
