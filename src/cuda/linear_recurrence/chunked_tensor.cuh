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

#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/methods.hpp"

namespace seqmix::cuda::linrec {

template <class T, int N, bool kTransposed>
void launch_chunk_transfer(const ChunkTransferParams& p, int64_t G, int64_t blocks, cudaStream_t stream) {
  using Cfg = ChunkTransferConfig<T, N, kTransposed>;
  const auto kernel = chunk_transfer_kernel<T, N, kTransposed>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes()),
        "cudaFuncSetAttribute (chunk transfer)");
  kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(G)), Cfg::kThreads, Cfg::smem_bytes(), stream>>>(
      p);
  check_launch("linear_recurrence chunk transfer");
}

template <class T, int N>
void launch_chunk_transfer_n(const ChunkTransferParams& p, int64_t G, int64_t blocks, cudaStream_t stream) {
  if (p.chain.transposed) launch_chunk_transfer<T, N, true>(p, G, blocks, stream);
  else launch_chunk_transfer<T, N, false>(p, G, blocks, stream);
}

template <class T>
void solve_chunked_on_tensor_cores(const SeqChain& chain, int64_t G, int64_t T_len, int64_t n, int64_t m,
                                   int64_t chunk, float* scratch, void* stream_ptr) {
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t L = std::min(chunk, T_len), chunks = (T_len + L - 1) / L, nn = n * n, nm = n * m;
  float* maps = scratch;                     // [G, chunks, n, n]
  float* offsets = maps + G * chunks * nn;   // [G, chunks, n, m]
  float* starts = offsets + G * chunks * nm;  // [G, chunks, n, m]
  chunk_start_kernel<T><<<static_cast<unsigned>(G), 128, 0, stream>>>(static_cast<const T*>(chain.start), starts,
                                                                      chunks, static_cast<int>(nm));
  check_launch("linear_recurrence chunk starts");
  if (chunks > 1) {
    ChunkTransferParams t;
    t.chain = chain, t.chain.steps = T_len;
    t.maps = maps, t.offsets = offsets, t.chunk = L, t.chunks = chunks;
    t.n = static_cast<int>(n), t.m = static_cast<int>(m);
    if (n <= 32) launch_chunk_transfer_n<T, 32>(t, G, chunks - 1, stream);
    else launch_chunk_transfer_n<T, 64>(t, G, chunks - 1, stream);

    SeqParams s;  // s_c for c ≥ 1
    SeqChain& k = s.chains[0];
    k.A = maps, k.a_step = nn, k.a_group = chunks * nn;
    k.b = offsets, k.b_step = nm, k.b_group = chunks * nm;
    k.start = starts, k.start_group = chunks * nm;
    k.out = starts + nm, k.out_step = nm, k.out_group = chunks * nm, k.out_float = true;
    k.steps = chunks - 1;
    s.n = n, s.m = m;
    launch_sequential<float>(s, G, stream_ptr);
  }
  SeqParams s;  // every chunk from its start
  SeqChain& k = s.chains[0];
  k = chain;
  k.start = starts, k.start_float = true, k.start_group = chunks * nm, k.sub_start = nm;
  k.sub_chains = chunks;
  k.sub_a = L * chain.a_step, k.sub_b = L * chain.b_step, k.sub_out = L * chain.out_step;
  k.steps = L, k.last_steps = T_len - (chunks - 1) * L;
  s.n = n, s.m = m;
  launch_sequential<T>(s, G * chunks, stream_ptr);
}

}  // namespace seqmix::cuda::linrec
