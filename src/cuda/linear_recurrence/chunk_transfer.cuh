// The chunked method's first pass on tensor cores: one block per (chunk, group) walks
// its chunk of L steps and keeps the affine map of the steps so far,
//   [P | v] ← A_s·[P | v] + [0 | b_s]      from [I | 0],
// so at the end P = A_last···A_first (the chunk's transfer matrix) and v its state from a
// zero start: the chunk summary. Every step is one N×(N+8) product on tensor cores
// (mma.sync m16n8k8 tf32, fp32 accumulation), the 8 extra columns holding v (m ≤ 8).
//
// Accuracy: tf32 keeps 10 mantissa bits, so each operand x is split as hi = tf32(x),
// lo = tf32(x − hi), and A·P ≈ A_hi·P_lo + A_lo·P_hi + A_hi·P_hi (the 3×tf32 form, about
// fp32 accuracy). bf16 transitions are exact in tf32 (A_lo = 0): two products a step.
// P is kept in shared memory already split (the four warps all read it); A is split in
// registers (each element is read by one warp once).
//
// Threads: N/16 warps. f32: warp w owns rows 16w..16w+15 of the product and all N/8+1
// column tiles. bf16 (kSplitColumns): warp w owns rows 32·(w/2)..32·(w/2)+31 (two m16
// row tiles) and one half of the column tiles (the first half one more), so each
// fragment of P it loads feeds two products: P is read twice a step in all instead of
// N/16 times. Measured (NOTES.md, version 4): bf16 2% faster forward, 5% backward; f32
// 25% slower (the busier warp's 240 mma instead of 216, three per tile), so f32 keeps
// the first layout.
// wgmma (kWgmma, N = 64, sm_90a): the block is one warpgroup, and each step's product is
// N/8 k-slices of wgmma m64n72k8 tf32, A (hi and lo) from registers in the same fragment
// layout as above, [P | v] as the B operand from shared memory. tf32 B must be K-major, so
// [P | v] is kept transposed (column j of [P | v] is a row of k values) in 128-byte swizzled
// atoms; the accumulators have the mma.sync layout, so everything but the product and P's
// addresses is shared with the mma.sync path. Same products in the same k order: same
// accuracy. The default since measured faster (NOTES.md, version 5); mma.sync stays
// selectable (chunked_tensor.cuh, ChunkTransferProduct).
// A_s (and b_s) stream through a ring of kStages shared-memory stages by cp.async.
// blockIdx.z picks one of up to two chains (the backward summarizes its forward and
// reverse-time chains in one launch).
// The first step forms no product: [P | v] = [A_first | b_first] (the identity step:
// [I | b_first]) is read straight from its stage, and [P | v] needs no [I | 0] start.
// kCompact (the one-pass kernel of f32, m = 1; NOTES.md, version 8): two stages and a b
// stage of N elements, so that three blocks share an SM (≤ 75 KB each).
#pragma once

#include <utility>

#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/common.cuh"
#include "cuda/linear_recurrence/sequential.cuh"

#if defined(SEQMIX_HAS_CUTLASS)
// wgmma descriptors, fences and calls (the attention kernels' helpers), and CuTe's n = 72
// instruction shapes (its "extended" set, which needs the base header first).
#include "cuda/attention/sm90.cuh"
#include "cuda/common/proxy.cuh"
// (after sm90.cuh)
#include <cute/arch/mma_sm90_gmma_ext.hpp>
#define SEQMIX_LINREC_WGMMA_TRANSFER 1
#endif

namespace seqmix::cuda::linrec {

// One block's job: a chain's steps (SeqChain's A, b, steps, transposed and
// identity_first), chunks of `chunk` steps; summaries to maps [G, chunks, n, n] and
// offsets [G, chunks, n, m] (float), per chain.
struct ChunkTransferParams {
  SeqChain chains[2];
  float* maps[2] = {nullptr, nullptr};
  float* offsets[2] = {nullptr, nullptr};
  int64_t chunk = 0, chunks = 0;
  int n = 0, m = 0;
};

template <class T, int N, bool kTransposed, bool kWgmma = false, bool kCompact = false>
struct ChunkTransferConfig {
  static_assert(N == 32 || N == 64, "padded state sizes 32 and 64 (128 would not fit shared memory)");
  static_assert(!kWgmma || N == 64, "wgmma's 64 rows: N = 64 only");
  static constexpr int kWarps = N / 16;
  static constexpr int kThreads = 32 * kWarps;
  static_assert(kWarps == 2 * (N / 32), "16 rows a warp, or two warps (column halves) per 32 rows");
  static constexpr int kTiles = N / 8 + 1;  // column tiles of 8: P, then v
  static constexpr int kCols = N + 8;       // P | v
  // Row strides chosen so the fragment loads of a warp hit 32 distinct banks: rows
  // (k + tig) × columns (n + gid) of P need a stride ≡ 8 (mod 32) words; A's rows
  // (r + gid) × columns (k + tig) need ≡ 4 words, its transposed reads ≡ 8.
  static constexpr int kStrideP = kCols;
  static constexpr int kStrideA = sizeof(T) == 4 ? (kTransposed ? N + 8 : N + 4) : (kTransposed ? N + 16 : N + 8);
  static constexpr int kStageA = N * kStrideA;            // elements of T
  static constexpr int kStageB = kCompact ? N : N * 8;     // elements of T: b_s flat [n·m], m ≤ 8 (compact: 1)
  static constexpr int kStageElems = kStageA + kStageB;
  static constexpr int kStages = kCompact ? 2 : 3;
  static constexpr int kPiecesPerRow = N * int(sizeof(T)) / 16;
  static constexpr int kPieceElems = 16 / int(sizeof(T));
  static constexpr int kPiecesPerThread = N * kPiecesPerRow / kThreads;
  // Shared memory: [P | v] hi and lo first (wgmma's swizzled atoms need 1024-byte
  // alignment: room to round the base up), then the stages.
  static constexpr int kAlignSlack = kWgmma ? 1024 : 0;
  static constexpr int kSplitBytes = 2 * N * kStrideP * int(sizeof(float));
  static constexpr int smem_bytes() { return kAlignSlack + kSplitBytes + kStages * kStageElems * int(sizeof(T)); }
  static_assert(!kWgmma || (N * kStrideP * int(sizeof(float))) % 1024 == 0, "P_lo's atoms 1024-byte aligned");
  static_assert(kStageElems * int(sizeof(T)) % 16 == 0, "16-byte stages");
  // Where element (k, col) of [P | v] lives (floats from the start of P_hi or P_lo).
  // mma.sync: row-major, stride N+8. wgmma: K-major, column col a row of N k values in
  // halves of 32 (128 bytes, one swizzle-atom row); rows col and col+8·j are 1024·j bytes
  // apart, the second K half follows the first (kCols rows of 128 bytes); within a row the
  // 16-byte unit (k % 32) / 4 is XOR-ed with col % 8 (the hardware's 128-byte swizzle). The
  // accumulator stores (8 consecutive k, 4 columns 2 apart) then hit 32 distinct banks.
  static constexpr int kKHalfFloats = kCols * 32;
  __device__ static int p_index(int k, int col) {
    if constexpr (!kWgmma) return k * kStrideP + col;
    else return (k / 32) * kKHalfFloats + col * 32 + ((((k % 32) / 4) ^ (col % 8)) * 4) + k % 4;
  }
  static_assert(kStageA * int(sizeof(T)) % 16 == 0 && kStrideA * int(sizeof(T)) % 16 == 0, "16-byte rows");
  static_assert(N * kPiecesPerRow % kThreads == 0, "copies spread evenly");
};

__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
template <class Op, int N, int... I>
__device__ __forceinline__ void wgmma_ss_accumulators(uint64_t a, uint64_t b, float (&acc)[N], bool accumulate,
                                                      std::integer_sequence<int, I...>) {
  Op::fma(a, b, acc[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}
// acc (= or +=) A·B with both operands in shared memory (descriptors a and b), one
// warpgroup: wgmma instruction Op with N accumulators a thread.
template <class Op, int N>
__device__ __forceinline__ void wgmma_ss(uint64_t a, uint64_t b, float (&acc)[N], bool accumulate) {
  wgmma_ss_accumulators<Op>(a, b, acc, accumulate, std::make_integer_sequence<int, N>{});
}

template <class Op, int N, int... I>
__device__ __forceinline__ void wgmma_rs_accumulators(const unsigned (&a)[4], uint64_t b, float (&acc)[N],
                                                      bool accumulate, std::integer_sequence<int, I...>) {
  Op::fma(a[0], a[1], a[2], a[3], b, acc[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}
// The same with A from registers (a, the RS form) and B in shared memory.
template <class Op, int N>
__device__ __forceinline__ void wgmma_rs(const unsigned (&a)[4], uint64_t b, float (&acc)[N], bool accumulate) {
  wgmma_rs_accumulators<Op>(a, b, acc, accumulate, std::make_integer_sequence<int, N>{});
}
#endif

// d += a·b for one m16n8k8 tile (row-major a, column-major b, tf32 operands).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
// acc (+)= A_part · [P | v]_part for one k-slice of 8: wgmma m64n72k8, A from registers.
__device__ __forceinline__ void wgmma_tf32_n72(const unsigned (&a)[4], const float* b_slice, float* acc) {
  using Op = cute::SM90::GMMA::MMA_64x72x8_F32TF32TF32_RS_TN<>;
  attn::gmma_rs_impl<Op>(a, attn::smem_descriptor(b_slice, 16), acc, std::make_integer_sequence<int, 36>{});
}
#endif

// Step s of chain c into one stage: A_s (zeros outside n×n; nothing for the identity
// step) and b_s, by cp.async; one commit group whether or not s is in the chunk.
template <class Cfg, class T>
__device__ __forceinline__ void issue_chunk_step(T* stage, const SeqChain& c, const T* A, const T* b, int64_t s,
                                                 bool in_chunk, int n, int nm, int tid) {
  if (in_chunk) {
    if (!(c.identity_first && s == 0)) {
      using Units = ThreadUnits<Cfg::kThreads, Cfg::kPiecesPerRow>;
      constexpr int kRowStep = Units::kRowStep;
      const T* A_s = A + s * c.a_step;
      const Units units(tid);
      const int row0 = units.row0, col = units.unit * Cfg::kPieceElems;
      T* const to = stage + row0 * Cfg::kStrideA + col;
      const T* const from = A_s + row0 * n + col;
#pragma unroll
      for (int u = 0; u < Cfg::kPiecesPerThread; ++u) {
        const bool ok = row0 + u * kRowStep < n && col < n;
        copy_async<16>(to + u * kRowStep * Cfg::kStrideA, ok ? from + u * kRowStep * n : A_s, ok);
      }
    }
    const T* b_s = b + s * c.b_step;
    for (int e = tid * Cfg::kPieceElems; e < nm; e += Cfg::kThreads * Cfg::kPieceElems)
      copy_async<16>(stage + Cfg::kStageA + e, b_s + e, true);
  }
  copy_async_commit();
}

// The summary of chunk `chunk_index` of group g: emit(row, col, value) for every padded
// row < N and column < N + 8 of [P | v] (columns from N: v), from the accumulators of the
// thread that holds them. Every thread leaves the walk after a barrier that follows the
// last read of [P | v] and of the stages, so the caller may reuse that shared memory.
template <class T, int N, bool kTransposed, bool kWgmma, bool kCompact = false, class Emit>
__device__ __forceinline__ void chunk_transfer_block(const ChunkTransferParams& p, const SeqChain& c, int64_t g,
                                                     int64_t chunk_index, Emit&& emit) {
  using Cfg = ChunkTransferConfig<T, N, kTransposed, kWgmma, kCompact>;
  constexpr int S = Cfg::kStages, NT = Cfg::kTiles, LDP = Cfg::kStrideP, LDA = Cfg::kStrideA;
  constexpr bool kExactA = sizeof(T) == 2;  // bf16 is exact in tf32
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (kWgmma) smem += (1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024;
  float* P_hi = reinterpret_cast<float*>(smem);  // [P | v], p_index
  float* P_lo = P_hi + N * LDP;
  T* stages = reinterpret_cast<T*>(smem + Cfg::kSplitBytes);  // [S][A | b]

  const int64_t s_begin = chunk_index * p.chunk;
  const int64_t len = min(p.chunk, c.steps - s_begin);
  const int n = p.n, m = p.m, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  constexpr bool kSplitColumns = sizeof(T) == 2 && !kWgmma;
  constexpr int RT = kSplitColumns ? 2 : 1;                 // row tiles per warp
  constexpr int kHalf = kSplitColumns ? (NT + 1) / 2 : NT;  // column tiles of the first (or only) half
  const int gid = lane / 4, tig = lane % 4, r0 = kSplitColumns ? 32 * (warp / 2) : 16 * warp;
  const int t0 = kSplitColumns ? (warp % 2) * kHalf : 0;  // this warp's column tiles: t0 .. t0 + t_count - 1
  const int t_count = kSplitColumns && warp % 2 ? NT - kHalf : kHalf;
  const T* A = static_cast<const T*>(c.A) + g * c.a_group;
  const T* b = static_cast<const T*>(c.b) + g * c.b_group;
  const int nm = n * m;

  // Step i of the chunk into stage slot.
  auto issue = [&](int64_t i, int slot) {
    issue_chunk_step<Cfg>(stages + slot * Cfg::kStageElems, c, A, b, s_begin + i, i < len, n, nm, tid);
  };

#pragma unroll
  for (int d = 0; d < S - 1; ++d) issue(d, d);

  // Rows row0 + gid (+8) × columns k0 + tig (+4) of A_s (of A_sᵀ when transposed), the
  // m16n8k8 tf32 A fragment (also wgmma's, per warp), split into tf32 hi and lo.
  auto load_a = [&](const T* stage, int row0, int k0, unsigned (&hi)[4], unsigned (&lo)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int row = row0 + gid + 8 * (k % 2), col = k0 + tig + 4 * (k / 2);
      const float a = to_float(kTransposed ? stage[col * LDA + row] : stage[row * LDA + col]);
      hi[k] = to_tf32(a);
      lo[k] = kExactA ? 0u : to_tf32(a - __uint_as_float(hi[k]));
    }
  };

  float acc[RT][kHalf][4];
  // Step i begins: its stage landed for everyone, [P | v] of step i-1 written.
  const auto begin_step = [&](int64_t i) {
    issue(i + S - 1, static_cast<int>((i + S - 1) % S));
    copy_async_wait<S - 1>();
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
    if constexpr (kWgmma) fence_async_shared();  // [P | v] stored by this thread, read by wgmma
#endif
    __syncthreads();
    return stages + (i % S) * Cfg::kStageElems;
  };
  // acc = [0 | b_s] before a product; at the first step, which forms none, [A_s | b_s]
  // (A_sᵀ when transposed; [I | b_s] for the identity step). The stage holds zeros
  // outside n×n.
  const auto start_acc = [&](const T* stage, bool first) {
    const T* b_s = stage + Cfg::kStageA;
    const bool identity = first && c.identity_first && s_begin == 0;
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int t = 0; t < kHalf; ++t)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int row = r0 + 16 * rt + gid + 8 * (k / 2), col = 8 * (t0 + t) + 2 * tig + (k % 2);
          float x = 0.f;
          if (t0 + t == NT - 1) x = (row < n && col - N < m) ? to_float(b_s[row * m + col - N]) : 0.f;
          else if (identity) x = row == col ? 1.f : 0.f;
          else if (first) x = to_float(kTransposed ? stage[col * LDA + row] : stage[row * LDA + col]);
          acc[rt][t][k] = x;
        }
  };
  // Step i ends: every read of [P | v] and of its stage done, then the new [P | v], split.
  const auto end_step = [&](int64_t i) {
    __syncthreads();
    if (i + 1 < len) {
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int t = 0; t < kHalf; ++t) {
          if (t >= t_count) break;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int row = r0 + 16 * rt + gid + 8 * (k / 2), col = 8 * (t0 + t) + 2 * tig + (k % 2);
            const float x = acc[rt][t][k], hi = __uint_as_float(to_tf32(x));
            P_hi[Cfg::p_index(row, col)] = hi;
            P_lo[Cfg::p_index(row, col)] = __uint_as_float(to_tf32(x - hi));
          }
        }
    }
  };

  start_acc(begin_step(0), true);  // peeled, so the loop below carries no first-step case
  end_step(0);
  for (int64_t i = 1; i < len; ++i) {
    const T* stage = begin_step(i);
    start_acc(stage, false);
    if constexpr (!kWgmma) {
#pragma unroll
      for (int k0 = 0; k0 < N; k0 += 8) {
        unsigned a_hi[RT][4], a_lo[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) load_a(stage, r0 + 16 * rt, k0, a_hi[rt], a_lo[rt]);
#pragma unroll
        for (int t = 0; t < kHalf; ++t) {
          if (t >= t_count) break;
          const int at0 = (k0 + tig) * LDP + 8 * (t0 + t) + gid, at1 = at0 + 4 * LDP;
          const unsigned h0 = __float_as_uint(P_hi[at0]), h1 = __float_as_uint(P_hi[at1]);
          const unsigned l0 = __float_as_uint(P_lo[at0]), l1 = __float_as_uint(P_lo[at1]);
#pragma unroll
          for (int rt = 0; rt < RT; ++rt) {
            mma_tf32(acc[rt][t], a_hi[rt], l0, l1);
            if constexpr (!kExactA) mma_tf32(acc[rt][t], a_lo[rt], h0, h1);
            mma_tf32(acc[rt][t], a_hi[rt], h0, h1);
          }
        }
      }
    } else {
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
      // Every k-slice's A fragment first: wgmma reads its registers until the wait.
      constexpr int KS = N / 8;
      unsigned a_hi[KS][4], a_lo[KS][4];
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) load_a(stage, r0, 8 * ks, a_hi[ks], a_lo[ks]);
      float* d = &acc[0][0][0];
      attn::wgmma_fence();  // the accumulators and A registers written above, before the async reads
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        // k-slice ks: its K half, then 8 floats (32 bytes) further along the atom rows.
        const int at = (ks / 4) * Cfg::kKHalfFloats + (ks % 4) * 8;
        wgmma_tf32_n72(a_hi[ks], P_lo + at, d);
        if constexpr (!kExactA) wgmma_tf32_n72(a_lo[ks], P_hi + at, d);
        wgmma_tf32_n72(a_hi[ks], P_hi + at, d);
      }
      attn::wgmma_commit();
      attn::wgmma_wait<0>();
      attn::fence_registers(reinterpret_cast<float(&)[4 * NT]>(acc[0]));
      attn::fence_registers(a_hi);
      if constexpr (!kExactA) attn::fence_registers(a_lo);
#endif
    }
    end_step(i);
  }
  copy_async_wait<0>();

#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int t = 0; t < kHalf; ++t) {
      if (t >= t_count) break;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        emit(r0 + 16 * rt + gid + 8 * (k / 2), 8 * (t0 + t) + 2 * tig + (k % 2), acc[rt][t][k]);
    }
}

template <class T, int N, bool kWgmma>
__global__ void __launch_bounds__(ChunkTransferConfig<T, N, false>::kThreads)
    chunk_transfer_kernel(const ChunkTransferParams p) {
  static_assert(ChunkTransferConfig<T, N, false>::kThreads == ChunkTransferConfig<T, N, true>::kThreads);
  const int z = blockIdx.z;
  const SeqChain c = p.chains[z];  // a copy: registers, not indexed parameter loads
  const int64_t g = blockIdx.y, chunk = blockIdx.x;
  const int n = p.n, m = p.m;
  float* maps = p.maps[z] + (g * p.chunks + chunk) * int64_t(n) * n;  // the summary, unpadded
  float* offsets = p.offsets[z] + (g * p.chunks + chunk) * int64_t(n) * m;
  const auto emit = [&](int row, int col, float value) {
    if (row >= n) return;
    if (col < N) {
      if (col < n) maps[row * n + col] = value;
    } else if (col - N < m) {
      offsets[row * m + col - N] = value;
    }
  };
  if (c.transposed) chunk_transfer_block<T, N, true, kWgmma>(p, c, g, chunk, emit);
  else chunk_transfer_block<T, N, false, kWgmma>(p, c, g, chunk, emit);
}

template <class T, int N, bool kWgmma, bool kCompact = false>
inline constexpr int chunk_transfer_smem_bytes() {
  const int a = ChunkTransferConfig<T, N, false, kWgmma, kCompact>::smem_bytes();
  const int b = ChunkTransferConfig<T, N, true, kWgmma, kCompact>::smem_bytes();
  return a > b ? a : b;
}

// Start states of every chunk, [G, chunks, n, m] float: chunk 0's is the chain's start
// (input type, or zeros); the others are left for the pass over the summaries.
// blockIdx.y picks the chain.
struct ChunkStartParams {
  const void* start[2] = {nullptr, nullptr};
  float* starts[2] = {nullptr, nullptr};
};

template <class T>
__global__ void chunk_start_kernel(const ChunkStartParams p, int64_t chunks, int nm) {
  const int64_t g = blockIdx.x;
  const bool second = blockIdx.y == 1;  // constant indices keep the parameters out of local memory
  const T* start = static_cast<const T*>(second ? p.start[1] : p.start[0]);
  float* starts = second ? p.starts[1] : p.starts[0];
  for (int e = threadIdx.x; e < nm; e += blockDim.x)
    starts[g * chunks * nm + e] = start ? to_float(start[g * nm + e]) : 0.f;
}

// The split chunked method's scratch for `count` chains, chain k's from scratch +
// k·G·chunks·(n² + 2nm) floats: maps [G, chunks, n, n] and offsets [G, chunks, n, m] (the
// chunk summaries), starts [G, chunks, n, m] (the state entering every chunk); and the pass
// over the summaries, s_{c+1} = P_c·s_c + v_c, as the sequential kernel's chains.
struct ChunkSummaries {
  float *maps[2] = {}, *offsets[2] = {}, *starts[2] = {};
  ChunkStartParams start;
  SeqParams pass;
};

inline ChunkSummaries chunk_summaries(const SeqChain* chains, int count, int64_t G, int64_t chunks, int64_t n,
                                      int64_t m, float* scratch) {
  const int64_t nn = n * n, nm = n * m;
  ChunkSummaries c;
  for (int k = 0; k < count; ++k) {
    c.maps[k] = scratch + k * G * chunks * (nn + 2 * nm);
    c.offsets[k] = c.maps[k] + G * chunks * nn;
    c.starts[k] = c.offsets[k] + G * chunks * nm;
    c.start.start[k] = chains[k].start, c.start.starts[k] = c.starts[k];
    SeqChain& q = c.pass.chains[k];
    q.A = c.maps[k], q.a_step = nn, q.a_group = chunks * nn;
    q.b = c.offsets[k], q.b_step = nm, q.b_group = chunks * nm;
    q.start = c.starts[k], q.start_group = chunks * nm;
    q.out = c.starts[k] + nm, q.out_step = nm, q.out_group = chunks * nm, q.out_float = true;
    q.steps = chunks - 1;
  }
  c.pass.n = n, c.pass.m = m;
  return c;
}

// Every chunk's start in starts: the chain's start state (zeros without one) for chunk 0.
template <class T>
void launch_chunk_starts(const ChunkSummaries& c, int count, int64_t G, int64_t chunks, int64_t nm,
                         cudaStream_t stream) {
  chunk_start_kernel<T><<<dim3(static_cast<unsigned>(G), static_cast<unsigned>(count)), 128, 0, stream>>>(
      c.start, chunks, static_cast<int>(nm));
  check_launch("linear_recurrence chunk starts");
}

}  // namespace seqmix::cuda::linrec
