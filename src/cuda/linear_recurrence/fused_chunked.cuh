// The chunked method's forward for vector states (m = 1, n ≤ 64) in one pass, so that
// every transition comes from memory once (NOTES.md, version 7). A block per chunk:
//   1. the chunk's summary [P | v] (chunk_transfer.cuh, the split path's transfer block),
//      kept in shared memory in f32 (not for the last chunk, whose successor is none);
//   2. the state entering the chunk, s_c, from its predecessor's slots (chunk 0: the
//      initial state); then s_{c+1} = P·s_c + v published the same way for the
//      successor. Each slot holds one element and its "written" mark in one 64-bit word,
//      so a reader polls the data itself: no fence, flag or second round trip per
//      hand-off (version 7 measured ~1.9 µs a hand-off with a released flag);
//   3. the chunk re-walked from s_c through the same ring of stages, writing h: its
//      transitions were read by step 1 moments before, so short chunks find them in L2.
// Chunks are taken in the order of an atomic ticket (chunk-major over groups), not of
// blockIdx: a block waits only for a chunk with a smaller ticket, whose block already
// runs or has finished, so the waits cannot deadlock whichever blocks are resident.
#pragma once

#include "cuda/linear_recurrence/chunk_transfer.cuh"

namespace seqmix::cuda::linrec {

struct FusedChunkParams {
  SeqChain chain;      // the forward chain over the inputs: A, b, start, out (input type), last
  // [G, chunks, n]: element k of the state after chunk c of group g as (1 << 32) | its
  // float bits once written, 0 before (zeroed before the launch, with the ticket).
  unsigned long long* states;
  unsigned* ticket;  // the next chunk to take
  int64_t G = 0, chunk = 0, chunks = 0;
  int n = 0;
};

// A hand-off slot: 64-bit accesses are single-copy atomic, so value and mark arrive
// together; relaxed at GPU scope so the poll sees the other SM's store (not a stale L1).
__device__ __forceinline__ void publish(unsigned long long* slot, float value) {
  const unsigned long long word = (1ull << 32) | __float_as_uint(value);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;\n" ::"l"(slot), "l"(word) : "memory");
}
__device__ __forceinline__ float wait_for(const unsigned long long* slot) {
  unsigned long long word;
  do {
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(word) : "l"(slot) : "memory");
  } while ((word >> 32) == 0);
  return __uint_as_float(static_cast<unsigned>(word));
}

// Σ_k row[k]·x[k] over `count` elements (a multiple of 16 bytes of T), row and x
// 16-byte aligned in shared memory: vector loads (a quarter of the scalar ones in f32).
template <class T, int count>
__device__ __forceinline__ float dot_row(const T* row, const float* x) {
  float sum = 0.f;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int k = 0; k < count; k += 4) {
      const float4 a = *reinterpret_cast<const float4*>(row + k), v = *reinterpret_cast<const float4*>(x + k);
      sum += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < count; k += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(row + k);
      const float4 v0 = *reinterpret_cast<const float4*>(x + k), v1 = *reinterpret_cast<const float4*>(x + k + 4);
      const float2 a0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 a1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      const float2 a2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.z));
      const float2 a3 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.w));
      sum += a0.x * v0.x + a0.y * v0.y + a1.x * v0.z + a1.y * v0.w + a2.x * v1.x + a2.y * v1.y + a3.x * v1.z +
             a3.y * v1.w;
    }
  }
  return sum;
}

template <class T, int N, bool kWgmma>
__global__ void __launch_bounds__(ChunkTransferConfig<T, N, false, kWgmma>::kThreads)
    fused_chunk_kernel(const FusedChunkParams p) {
  using Cfg = ChunkTransferConfig<T, N, false, kWgmma>;
  constexpr int S = Cfg::kStages, LDA = Cfg::kStrideA, LDF = Cfg::kCols;
  static_assert(Cfg::kThreads == 2 * N, "two threads a row in the matvecs");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ unsigned ticket;
  unsigned char* smem = smem_raw;
  if constexpr (kWgmma) smem += (1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  T* stages = reinterpret_cast<T*>(smem);
  // After the transfer: [P | v] in f32, row-major (stride N + 8), over P_hi; the states
  // (two buffers of N) over P_lo.
  float* summary = reinterpret_cast<float*>(smem + S * Cfg::kStageElems * int(sizeof(T)));
  float* state = summary + N * Cfg::kStrideP;

  const int tid = threadIdx.x, n = p.n;
  if (tid == 0) ticket = atomicAdd(p.ticket, 1u);
  __syncthreads();
  const int64_t chunk = ticket / p.G, g = ticket % p.G;
  const SeqChain& c = p.chain;
  const int64_t s_begin = chunk * p.chunk, len = min(p.chunk, c.steps - s_begin);
  const bool last_chunk = chunk + 1 == p.chunks;

  if (!last_chunk) {
    ChunkTransferParams t;
    t.chunk = p.chunk, t.chunks = p.chunks, t.n = n, t.m = 1;
    chunk_transfer_block<T, N, false, kWgmma>(t, c, g, chunk, [&](int row, int col, float value) {
      summary[row * LDF + col] = value;
    });
  }
  // s_c into state[0..N) (zeros beyond n).
  if (tid < N) {
    float x = 0.f;
    if (tid < n) {
      if (chunk > 0) x = wait_for(p.states + (g * p.chunks + chunk - 1) * n + tid);
      else if (c.start) x = to_float(static_cast<const T*>(c.start)[g * c.start_group + tid]);
    }
    state[tid] = x;
  }
  __syncthreads();  // s_c and the summary stored
  // Matvecs: thread (row, half) sums its half of the row's columns, the pair adds.
  const int row = tid / 2, half = tid % 2, k0 = half * (N / 2);
  const auto pair_sum = [](float x) { return x + __shfl_xor_sync(0xffffffffu, x, 1); };
  if (!last_chunk) {  // publish s_{c+1} = P·s_c + v
    const float next = pair_sum(dot_row<float, N / 2>(summary + row * LDF + k0, state + k0)) + summary[row * LDF + N];
    if (half == 0 && row < n) publish(p.states + (g * p.chunks + chunk) * n + row, next);
  }

  // The re-walk: h_i = A_i·h_{i-1} + b_i from s_c, stages as in the transfer.
  const T* A = static_cast<const T*>(c.A) + g * c.a_group;
  const T* b = static_cast<const T*>(c.b) + g * c.b_group;
  T* out = static_cast<T*>(c.out) + g * c.out_group;
#pragma unroll
  for (int d = 0; d < S - 1; ++d)
    issue_chunk_step<Cfg>(stages + d * Cfg::kStageElems, c, A, b, s_begin + d, d < len, n, n, tid);
  float h = 0.f;
  for (int64_t i = 0; i < len; ++i) {
    copy_async_wait<S - 2>();
    __syncthreads();  // step i landed for everyone; h_{i-1} written; step i-1's stage free
    issue_chunk_step<Cfg>(stages + ((i + S - 1) % S) * Cfg::kStageElems, c, A, b, s_begin + i + S - 1,
                          i + S - 1 < len, n, n, tid);
    const T* stage = stages + (i % S) * Cfg::kStageElems;
    const float* h_prev = state + (i % 2) * N;
    h = pair_sum(dot_row<T, N / 2>(stage + row * LDA + k0, h_prev + k0));
    if (row < n) {
      h += to_float(stage[Cfg::kStageA + row]);
      if (half == 0) out[(s_begin + i) * c.out_step + row] = from_float<T>(h);
    }
    if (half == 0) state[((i + 1) % 2) * N + row] = row < n ? h : 0.f;
  }
  copy_async_wait<0>();
  if (last_chunk && c.last && half == 0 && row < n) static_cast<T*>(c.last)[g * c.last_group + row] = from_float<T>(h);
}

template <class T, int N, bool kWgmma>
inline constexpr int fused_chunk_smem_bytes() {
  return ChunkTransferConfig<T, N, false, kWgmma>::smem_bytes();
}

}  // namespace seqmix::cuda::linrec
