// The chunked method's chains for vector states (m = 1, n ≤ 64) in one pass, so that
// every transition comes from memory once (NOTES.md, version 7): the forward, or the
// backward's forward and reverse-time chains side by side. A block per chunk:
//   1. the chunk's summary [P | v] (chunk_transfer.cuh, the split path's transfer block),
//      kept in shared memory in f32 (not for the last chunk, whose successor is none);
//   2. the state entering the chunk, s_c, from its predecessor's slots (chunk 0: the
//      initial state); then s_{c+1} = P·s_c + v published the same way for the
//      successor. Each slot holds one element and its "written" mark in one 64-bit word,
//      so a reader polls the data itself: no fence, flag or second round trip per
//      hand-off (version 7 measured ~1.9 µs a hand-off with a released flag);
//   3. the chunk re-walked from s_c through the same ring of stages, writing h: its
//      transitions were read by step 1 moments before, so short chunks find them in L2.
//      Its first stages are requested before the wait for s_c, so the wait hides them.
// Chunks are taken in the order of an atomic ticket (chunk-major over groups), not of
// blockIdx: a block waits only for a chunk with a smaller ticket, whose block already
// runs or has finished, so the waits cannot deadlock whichever blocks are resident.
#pragma once

#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/chunk_transfer_registers.cuh"
#include "cuda/linear_recurrence/chunk_transfer_transposed.cuh"

namespace seqmix::cuda::linrec {

// Where the one-pass forward's chunk transfer keeps the running product: in shared memory,
// split, the B operand of wgmma (chunk_transfer.cuh); transposed in registers with
// mma.sync products (chunk_transfer_registers.cuh) or with wgmma products
// (chunk_transfer_transposed.cuh, in one of its step orders).
enum class FusedTransfer { shared, registers, transposed_matvec_first, transposed_early, transposed_late };

struct FusedChunkParams {
  // One or two chains side by side (the backward's forward and reverse-time chains):
  // A, b, start, out (float or the input type), last, transposed, identity_first.
  SeqChain chains[2];
  int count = 1;
  // [count, G, chunks, n]: element k of the state after chunk c of group g as (1 << 32) | its
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
  constexpr int kUnit = 16 / int(sizeof(T));
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < count; k += kUnit) sum += dot_unit(row + k, x + k);
  return sum;
}

// Chunk `chunk` of group g of chain c (z: its index in p.chains). kTransposed: the
// backward's reverse-time chain (A_sᵀ, identity first step). kFloatStates: the
// backward's chains, whose states go to float scratch (the forward's: the input type).
// Both compile-time, so the forward's kernel keeps its registers (bf16: 3 blocks per SM).
// kCompact: the transfer block's two-stage layout (three blocks per SM; f32).
// kTransfer: how the forward's transfer keeps the running product (FusedTransfer; the
// register forms: m = 1, not transposed, in the same layout).
template <class T, int N, bool kTransposed, bool kWgmma, bool kFloatStates, bool kCompact,
          FusedTransfer kTransfer = FusedTransfer::shared>
__device__ __forceinline__ void fused_chunk_block(const FusedChunkParams& p, const SeqChain& c, int z, int64_t chunk,
                                                  int64_t g) {
  using Cfg = ChunkTransferConfig<T, N, kTransposed, kWgmma, kCompact>;
  constexpr int S = Cfg::kStages, LDA = Cfg::kStrideA, LDF = Cfg::kCols;
  static_assert(Cfg::kThreads == 2 * N, "two threads a row in the matvecs");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (kWgmma) smem += (1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  // After the transfer: [P | v] in f32, row-major (stride N + 8), over P_hi; the states
  // (two buffers of N) at the end of P_lo; then the stages.
  float* summary = reinterpret_cast<float*>(smem);
  float* state = reinterpret_cast<float*>(smem + Cfg::kSplitBytes) - 2 * N;
  T* stages = reinterpret_cast<T*>(smem + Cfg::kSplitBytes);
  // The re-walk's ring: the transfer's stages, and in the forward's compact layout (two
  // stages) also slots over [P | v] once the summary has been read, so it looks R − 1
  // steps ahead (measured: forward 0.840 → 0.814 ms at G16 T4096 n64 f32; the backward's
  // two chains, 2.13 → 2.21 ms, keep the two stages).
  constexpr int kStageBytes = Cfg::kStageElems * int(sizeof(T));
  constexpr bool kRing = kCompact && !kFloatStates;
  constexpr int R = S + (kRing ? (Cfg::kSplitBytes - 2 * N * int(sizeof(float))) / kStageBytes : 0);
  const auto slot = [&](int j) {
    return j < S ? stages + j * Cfg::kStageElems : reinterpret_cast<T*>(smem + (j - S) * kStageBytes);
  };

  const int tid = threadIdx.x, n = p.n;
  const int64_t s_begin = chunk * p.chunk, len = min(p.chunk, c.steps - s_begin);
  const bool last_chunk = chunk + 1 == p.chunks;
  unsigned long long* slots = p.states + (z * p.G + g) * p.chunks * n;  // this group's, [chunks, n]

  const auto keep = [&](int row, int col, float value) { summary[row * LDF + col] = value; };
  if (!last_chunk) {
    if constexpr (kTransfer == FusedTransfer::registers) {
      static_assert(!kTransposed, "the forward chain only");
      chunk_transfer_in_registers<T, N, Cfg>(smem, c, g, p.chunk, chunk, n, keep);
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
    } else if constexpr (kTransfer != FusedTransfer::shared) {
      static_assert(!kTransposed && kWgmma, "the forward chain only, on wgmma");
      constexpr TransposedOrder order = kTransfer == FusedTransfer::transposed_matvec_first ? TransposedOrder::matvec_first
                                        : kTransfer == FusedTransfer::transposed_early      ? TransposedOrder::early
                                                                                            : TransposedOrder::late;
      chunk_transfer_transposed<T, N, Cfg, order>(smem, c, g, p.chunk, chunk, n, keep);
#endif
    } else {
      ChunkTransferParams t;
      t.chunk = p.chunk, t.chunks = p.chunks, t.n = n, t.m = 1;
      chunk_transfer_block<T, N, kTransposed, kWgmma, kCompact>(t, c, g, chunk, keep);
    }
  }
  // The re-walk's first steps into the stages (free: the transfer ended with a barrier
  // after its last read of them), before the wait for s_c.
  const T* A = static_cast<const T*>(c.A) + g * c.a_group;
  const T* b = static_cast<const T*>(c.b) + g * c.b_group;
#pragma unroll
  for (int d = 0; d < R - 1 && d < S; ++d) issue_chunk_step<Cfg>(slot(d), c, A, b, s_begin + d, d < len, n, n, tid);
  // s_c into state[0..N) (zeros beyond n).
  if (tid < N) {
    float x = 0.f;
    if (tid < n) {
      if (chunk > 0) x = wait_for(slots + (chunk - 1) * n + tid);
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
    if (half == 0 && row < n) publish(slots + chunk * n + row, next);
  }
  if constexpr (R - 1 > S) {  // the rest of the look-ahead, over the summary once read
    __syncthreads();
#pragma unroll
    for (int d = S; d < R - 1; ++d) issue_chunk_step<Cfg>(slot(d), c, A, b, s_begin + d, d < len, n, n, tid);
  }

  // The re-walk: h_i = A_i·h_{i-1} + b_i from s_c, stages as in the transfer.
  float h = 0.f;
  for (int64_t i = 0; i < len; ++i) {
    copy_async_wait<R - 2>();
    __syncthreads();  // step i landed for everyone; h_{i-1} written; step i-1's slot (and the summary) free
    issue_chunk_step<Cfg>(slot(static_cast<int>((i + R - 1) % R)), c, A, b, s_begin + i + R - 1, i + R - 1 < len, n,
                          n, tid);
    const T* stage = slot(static_cast<int>(i % R));
    const float* h_prev = state + (i % 2) * N;
    if (kTransposed && c.identity_first && s_begin + i == 0) {
      h = h_prev[row];
    } else if constexpr (kTransposed) {  // row `row` of A_sᵀ: column `row` of the stage
      // Thread `half` takes the stage rows k ≡ 2·half, 2·half + 1 (mod 4), not a contiguous
      // half: the row stride is ≡ 8 words (mod 32), so the two halves' 16 columns then fall
      // in distinct banks (contiguous halves 32 rows apart collided two-way). Offsets are
      // compile-time; two partial sums shorten the chain of FMA.
      const T* column = stage + 2 * half * LDA + row;
      const float* x = h_prev + 2 * half;
      float even = 0.f, odd = 0.f;
#pragma unroll
      for (int k = 0; k < N; k += 4) {
        even += to_float(column[k * LDA]) * x[k];
        odd += to_float(column[(k + 1) * LDA]) * x[k + 1];
      }
      h = pair_sum(even + odd);
    } else {
      h = pair_sum(dot_row<T, N / 2>(stage + row * LDA + k0, h_prev + k0));
    }
    if (row < n) {
      h += to_float(stage[Cfg::kStageA + row]);
      if (half == 0) {
        const int64_t at = g * c.out_group + (s_begin + i) * c.out_step + row;
        if constexpr (kFloatStates) static_cast<float*>(c.out)[at] = h;
        else static_cast<T*>(c.out)[at] = from_float<T>(h);
      }
    }
    if (half == 0) state[((i + 1) % 2) * N + row] = row < n ? h : 0.f;
  }
  copy_async_wait<0>();
  if (last_chunk && c.last && half == 0 && row < n) static_cast<T*>(c.last)[g * c.last_group + row] = from_float<T>(h);
}

// One block per (chain, group, chunk), in ticket order: chunk-major, then chain, then
// group, so a chunk's predecessor always holds a smaller ticket. kReverse: the backward's
// two chains (float states, one of them transposed); else the forward's one chain.
// The bf16 wgmma kernels are held to 168 registers (no spills) so that three blocks share
// an SM, as their ~70 KB of shared memory allows (measured forward at G16 T4096 n64:
// 0.61 ms at 3 blocks per SM, 0.75 at 2); so are the compact f32 ones (≤ 75 KB). The
// compact bf16 forward is held to 128 registers, four blocks per SM (56.6 KB).
template <class T, int N, bool kWgmma, bool kCompact>
inline constexpr int kFusedMinBlocks = kCompact ? (sizeof(T) == 2 ? 4 : 3) : sizeof(T) == 2 && kWgmma ? 3 : 1;

template <class T, int N, bool kWgmma, bool kReverse, bool kCompact, FusedTransfer kTransfer = FusedTransfer::shared>
__global__ void __launch_bounds__(ChunkTransferConfig<T, N, false, kWgmma>::kThreads,
                                  kFusedMinBlocks<T, N, kWgmma, kCompact>)
    fused_chunk_kernel(const FusedChunkParams p) {
  static_assert(ChunkTransferConfig<T, N, false, kWgmma>::kThreads == ChunkTransferConfig<T, N, true, kWgmma>::kThreads);
  __shared__ unsigned ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(p.ticket, 1u);
  __syncthreads();
  const int64_t chunk = ticket / (p.count * p.G), rest = ticket % (p.count * p.G);
  const int z = static_cast<int>(rest / p.G);
  const int64_t g = rest % p.G;
  const SeqChain c = z ? p.chains[1] : p.chains[0];  // constant indices: registers, not local memory
  if (kReverse && c.transposed) fused_chunk_block<T, N, kReverse, kWgmma, kReverse, kCompact>(p, c, z, chunk, g);
  else fused_chunk_block<T, N, false, kWgmma, kReverse, kCompact, kReverse ? FusedTransfer::shared : kTransfer>(
      p, c, z, chunk, g);
}

template <class T, int N, bool kWgmma, bool kCompact>
inline constexpr int fused_chunk_smem_bytes() {
  return chunk_transfer_smem_bytes<T, N, kWgmma, kCompact>();
}

}  // namespace seqmix::cuda::linrec
