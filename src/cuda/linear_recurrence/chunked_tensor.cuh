// The chunked method on tensor cores, three launches on the caller's stream:
//   1. chunk summaries (chunk_transfer.cuh): for every chunk but the last, its transfer
//      matrix and its state from a zero start, reading each transition once;
//   2. the state entering every chunk: the sequential kernel over the summaries
//      (s_{c+1} = P_c·s_c + v_c, depth = chunks);
//   3. every chunk re-walked from its start state by the sequential kernel, one block a
//      chunk (SeqChain sub-chains), reading each transition a second time and writing
//      the states. Step 3 is what the plain sequential method does, spread over G·chunks
//      blocks instead of G, so it streams at the rate of the whole chip.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/fused_chunked.cuh"
#include "cuda/linear_recurrence/methods.hpp"

namespace seqmix::cuda::linrec {

// Which instructions form the chunk summaries' products (N = 64; N = 32 always takes
// mma.sync: wgmma's tiles have 64 rows). The environment variable
// SEQMIX_LINREC_CHUNK_TRANSFER=wgmma|mma overrides the default; it is read at every call
// so that tests and timings can compare both in one process. wgmma measured faster on the
// H100 (NOTES.md, version 5: forward 1.34 → 1.11 ms f32, 1.23 → 0.93 ms bf16 at G16 T4096
// n64 m1) and passed the same tests and sanitizers.
enum class ChunkTransferProduct { mma_sync, wgmma };
inline constexpr ChunkTransferProduct kDefaultChunkTransferProduct = ChunkTransferProduct::wgmma;

inline ChunkTransferProduct chunk_transfer_product() {
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
  return choice_from_environment("SEQMIX_LINREC_CHUNK_TRANSFER",
                                 {{"wgmma", ChunkTransferProduct::wgmma}, {"mma", ChunkTransferProduct::mma_sync}},
                                 kDefaultChunkTransferProduct);
#else
  return ChunkTransferProduct::mma_sync;  // built without the CUTLASS headers
#endif
}

template <class T, int N, bool kWgmma>
void launch_chunk_transfer(const ChunkTransferParams& p, int64_t G, int64_t blocks, int chains, cudaStream_t stream) {
  const auto kernel = chunk_transfer_kernel<T, N, kWgmma>;
  const int smem = chunk_transfer_smem_bytes<T, N, kWgmma>();
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (chunk transfer)");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(G), static_cast<unsigned>(chains));
  kernel<<<grid, ChunkTransferConfig<T, N, false>::kThreads, smem, stream>>>(p);
  check_launch("linear_recurrence chunk transfer");
}

// Chains side by side share each launch (the backward's forward and reverse chains);
// chain k's scratch starts at scratch + k·chunked_tensor_scratch_floats(...).
template <class T>
void solve_chunked_on_tensor_cores(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t m,
                                   int64_t chunk, float* scratch, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t L = std::min(chunk, T_len), chunks = (T_len + L - 1) / L, nm = n * m;
  const ChunkSummaries summaries = chunk_summaries(chains, count, G, chunks, n, m, scratch);
  launch_chunk_starts<T>(summaries, count, G, chunks, nm, stream);
  if (chunks > 1) {
    ChunkTransferParams t;
    for (int k = 0; k < count; ++k) {
      t.chains[k] = chains[k], t.chains[k].steps = T_len;
      t.maps[k] = summaries.maps[k], t.offsets[k] = summaries.offsets[k];
    }
    t.chunk = L, t.chunks = chunks;
    t.n = static_cast<int>(n), t.m = static_cast<int>(m);
    if (n <= 32) launch_chunk_transfer<T, 32, false>(t, G, chunks - 1, count, stream);
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
    else if (chunk_transfer_product() == ChunkTransferProduct::wgmma)
      launch_chunk_transfer<T, 64, true>(t, G, chunks - 1, count, stream);
#endif
    else launch_chunk_transfer<T, 64, false>(t, G, chunks - 1, count, stream);
    launch_sequential<float>(summaries.pass, G, stream_ptr);
  }
  SeqParams s;  // every chunk from its start
  for (int k = 0; k < count; ++k) {
    SeqChain& q = s.chains[k];
    q = chains[k];
    q.start = summaries.starts[k], q.start_float = true, q.start_group = chunks * nm, q.sub_start = nm;
    q.sub_chains = chunks;
    q.sub_a = L * chains[k].a_step, q.sub_b = L * chains[k].b_step, q.sub_out = L * chains[k].out_step;
    q.steps = L, q.last_steps = T_len - (chunks - 1) * L;
  }
  s.n = n, s.m = m;
  launch_sequential<T>(s, G * chunks, stream_ptr);
}

// Blocks per SM of the one-pass kernel for f32 at N = 64 on wgmma: 2 (three stages, 96 KB,
// 220–254 registers) or 3 (the compact layout: two stages, ≤ 75 KB, 168 registers).
// SEQMIX_LINREC_FUSED_BLOCKS=2|3 overrides the default, read at every call so one process
// can time both. 3 measured faster on the H100 (NOTES.md, version 8; G16 T4096 n64 m1:
// forward 0.899 → 0.813 ms, backward 2.43–2.64 → 2.06 ms). bf16's forward: 3 blocks per
// SM (three stages, 168 registers) or 4 (the compact layout, 128 registers), measured
// faster (version 8b: 0.577 → 0.517 ms at G16 T4096 n64 m1);
// SEQMIX_LINREC_FUSED_BLOCKS_BF16=3|4 overrides.
inline constexpr int kDefaultFusedBlocksF32 = 3;
inline constexpr int kDefaultFusedBlocksBf16 = 4;

inline int fused_blocks_bf16() {
  if (const char* value = std::getenv("SEQMIX_LINREC_FUSED_BLOCKS_BF16")) return std::strcmp(value, "4") == 0 ? 4 : 3;
  return kDefaultFusedBlocksBf16;
}

inline int fused_blocks_f32() {
  if (const char* value = std::getenv("SEQMIX_LINREC_FUSED_BLOCKS")) return std::strcmp(value, "3") == 0 ? 3 : 2;
  return kDefaultFusedBlocksF32;
}

// The one-pass forward's transfer (compact kernels at N = 64): the running product in
// shared memory (wgmma), or transposed in registers with mma.sync products
// (chunk_transfer_registers.cuh) or wgmma products (chunk_transfer_transposed.cuh).
// SEQMIX_LINREC_FUSED_TRANSFER=shared|registers|transposed (the dtype's default order)|
// transposed-matvec-first|transposed-early|transposed-late, read at every call. Default:
// transposed, in the order measured fastest for the dtype on the H100 (NOTES.md, version
// 11, G16 T4096 n64 m1 forward: f32 0.815 → 0.783 ms early; bf16 0.519 → 0.477 ms
// matvec first).
template <class T>
inline constexpr FusedTransfer kDefaultFusedTransfer =
    sizeof(T) == 4 ? FusedTransfer::transposed_early : FusedTransfer::transposed_matvec_first;

template <class T>
inline FusedTransfer fused_transfer() {
  return choice_from_environment("SEQMIX_LINREC_FUSED_TRANSFER",
                                 {{"shared", FusedTransfer::shared},
                                  {"registers", FusedTransfer::registers},
                                  {"transposed", kDefaultFusedTransfer<T>},
                                  {"transposed-matvec-first", FusedTransfer::transposed_matvec_first},
                                  {"transposed-early", FusedTransfer::transposed_early},
                                  {"transposed-late", FusedTransfer::transposed_late}},
                                 kDefaultFusedTransfer<T>);
}

template <class T, int N, bool kWgmma, bool kReverse, bool kCompact, FusedTransfer kTransfer = FusedTransfer::shared>
void launch_fused_kernel(const FusedChunkParams& p, cudaStream_t stream) {
  const auto kernel = fused_chunk_kernel<T, N, kWgmma, kReverse, kCompact, kTransfer>;
  // The forward's one chain is never transposed: its own layout sizes it.
  const int smem = kReverse ? fused_chunk_smem_bytes<T, N, kWgmma, kCompact>()
                            : ChunkTransferConfig<T, N, false, kWgmma, kCompact>::smem_bytes();
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (fused chunks)");
  kernel<<<static_cast<unsigned>(p.count * p.G * p.chunks), ChunkTransferConfig<T, N, false, kWgmma>::kThreads, smem,
           stream>>>(p);
  check_launch("linear_recurrence fused chunks");
}

// The compact layout: f32 in both directions (three blocks per SM); bf16 in the forward
// only (four blocks per SM: 56.6 KB, 128 registers; the reverse chain's transposed stages
// would not let four fit).
// The compact forward with the transfer chosen at run time (without wgmma: the transposed
// forms take the shared one).
template <class T, int N, bool kWgmma>
void launch_compact_forward(const FusedChunkParams& p, cudaStream_t stream) {
  switch (fused_transfer<T>()) {
    case FusedTransfer::registers:
      return launch_fused_kernel<T, N, kWgmma, false, true, FusedTransfer::registers>(p, stream);
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
    case FusedTransfer::transposed_matvec_first:
      if constexpr (kWgmma)
        return launch_fused_kernel<T, N, kWgmma, false, true, FusedTransfer::transposed_matvec_first>(p, stream);
      break;
    case FusedTransfer::transposed_early:
      if constexpr (kWgmma) return launch_fused_kernel<T, N, kWgmma, false, true, FusedTransfer::transposed_early>(p, stream);
      break;
    case FusedTransfer::transposed_late:
      if constexpr (kWgmma) return launch_fused_kernel<T, N, kWgmma, false, true, FusedTransfer::transposed_late>(p, stream);
      break;
#endif
    default: break;
  }
  launch_fused_kernel<T, N, kWgmma, false, true>(p, stream);
}

template <class T, int N, bool kWgmma>
void launch_fused_chunk(const FusedChunkParams& p, bool reverse, cudaStream_t stream) {
  // reverse: the backward's kernel (float states, a transposed chain)
  if constexpr (N == 64 && kWgmma && sizeof(T) == 4) {
    if (fused_blocks_f32() == 3)
      return reverse ? launch_fused_kernel<T, N, kWgmma, true, true>(p, stream)
                     : launch_compact_forward<T, N, kWgmma>(p, stream);
  }
  if constexpr (N == 64 && kWgmma && sizeof(T) == 2) {
    if (!reverse && fused_blocks_bf16() == 4) return launch_compact_forward<T, N, kWgmma>(p, stream);
  }
  if (reverse) launch_fused_kernel<T, N, kWgmma, true, false>(p, stream);
  else launch_fused_kernel<T, N, kWgmma, false, false>(p, stream);
}

template <class T>
void solve_fused_chunked(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t chunk,
                         float* scratch, void* stream_ptr, bool backward) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  FusedChunkParams p;
  for (int k = 0; k < count; ++k) p.chains[k] = chains[k], p.chains[k].steps = T_len;
  p.count = count;
  p.G = G, p.chunk = std::min(chunk, T_len), p.chunks = (T_len + p.chunk - 1) / p.chunk;
  p.n = static_cast<int>(n);
  float* base = scratch + (reinterpret_cast<uintptr_t>(scratch) % 8 != 0);  // 64-bit slots
  const int64_t slots = count * G * p.chunks * n;
  p.states = reinterpret_cast<unsigned long long*>(base);
  p.ticket = reinterpret_cast<unsigned*>(p.states + slots);
  check(cudaMemsetAsync(base, 0, (2 * slots + 1) * sizeof(float), stream), "cudaMemsetAsync (fused chunks)");
  if (n <= 32) launch_fused_chunk<T, 32, false>(p, backward, stream);
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
  else if (chunk_transfer_product() == ChunkTransferProduct::wgmma) launch_fused_chunk<T, 64, true>(p, backward, stream);
#endif
  else launch_fused_chunk<T, 64, false>(p, backward, stream);
}

}  // namespace seqmix::cuda::linrec
