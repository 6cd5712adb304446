// The chunked method for bf16 matrix states (8 < m ≤ 64, n ≤ 64) on tensor cores, in
// three launches like chunked_tensor.cuh, with each block walking a whole state of W
// columns instead of a slice of 8 (NOTES.md, version 18):
//   1. chunk summaries: one block per chunk (but the last) walks
//        X ← A_s·X + [0 | b_s]   from X = [I | 0],  X = [P | v], W = 128 columns,
//      and writes P (the chunk's transfer matrix) and v (its state from a zero start);
//   2. the state entering every chunk: the sequential kernel over the summaries;
//   3. every chunk re-walked from its start state, X ← A_s·X + b_s with W = 64 columns,
//      writing h.
// A step is one warpgroup's wgmma m64nWk16 products, A_s (K-major, or MN-major for the
// backward's transposed chain) from its stage, X as the B operand, MN-major (row k of X is
// a row of W columns, so its bf16 part is the output row layout itself), kept in two bf16
// parts X = X_hi + X_lo (about 2⁻¹⁷ relative a step, as the walk on tensor cores keeps its
// state: walk_wgmma.cuh). A_s and b_s come through a ring of stages by cp.async; the bf16
// states leave from the state's hi part in 16-byte rows once the next step's barrier has
// published it.
#pragma once

#include <algorithm>
#include <type_traits>

#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/methods.hpp"

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

namespace seqmix::cuda::linrec {

// One launch's chains (the forward's, or the backward's two side by side), chunks of
// `chunk` steps. Summaries: maps [G, chunks, n, n] and offsets [G, chunks, n, m] (float);
// the re-walk starts every chunk from starts [G, chunks, n, m] (float).
struct WideChunkParams {
  SeqChain chains[2];
  float* maps[2] = {nullptr, nullptr};
  float* offsets[2] = {nullptr, nullptr};
  const float* starts[2] = {nullptr, nullptr};
  int64_t T = 0, chunk = 0, chunks = 0;
  int n = 0, m = 0;
};

template <int W>
struct WideLayout {
  static_assert(W == 64 || W == 128, "the re-walk's state (m ≤ 64) or a summary's [P | v]");
  static constexpr int N = 64, kThreads = 128, kK = 16;
  static constexpr int kAcc = W / 2;  // accumulators a thread (m64nW)
  // Three stages at W = 128 (two blocks an SM: 113 KB each), four at W = 64 (97 KB).
  static constexpr int kStages = W == 128 ? 3 : 4;
  static constexpr int kTileBytes = N * 64 * 2;  // 64 rows × 64 bf16: A_s, b_s, a 64-column chunk of X
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kPartBytes = (W / 64) * kTileBytes;
  static constexpr int kState = kStages * kStageBytes;  // then [2 buffers][hi, lo]
  static constexpr int kBytes = kState + 2 * 2 * kPartBytes;
  static constexpr int kAlignSlack = 1024;
  // Byte offset of element (row, col) of a tile of 64 rows in 128-byte swizzled rows: A_s
  // K-major (col = k), b_s and X MN-major (col = the B operand's column; X's 64-column
  // chunks 8 KB apart, the descriptors' leading offset).
  __device__ static constexpr int at(int row, int col) { return swizzled_offset<N, 2>(row, col); }
};

template <int W, bool kSummary, bool kTransposed, int K>
__device__ __forceinline__ void wide_chain(const WideChunkParams& p, unsigned char* smem) {
  using L = WideLayout<W>;
  using T = __nv_bfloat16;
  constexpr int D = L::kStages, N = L::N, kSlices = K / L::kK;
  const int k_chain = blockIdx.z;
  const SeqChain& c = p.chains[k_chain];
  const int64_t chunk = blockIdx.x, group = blockIdx.y;
  const int n = p.n, m = p.m;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const bool last_chunk = chunk == p.chunks - 1;
  const int64_t steps = last_chunk ? p.T - chunk * p.chunk : p.chunk;
  const bool identity_first = c.identity_first && chunk == 0;
  const T* A = static_cast<const T*>(c.A) + group * c.a_group + chunk * p.chunk * c.a_step;
  const T* b = static_cast<const T*>(c.b) + group * c.b_group + chunk * p.chunk * c.b_step;

  const auto stage = [&](int64_t s) { return smem + static_cast<int>(s % D) * L::kStageBytes; };
  // Step s's A_s and b_s into its stage (zeros past n and m), one commit group; the reverse
  // chain's identity step as the identity written in.
  const auto issue = [&](int64_t s) {
    if (s < steps) {
      unsigned char* a_stage = stage(s);
      unsigned char* b_stage = a_stage + L::kTileBytes;
      const T* A_s = A + s * c.a_step;
      const T* b_s = b + s * c.b_step;
#pragma unroll
      for (int k = 0; k < N * 8 / L::kThreads; ++k) {
        const int idx = tid + L::kThreads * k, row = idx / 8, col = (idx % 8) * 8;
        if (identity_first && s == 0) {
          union {
            T elems[8];
            uint4 bits;
          } one_row;
#pragma unroll
          for (int e = 0; e < 8; ++e) one_row.elems[e] = __float2bfloat16_rn(row == col + e && row < n ? 1.f : 0.f);
          *reinterpret_cast<uint4*>(a_stage + L::at(row, col)) = one_row.bits;
        } else {
          const bool a_ok = row < n && col < n;
          copy_async<16>(a_stage + L::at(row, col), a_ok ? A_s + row * n + col : A_s, a_ok);
        }
        const bool b_ok = row < n && col < m;
        copy_async<16>(b_stage + L::at(row, col), b_ok ? b_s + row * m + col : b_s, b_ok);
      }
    }
    copy_async_commit();
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue(d);

  // This thread's accumulators (m64nW): element i at row rows[(i / 2) % 2], column
  // 8·(i / 4) + 2·tig + i % 2; pairs (i, i + 1) are adjacent columns of one row.
  const int rows[2] = {16 * warp + gid, 16 * warp + gid + 8};
  const auto row_of = [&](int i) { return rows[(i / 2) % 2]; };
  const auto col_of = [&](int i) { return 8 * (i / 4) + 2 * tig; };
  float acc[L::kAcc];
  // The state before step 0: [I | 0] for a summary, the chunk's start for the re-walk.
  const float* start = kSummary ? nullptr : p.starts[k_chain] + (group * p.chunks + chunk) * n * m;
#pragma unroll
  for (int i = 0; i < L::kAcc; ++i) {
    const int row = row_of(i), col = col_of(i) + i % 2;
    if constexpr (kSummary) acc[i] = row == col && row < n ? 1.f : 0.f;
    else acc[i] = row < n && col < m ? start[row * m + col] : 0.f;
  }
  // The state into buffer `buffer` as the next product's B operand: hi = bf16(x), lo = the rest.
  const auto store_state = [&](int buffer) {
    unsigned char* hi = smem + L::kState + 2 * buffer * L::kPartBytes;
    unsigned char* lo = hi + L::kPartBytes;
#pragma unroll
    for (int i = 0; i < L::kAcc; i += 2) {
      const int at = L::at(row_of(i), col_of(i));
      const __nv_bfloat162 h = __floats2bfloat162_rn(acc[i], acc[i + 1]);
      const float2 hf = __bfloat1622float2(h);
      *reinterpret_cast<__nv_bfloat162*>(hi + at) = h;
      *reinterpret_cast<__nv_bfloat162*>(lo + at) = __floats2bfloat162_rn(acc[i] - hf.x, acc[i + 1] - hf.y);
    }
  };
  store_state(1);  // read by step 0

  // Outputs of the re-walk: bf16 states from the state's hi part (16-byte rows, after the
  // barrier that publishes it), float states and the last state from the accumulators.
  const int64_t out_at = group * c.out_group + chunk * p.chunk * c.out_step;
  float* out_f = !kSummary && c.out_float ? static_cast<float*>(c.out) + out_at : nullptr;
  T* out_t = !kSummary && !c.out_float && c.out ? static_cast<T*>(c.out) + out_at : nullptr;
  T* last = !kSummary && c.last && last_chunk ? static_cast<T*>(c.last) + group * c.last_group : nullptr;
  const auto copy_out = [&](int64_t s) {  // step s's state, from its buffer s % 2
    const unsigned char* hi = smem + L::kState + 2 * static_cast<int>(s & 1) * L::kPartBytes;
#pragma unroll
    for (int k = 0; k < N * 8 / L::kThreads; ++k) {
      const int idx = tid + L::kThreads * k, row = idx / 8, col = (idx % 8) * 8;
      if (row < n && col < m)
        *reinterpret_cast<uint4*>(out_t + s * c.out_step + row * m + col) =
            *reinterpret_cast<const uint4*>(hi + L::at(row, col));
    }
  };

  using Op = cute::SM90::GMMA::MMA_64x128x16_F32BF16BF16_SS<
      kTransposed ? cute::SM90::GMMA::Major::MN : cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
  using OpNarrow = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<
      kTransposed ? cute::SM90::GMMA::Major::MN : cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::MN>;
  using Product = std::conditional_t<W == 128, Op, OpNarrow>;
  constexpr int kU = kSummary ? 64 : 0;  // the first column b_s adds to

  for (int64_t s = 0; s < steps; ++s) {
    // Step s's stage landed for everyone; the previous state is published, its stage free.
    copy_async_wait<D - 2>();
    fence_async_shared();
    __syncthreads();
    issue(s + D - 1);
    if (out_t && s > 0) copy_out(s - 1);
    const unsigned char* x_hi = smem + L::kState + 2 * static_cast<int>((s + 1) & 1) * L::kPartBytes;
    const unsigned char* x_lo = x_hi + L::kPartBytes;
    const unsigned char* a = stage(s);
    attn::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kSlices; ++ks) {
      const uint64_t a_desc = kTransposed ? attn::smem_descriptor(a + ks * L::kK * 128, N * 128)
                                          : attn::smem_descriptor(a + L::at(0, ks * L::kK), 16);
      wgmma_ss<Product>(a_desc, attn::smem_descriptor(x_lo + ks * L::kK * 128, N * 128), acc, ks > 0);
      wgmma_ss<Product>(a_desc, attn::smem_descriptor(x_hi + ks * L::kK * 128, N * 128), acc, true);
    }
    attn::wgmma_commit();
    attn::wgmma_wait<0>();
    attn::fence_registers(acc);
    const unsigned char* b_stage = a + L::kTileBytes;
#pragma unroll
    for (int i = 0; i < L::kAcc; i += 2) {
      if (col_of(i) < kU) continue;  // a summary's P columns take no input
      const float2 bv = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(b_stage + L::at(row_of(i), col_of(i) - kU)));
      acc[i] += bv.x, acc[i + 1] += bv.y;
    }
    store_state(static_cast<int>(s & 1));
    if constexpr (!kSummary) {
      const bool write_last = last && s == steps - 1;
#pragma unroll
      for (int i = 0; i < L::kAcc; i += 2) {
        const int row = row_of(i), col = col_of(i);
        if (row >= n || col >= m) continue;
        if (out_f) *reinterpret_cast<float2*>(out_f + s * c.out_step + row * m + col) = make_float2(acc[i], acc[i + 1]);
        if (write_last) *reinterpret_cast<__nv_bfloat162*>(last + row * m + col) = __floats2bfloat162_rn(acc[i], acc[i + 1]);
      }
    }
  }
  copy_async_wait<0>();
  if constexpr (kSummary) {  // P and v of the chunk
    float* maps = p.maps[k_chain] + (group * p.chunks + chunk) * n * n;
    float* offsets = p.offsets[k_chain] + (group * p.chunks + chunk) * n * m;
#pragma unroll
    for (int i = 0; i < L::kAcc; i += 2) {
      const int row = row_of(i), col = col_of(i);
      if (row >= n) continue;
      if (col < kU) {
        if (col < n) *reinterpret_cast<float2*>(maps + row * n + col) = make_float2(acc[i], acc[i + 1]);
      } else if (col - kU < m) {
        *reinterpret_cast<float2*>(offsets + row * m + col - kU) = make_float2(acc[i], acc[i + 1]);
      }
    }
  } else if (out_t && steps > 0) {
    __syncthreads();  // the last step's state published
    copy_out(steps - 1);
  }
}

template <int W, bool kSummary, int K>
__global__ void __launch_bounds__(128, 2) wide_chunk_kernel(const __grid_constant__ WideChunkParams p) {
  extern __shared__ __align__(16) unsigned char wide_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(wide_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  if (p.chains[blockIdx.z].transposed) wide_chain<W, kSummary, true, K>(p, smem);
  else wide_chain<W, kSummary, false, K>(p, smem);
}

template <int W, bool kSummary>
void launch_wide_chunks(const WideChunkParams& p, int64_t blocks, int64_t G, int count, cudaStream_t stream) {
  const auto kernel = p.n <= 32 ? wide_chunk_kernel<W, kSummary, 32> : wide_chunk_kernel<W, kSummary, 64>;
  constexpr int smem = WideLayout<W>::kBytes + WideLayout<W>::kAlignSlack;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (wide chunks)");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(G), static_cast<unsigned>(count));
  kernel<<<grid, WideLayout<W>::kThreads, smem, stream>>>(p);
  check_launch(kSummary ? "linear_recurrence wide chunk summaries" : "linear_recurrence wide chunks");
}

// The three launches (and the chunk starts' copy) for one or two chains side by side;
// chain k's scratch starts at scratch + k·G·chunks·(n² + 2nm) floats, as the chunked
// method on tensor cores lays it out (maps, offsets, starts).
template <class T>
void solve_chunked_wide(const SeqChain* chains, int count, int64_t G, int64_t T_len, int64_t n, int64_t m,
                        int64_t chunk, float* scratch, void* stream_ptr) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "bf16 transitions (exact as wgmma's bf16 operands)");
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t L = std::min(chunk, T_len), chunks = (T_len + L - 1) / L, nn = n * n, nm = n * m;
  WideChunkParams w;
  ChunkStartParams start;
  SeqParams pass;  // s_{c+1} = P_c·s_c + v_c for c ≥ 0
  for (int k = 0; k < count; ++k) {
    float* maps = scratch + k * G * chunks * (nn + 2 * nm);  // [G, chunks, n, n]
    float* offsets = maps + G * chunks * nn;                 // [G, chunks, n, m]
    float* starts = offsets + G * chunks * nm;               // [G, chunks, n, m]
    w.chains[k] = chains[k];
    w.maps[k] = maps, w.offsets[k] = offsets, w.starts[k] = starts;
    start.start[k] = chains[k].start, start.starts[k] = starts;
    SeqChain& q = pass.chains[k];
    q.A = maps, q.a_step = nn, q.a_group = chunks * nn;
    q.b = offsets, q.b_step = nm, q.b_group = chunks * nm;
    q.start = starts, q.start_group = chunks * nm;
    q.out = starts + nm, q.out_step = nm, q.out_group = chunks * nm, q.out_float = true;
    q.steps = chunks - 1;
  }
  w.T = T_len, w.chunk = L, w.chunks = chunks;
  w.n = static_cast<int>(n), w.m = static_cast<int>(m);
  chunk_start_kernel<T><<<dim3(static_cast<unsigned>(G), static_cast<unsigned>(count)), 128, 0, stream>>>(
      start, chunks, static_cast<int>(nm));
  check_launch("linear_recurrence chunk starts");
  if (chunks > 1) {
    launch_wide_chunks<128, true>(w, chunks - 1, G, count, stream);
    pass.n = n, pass.m = m;
    launch_sequential<float>(pass, G, stream_ptr);
  }
  launch_wide_chunks<64, false>(w, chunks, G, count, stream);
}

}  // namespace seqmix::cuda::linrec

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER
