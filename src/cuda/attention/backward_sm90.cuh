// Attention backward on Hopper, parallel over key blocks: one CTA per (128 keys, kv head,
// sequence) walks every query block of every query head of its GQA group, so dK and dV
// are whole sums kept in registers; dQ is accumulated in fp32 with atomics.
//   warpgroup 0  producer: warp 0 issues TMA copies of the K and V block once and of the
//                Q and dO blocks (64 rows) into a 2-stage ring; warp 1 copies the rows'
//                lse·log2(e) and delta (from the preprocess kernel) beside them.
//   warpgroups 1, 2  consumers: 64 keys each. Per query block, all by wgmma:
//                Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ (shared memory operands), Pᵀ = exp2(scale·log2e·Sᵀ − lse2),
//                dSᵀ = Pᵀ ⊙ (dPᵀ − delta), dV += Pᵀ·dO and dK += dSᵀ·Q (A from registers),
//                dSᵀ to shared memory, dQ = dS·K (both operands MN-major), dQ atomically
//                added into a float workspace.
// Three small kernels around it: preprocess (delta = rowsum(dO ⊙ O) − d_lse, lse·log2(e)),
// postprocess (dQ = scale · workspace, to the dtype). Not deterministic: the order of the
// dQ atomics varies; `deterministic` takes the kernels of backward.cuh instead.
#pragma once

#include <cuda.h>

#include "cuda/attention/backward.cuh"
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda::attn::sm90 {

// --- wgmma with both operands MN-major in shared memory (for dQ = dS·K) -----------------

template <class T>
struct GmmaMN;
template <>
struct GmmaMN<__nv_bfloat16> {
  using SS = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::MN, cute::SM90::GMMA::Major::MN>;
};
template <>
struct GmmaMN<__half> {
  using SS = cute::SM90::GMMA::MMA_64x64x16_F32F16F16_SS<cute::SM90::GMMA::Major::MN, cute::SM90::GMMA::Major::MN>;
};

// d[32] (+)= A(64x16, smem, M contiguous) · B(16x64, smem, N contiguous)
template <class T>
__device__ __forceinline__ void gmma_ss_mn(uint64_t a, uint64_t b, float (&d)[32], bool accumulate) {
  gmma_ss_impl<typename GmmaMN<T>::SS>(a, b, d, accumulate, std::make_integer_sequence<int, 32>{});
}

__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// The two consumer warpgroups (256 threads) meet at named barrier 1.
__device__ __forceinline__ void consumer_barrier() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

template <class T, int D>
struct BackwardSm90Config {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kBlockM = 64;   // query rows per pipeline stage
  static constexpr int kBlockN = 128;  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kStages = 2;
  static constexpr int kChunks = D / 64;  // 128-byte swizzle atoms across the head dim
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;
  // dQ of a query block: each consumer warpgroup computes 64 of its columns over kDqKeys keys.
  // D = 128: columns 64·wg over all 128 keys; D = 64: all columns over the warpgroup's own keys.
  static constexpr int kDqKeys = D == 128 ? 128 : 64;
  static constexpr uint32_t kKVBytes = kBlockN * D * sizeof(T);
  static constexpr uint32_t kQBytes = kBlockM * D * sizeof(T);
  static constexpr uint32_t kDsBytes = kBlockN * kBlockM * sizeof(T);  // dSᵀ: 128 key rows × 64 queries (128 B)
  static constexpr uint32_t kKOffset = 0;
  static constexpr uint32_t kVOffset = kKOffset + kKVBytes;
  static constexpr uint32_t kQOffset = kVOffset + kKVBytes;
  static constexpr uint32_t kDoOffset = kQOffset + kStages * kQBytes;
  static constexpr uint32_t kDsOffset = kDoOffset + kStages * kQBytes;  // two buffers
  static constexpr uint32_t kStatsOffset = kDsOffset + 2 * kDsBytes;    // lse2[kBlockM], delta[kBlockM] per stage
  static constexpr uint32_t kBarrierOffset = kStatsOffset + kStages * 2 * kBlockM * sizeof(float);
  // kv_full, q_full[], do_full[], stats_full[], stage_empty[]
  static constexpr uint32_t kBarriers = 1 + 4 * kStages;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + 8 * kBarriers + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

// The float workspace: dQ accumulators [batch][Hq][rows_q][D], then lse2 and delta
// [batch][Hq][rows_q] each.
struct Workspace {
  float* dq;
  float* lse2;
  float* delta;
};

struct BackwardSm90Args {
  CUtensorMap q_map, k_map, v_map, do_map;
  AttentionBackwardParams bp;
  Workspace ws;
};

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
    *reinterpret_cast<float4*>(ws.dq + item * D + 8 * part) = make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<float4*>(ws.dq + item * D + 8 * part + 4) = make_float4(0.f, 0.f, 0.f, 0.f);
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

// dq = scale · accumulators, 8 elements per thread.
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
  const float4 a = *reinterpret_cast<const float4*>(ws.dq + item * D + 8 * part);
  const float4 b = *reinterpret_cast<const float4*>(ws.dq + item * D + 8 * part + 4);
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

// --- the main kernel -------------------------------------------------------------------

// Query blocks this key block meets: causal query q sees key n0 iff n0 <= q + len_k − len_q.
struct QueryRange {
  int begin, end;  // query blocks [begin, end)
};

template <int kBlockM>
__device__ __forceinline__ QueryRange query_blocks(const Sequence& s, int n0, bool causal) {
  const int first_q = causal ? max(0, n0 - (s.len_k - s.len_q)) : 0;
  return {first_q / kBlockM, (s.len_q + kBlockM - 1) / kBlockM};
}

// Sᵀ (64 keys × 64 queries fragment) -> Pᵀ in place, dPᵀ -> dSᵀ in place. kMask: zero the
// elements past the sequence ends or above the causal diagonal.
template <bool kMask>
__device__ __forceinline__ void probabilities_and_grads(float (&s)[32], float (&dp)[32], const float* lse2,
                                                        const float* delta, float scale_log2, const Sequence& seq,
                                                        bool causal, int m0, int key_row0, int lane) {
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const int col = 8 * (i / 4) + 2 * (lane % 4) + (i & 1);  // query within the block
    float prob = fast_exp2(s[i] * scale_log2 - lse2[col]);
    if constexpr (kMask) {
      const int key = key_row0 + 8 * ((i >> 1) & 1), q = m0 + col;
      const bool visible = q < seq.len_q && key < seq.len_k && (!causal || key <= q + seq.len_k - seq.len_q);
      if (!visible) prob = 0.f;
    }
    s[i] = prob;
    dp[i] = prob * (dp[i] - delta[col]);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(384, 1) dkdv_dq_kernel(const __grid_constant__ BackwardSm90Args args) {
  using Cfg = BackwardSm90Config<T, D>;
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  const AttentionBackwardParams& bp = args.bp;
  const AttentionParams& p = bp.fwd;

  const int n_block = blockIdx.x, kv_head = blockIdx.y;
  const Sequence seq = sequence_of(p, blockIdx.z);
  const int n0 = n_block * kBlockN;
  if (n0 >= seq.len_k) return;
  const int group = static_cast<int>(p.Hq / p.Hkv);
  const QueryRange range = query_blocks<kBlockM>(seq, n0, p.causal);
  const int blocks_per_head = max(0, range.end - range.begin);
  const int iterations = group * blocks_per_head;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* k_tile = smem + Cfg::kKOffset;
  uint8_t* v_tile = smem + Cfg::kVOffset;
  uint8_t* q_tiles = smem + Cfg::kQOffset;
  uint8_t* do_tiles = smem + Cfg::kDoOffset;
  uint8_t* ds_tiles = smem + Cfg::kDsOffset;
  float* stats = reinterpret_cast<float*>(smem + Cfg::kStatsOffset);  // [stage][lse2 | delta][kBlockM]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + Cfg::kBarrierOffset);
  uint64_t* q_full = kv_full + 1;
  uint64_t* do_full = q_full + kStages;
  uint64_t* stats_full = do_full + kStages;
  uint64_t* stage_empty = stats_full + kStages;

  if (threadIdx.x == 0) {
    tma::barrier_init(kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(&q_full[s], 1);
      tma::barrier_init(&do_full[s], 1);
      tma::barrier_init(&stats_full[s], 32);
      tma::barrier_init(&stage_empty[s], Cfg::kConsumerThreads);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int warp_in_group = (threadIdx.x % 128) / 32;
  const int lane = threadIdx.x % 32;

  if (warpgroup == 0) {  // producer
    release_registers<24>();
    if (iterations == 0) return;
    if (warp_in_group == 0 && lane == 0) {
      prefetch_tensor_map(&args.q_map);
      prefetch_tensor_map(&args.do_map);
      const int k_row = static_cast<int>(seq.k_start) + n0;
      tma::arrive_expect_bytes(kv_full, 2 * Cfg::kKVBytes);
      for (int c = 0; c < Cfg::kChunks; ++c) {
        tma::load_box(k_tile + c * kBlockN * 128, args.k_map, 64 * c, k_row, kv_head, seq.batch, kv_full);
        tma::load_box(v_tile + c * kBlockN * 128, args.v_map, 64 * c, k_row, kv_head, seq.batch, kv_full);
      }
      for (int it = 0; it < iterations; ++it) {
        const int head = kv_head * group + it / blocks_per_head;
        const int q_row = static_cast<int>(seq.q_start) + (range.begin + it % blocks_per_head) * kBlockM;
        const int stage = it % kStages;
        tma::wait(&stage_empty[stage], ((it / kStages) & 1) ^ 1);
        uint8_t* q_dst = q_tiles + stage * Cfg::kQBytes;
        uint8_t* do_dst = do_tiles + stage * Cfg::kQBytes;
        tma::arrive_expect_bytes(&q_full[stage], Cfg::kQBytes);
        for (int c = 0; c < Cfg::kChunks; ++c)
          tma::load_box(q_dst + c * kBlockM * 128, args.q_map, 64 * c, q_row, head, seq.batch, &q_full[stage]);
        tma::arrive_expect_bytes(&do_full[stage], Cfg::kQBytes);
        for (int c = 0; c < Cfg::kChunks; ++c)
          tma::load_box(do_dst + c * kBlockM * 128, args.do_map, 64 * c, q_row, head, seq.batch, &do_full[stage]);
      }
    } else if (warp_in_group == 1) {  // the rows' lse2 and delta; rows past the sequence see nothing
      for (int it = 0; it < iterations; ++it) {
        const int head = kv_head * group + it / blocks_per_head;
        const int m0 = (range.begin + it % blocks_per_head) * kBlockM;
        const int stage = it % kStages;
        tma::wait(&stage_empty[stage], ((it / kStages) & 1) ^ 1);
        float* lse2 = stats + stage * 2 * kBlockM;
        for (int r = lane; r < kBlockM; r += 32) {
          const bool valid = m0 + r < seq.len_q;
          const int64_t index = row_index(p, seq.batch, head, seq.q_start + m0 + r);
          lse2[r] = valid ? args.ws.lse2[index] : INFINITY;
          lse2[kBlockM + r] = valid ? args.ws.delta[index] : 0.f;
        }
        tma::arrive(&stats_full[stage]);
      }
    }
    return;
  }

  // consumers
  claim_registers<240>();
  const int wg = warpgroup - 1;
  const int key_row0 = n0 + wg * 64 + warp_in_group * 16 + lane / 4;  // and + 8 (key within the sequence)
  const float scale_log2 = p.scale * 1.4426950408889634f;
  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;

  const uint8_t* k_rows = k_tile + wg * 64 * 128;  // this warpgroup's 64 keys in each chunk
  const uint8_t* v_rows = v_tile + wg * 64 * 128;
  // dQ operands: keys [dq_key0, dq_key0 + kDqKeys) of the block, head-dim columns [dq_col0, dq_col0 + 64).
  const int dq_key0 = D == 128 ? 0 : 64 * wg;
  const int dq_col0 = D == 128 ? 64 * wg : 0;

  if (iterations > 0) tma::wait(kv_full, 0);
  for (int it = 0; it < iterations; ++it) {
    const int head = kv_head * group + it / blocks_per_head;
    const int m0 = (range.begin + it % blocks_per_head) * kBlockM;
    const int stage = it % kStages;
    const uint32_t phase = (it / kStages) & 1;
    const uint8_t* q_tile = q_tiles + stage * Cfg::kQBytes;
    const uint8_t* do_tile = do_tiles + stage * Cfg::kQBytes;
    uint8_t* ds_tile = ds_tiles + (it % 2) * Cfg::kDsBytes;

    float s[32], dp[32];
    tma::wait(&q_full[stage], phase);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int chunk = kk / 4, offset = (kk % 4) * 32;
      gmma_ss<T, kBlockM>(smem_descriptor(k_rows + chunk * kBlockN * 128 + offset, 16),
                          smem_descriptor(q_tile + chunk * kBlockM * 128 + offset, 16), s, kk > 0);
    }
    wgmma_commit();
    tma::wait(&do_full[stage], phase);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int chunk = kk / 4, offset = (kk % 4) * 32;
      gmma_ss<T, kBlockM>(smem_descriptor(v_rows + chunk * kBlockN * 128 + offset, 16),
                          smem_descriptor(do_tile + chunk * kBlockM * 128 + offset, 16), dp, kk > 0);
    }
    wgmma_commit();
    tma::wait(&stats_full[stage], phase);
    const float* lse2 = stats + stage * 2 * kBlockM;
    wgmma_wait<0>();
    fence_registers(s);
    fence_registers(dp);

    const bool mask = m0 + kBlockM > seq.len_q || n0 + kBlockN > seq.len_k ||
                      (p.causal && n0 + kBlockN - 1 > m0 + seq.len_k - seq.len_q);
    if (mask)
      probabilities_and_grads<true>(s, dp, lse2, lse2 + kBlockM, scale_log2, seq, p.causal, m0, key_row0, lane);
    else
      probabilities_and_grads<false>(s, dp, lse2, lse2 + kBlockM, scale_log2, seq, p.causal, m0, key_row0, lane);

    uint32_t prob[kBlockM / 16][4], grad[kBlockM / 16][4];
    probabilities_to_operand<T, kBlockM>(s, prob);
    probabilities_to_operand<T, kBlockM>(dp, grad);
    // dSᵀ to shared memory, rows = keys of the block, 64 queries (128 bytes) per row.
    const int ds_row = wg * 64 + warp_in_group * 16 + lane / 4;
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // grad[kk][j]: row + 8·(j & 1), queries 16kk + 8·(j / 2) + 2·(lane % 4)
        const int row = ds_row + 8 * (j & 1), col = 16 * kk + 8 * (j / 2) + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(ds_tile + swizzled_offset(row, col * 2)) = grad[kk][j];
      }
    fence_async_shared();

    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      gmma_rs<T, D>(prob[kk], smem_descriptor(do_tile + kk * 16 * 128, kBlockM * 128), dv);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      gmma_rs<T, D>(grad[kk], smem_descriptor(q_tile + kk * 16 * 128, kBlockM * 128), dk);
    wgmma_commit();

    consumer_barrier();  // every warp's dSᵀ rows are in shared memory
    float dq[32];
#pragma unroll
    for (int kk = 0; kk < Cfg::kDqKeys / 16; ++kk) {
      const int key = dq_key0 + 16 * kk;
      gmma_ss_mn<T>(smem_descriptor(ds_tile + key * 128, kBlockN * 128),
                    smem_descriptor(k_tile + (dq_col0 / 64) * kBlockN * 128 + key * 128, kBlockN * 128), dq, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(dv);
    fence_registers(dk);
    fence_registers(dq);
    fence_registers(prob);
    fence_registers(grad);
    // Every consumer thread arrives: each has read the stage's lse2 and delta itself, and an
    // arrival by one lane after __syncwarp does not order the other lanes' reads before the
    // producer's next writes to the stage.
    tma::arrive(&stage_empty[stage]);

    // dQ rows (queries) 16·warp + lane/4 (+8), columns dq_col0 + 8c + 2·(lane % 4).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = m0 + warp_in_group * 16 + lane / 4 + 8 * r;
      if (q >= seq.len_q) continue;
      float* dst = args.ws.dq + row_index(p, seq.batch, head, seq.q_start + q) * D + dq_col0 + 2 * (lane % 4);
#pragma unroll
      for (int c = 0; c < 8; ++c)
        atomicAdd(reinterpret_cast<float2*>(dst + 8 * c), make_float2(dq[4 * c + 2 * r], dq[4 * c + 2 * r + 1]));
    }
  }

  // dK = scale · dSᵀ·Q and dV, rows below the sequence end (zeros where no query saw the key).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key_row0 + 8 * r;
    if (key >= seq.len_k) continue;
    const int64_t k_row = seq.k_start + key;
    T* dk_out = static_cast<T*>(bp.dk.data) + seq.batch * bp.dk.stride_batch + k_row * bp.dk.stride_row +
                kv_head * bp.dk.stride_head;
    T* dv_out = static_cast<T*>(bp.dv.data) + seq.batch * bp.dv.stride_batch + k_row * bp.dv.stride_row +
                kv_head * bp.dv.stride_head;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      const int col = 8 * c + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(dk_out + col) = pack2<T>(dk[4 * c + 2 * r] * p.scale, dk[4 * c + 2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv_out + col) = pack2<T>(dv[4 * c + 2 * r], dv[4 * c + 2 * r + 1]);
    }
  }
}

// --- launcher --------------------------------------------------------------------------

// Floats of the workspace: dQ accumulators, lse2 and delta for every (batch, head, row).
inline int64_t workspace_floats(const AttentionParams& p) {
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  return batch * p.Hq * p.rows_q * (p.D + 2);
}

template <class T, int D>
void launch_backward(const AttentionBackwardParams& bp) {
  using Cfg = BackwardSm90Config<T, D>;
  const AttentionParams& p = bp.fwd;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  const int64_t rows = batch * p.Hq * p.rows_q;
  if (rows == 0) return;

  // Stream-ordered scratch: freed on the same stream once the postprocess has read it.
  void* scratch = nullptr;
  check(cudaMallocAsync(&scratch, workspace_floats(p) * sizeof(float), stream), "cudaMallocAsync(attention dQ)");
  Workspace ws;
  ws.dq = static_cast<float*>(scratch);
  ws.lse2 = ws.dq + rows * D;
  ws.delta = ws.lse2 + rows;

  constexpr int kPerBlock = 256 / (D / 8);  // query rows per 256-thread block
  const unsigned row_blocks = static_cast<unsigned>((rows + kPerBlock - 1) / kPerBlock);
  preprocess_kernel<T, D><<<row_blocks, 256, 0, stream>>>(bp, ws, rows);
  check_launch("attention backward preprocess");

  BackwardSm90Args args;
  args.q_map = tensor_map<T>(p.q, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.do_map = tensor_map<T>(bp.dout, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.k_map = tensor_map<T>(p.k, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.v_map = tensor_map<T>(p.v, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.bp = bp;
  args.ws = ws;
  const auto kernel = dkdv_dq_kernel<T, D>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention backward sm90)");
  const dim3 grid(static_cast<unsigned>((p.max_seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN),
                  static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.num_sequences));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  check_launch("attention backward dK, dV, dQ");

  postprocess_kernel<T, D><<<row_blocks, 256, 0, stream>>>(bp, ws, rows);
  check_launch("attention backward postprocess");
  check(cudaFreeAsync(scratch, stream), "cudaFreeAsync(attention dQ)");
}

}  // namespace seqmix::cuda::attn::sm90
