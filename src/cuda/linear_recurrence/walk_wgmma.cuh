// The sequential walk of matrix states (m > 1, n ≤ 64) on the tensor cores: the chains of
// the sequential kernel (SeqParams, the same groups, sub-chains, column slices of 8, start
// states, outputs and last states), each step's product out = A·h (Aᵀ·h for the backward's
// reverse chain) as one warpgroup's wgmma m64n8 instead of the CUDA cores' FMAs
// (NOTES.md, version 14).
//
// Per step: the transition (padded to 64×64) is the A operand, straight from its stage
// (cp.async, 128-byte swizzled rows); the state slice h (64×8) is the B operand, stored
// K-major after every step. The state keeps float accuracy through a split into parts:
// - bf16: A is exact in bf16; h = h_hi + h_lo, two bf16 parts (16 bits of mantissa, error
//   about 2⁻¹⁷ a step): 2 × 4 wgmma m64n8k16 a step. The reverse chain reads the same
//   stage as an MN-major operand (Aᵀ), which bf16 wgmma takes as it is.
// - f32: three tf32 products A_hi·h_hi + A_hi·h_lo + A_lo·h_hi (24 wgmma m64n8k8). The
//   threads split each stage into A_hi (rounded to tf32) and A_lo = A − A_hi, transposed for
//   the reverse chain (tf32 has no MN-major operand), one step ahead: the split of step
//   s + 1 runs while step s's products do.
// The state itself stays in float registers (the accumulators' layout) between steps; b of
// the next four steps is loaded ahead into registers, as in the sequential kernel.
#pragma once

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/methods.hpp"

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

namespace seqmix::cuda::linrec {

template <class T>
struct WalkLayout {
  static constexpr int N = 64, kCols = 8, kThreads = 128, kPrefetchB = 4;
  static constexpr bool kF32 = sizeof(T) == 4;
  static constexpr int kStages = kF32 ? 6 : 10;  // f32: one block an SM; bf16: two
  static constexpr int kK = kF32 ? 8 : 16;       // k per wgmma
  static constexpr int kUnitElems = 16 / int(sizeof(T));
  static constexpr int kUnitsPerRow = N / kUnitElems;
  static constexpr int kStageBytes = N * N * int(sizeof(T));
  static constexpr int kStateBytes = kCols * N * int(sizeof(T));  // one part of the B operand
  // From the 1024-aligned base: stages, (f32: two buffers of A_hi, A_lo), two buffers of
  // the state's two parts.
  static constexpr int kSplit = kStages * kStageBytes;
  static constexpr int kState = kSplit + (kF32 ? 2 * 2 * kStageBytes : 0);
  static constexpr int kBytes = kState + 2 * 2 * kStateBytes;
  static constexpr int kAlignSlack = 1024;
  static_assert(kStageBytes % 1024 == 0 && kStateBytes % 1024 == 0, "swizzle atoms 1024-byte aligned");

  // Byte offset of element k of row `row` in a K-major operand of `rows` rows.
  template <int rows>
  __device__ static constexpr int at(int row, int k) {
    return swizzled_offset<rows, int(sizeof(T))>(row, k);
  }
  // Start of k-slice ks in a K-major operand of `rows` rows.
  template <int rows>
  __device__ static constexpr int slice(int ks) {
    return at<rows>(0, ks * kK);
  }
};

// f32: the transition of a stage into A_hi and A_lo (each K-major, as the stage), transposed
// for the reverse chain. 4×4 blocks a thread: four 16-byte rows read, four written per part.
template <class L, bool transposed>
__device__ __forceinline__ void split_transition(const unsigned char* stage, unsigned char* hi, unsigned char* lo) {
  static_assert(L::kF32);
  constexpr int kBlocksPerRow = L::N / 4;
#pragma unroll
  for (int q = 0; q < L::N * L::N / 16 / L::kThreads; ++q) {
    const int block = threadIdx.x + L::kThreads * q, r0 = (block / kBlocksPerRow) * 4, c0 = (block % kBlocksPerRow) * 4;
    float x[4][4];  // x[a][e] = A[r0 + a][c0 + e]
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const float4 v = *reinterpret_cast<const float4*>(stage + L::template at<L::N>(r0 + a, c0));
      x[a][0] = v.x, x[a][1] = v.y, x[a][2] = v.z, x[a][3] = v.w;
    }
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      float y[4];  // operand row r0 + a (or c0 + a transposed), k from c0 (or r0)
#pragma unroll
      for (int e = 0; e < 4; ++e) y[e] = transposed ? x[e][a] : x[a][e];
      float h[4], l[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) h[e] = __uint_as_float(to_tf32(y[e])), l[e] = y[e] - h[e];
      const int at = transposed ? L::template at<L::N>(c0 + a, r0) : L::template at<L::N>(r0 + a, c0);
      *reinterpret_cast<float4*>(hi + at) = make_float4(h[0], h[1], h[2], h[3]);
      *reinterpret_cast<float4*>(lo + at) = make_float4(l[0], l[1], l[2], l[3]);
    }
  }
}

// One block's chain (blockIdx.y of p's chains), its direction fixed at compile time so that
// nothing but wgmma touches the accumulators within a step's products.
template <class T, bool transposed, int K>
__device__ __forceinline__ void walk_chain(const SeqParams& p, unsigned char* smem) {
  using L = WalkLayout<T>;
  // k-slices of the product: n ≤ 32 leaves the upper half of k zero (K = 32).
  constexpr int kSlices = K / L::kK, kChains = L::kF32 ? kSlices : 2 * kSlices;
  using Held = HeldB<T, true>;
  constexpr int D = L::kStages, PB = L::kPrefetchB, N = L::N, C = L::kCols;
  const SeqChain c = p.chains[blockIdx.y];
  const int64_t chain_index = blockIdx.x / p.col_blocks;
  const int64_t group = chain_index / c.sub_chains, sub = chain_index % c.sub_chains;
  const bool last_sub = sub == c.sub_chains - 1;
  const bool identity_first = c.identity_first && sub == 0;
  const int col0 = static_cast<int>(blockIdx.x % p.col_blocks) * C;
  const int n = static_cast<int>(p.n), m = static_cast<int>(p.m);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int64_t steps = last_sub && c.last_steps > 0 ? c.last_steps : c.steps;
  const T* A = static_cast<const T*>(c.A) + group * c.a_group + sub * c.sub_a;

  const auto stage = [&](int64_t s) { return smem + static_cast<int>(s % D) * L::kStageBytes; };
  // Step s's transition into its stage, one commit group. The reverse chain's identity
  // step gets the identity written in: a product like every other step's keeps the
  // accumulators untouched between the wgmma of a step (skipping them there made ptxas
  // serialize every wgmma of the kernel).
  const auto issue = [&](int64_t s) {
    if (s < steps) {
      const T* A_s = A + s * c.a_step;
      constexpr int kPieces = N * L::kUnitsPerRow / L::kThreads;
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const int idx = tid + L::kThreads * k, row = idx / L::kUnitsPerRow, col = (idx % L::kUnitsPerRow) * L::kUnitElems;
        unsigned char* unit = stage(s) + L::template at<N>(row, col);
        if (identity_first && s == 0) {
          *reinterpret_cast<uint4*>(unit) = identity_unit<T>(row, col, n);
        } else {
          const bool ok = row < n && col < n;
          copy_async<16>(unit, ok ? A_s + row * n + col : A_s, ok);
        }
      }
    }
    copy_async_commit();
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue(d);

  // This thread's four state elements (the m64n8 accumulator layout): rows r[i / 2],
  // columns col0 + k[i % 2].
  const int rows[2] = {16 * warp + gid, 16 * warp + gid + 8}, cols[2] = {2 * tig, 2 * tig + 1};
  bool ok[4];
  int64_t off[4];  // within a step's [n, m]
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ok[i] = rows[i / 2] < n && col0 + cols[i % 2] < m;
    off[i] = static_cast<int64_t>(rows[i / 2]) * m + col0 + cols[i % 2];
  }
  float acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[i] = 0.f;
    if (c.start && ok[i]) {
      const int64_t at = group * c.start_group + sub * c.sub_start + off[i];
      acc[i] = start_element<T>(c, at);
    }
  }
  // The state as the next step's B operand (parts hi and lo) into buffer `buffer`.
  const auto store_state = [&](int buffer) {
    unsigned char* hi = smem + L::kState + (2 * buffer) * L::kStateBytes;
    unsigned char* lo = hi + L::kStateBytes;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int at = L::template at<C>(cols[i % 2], rows[i / 2]);
      if constexpr (L::kF32) {
        const float h = __uint_as_float(to_tf32(acc[i]));
        *reinterpret_cast<float*>(hi + at) = h;
        *reinterpret_cast<float*>(lo + at) = acc[i] - h;
      } else {
        const __nv_bfloat16 h = __float2bfloat16_rn(acc[i]);
        *reinterpret_cast<__nv_bfloat16*>(hi + at) = h;
        *reinterpret_cast<__nv_bfloat16*>(lo + at) = __float2bfloat16_rn(acc[i] - __bfloat162float(h));
      }
    }
  };
  store_state(1);  // the state before step 0, read by step 0

  const T* b = c.b ? static_cast<const T*>(c.b) + group * c.b_group + sub * c.sub_b : nullptr;
  using Held_t = typename Held::Type;
  const auto load_b = [&](int64_t s, Held_t (&dst)[4]) {
    const bool live = b && s < steps;
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = (live && ok[i]) ? Held::hold(b[s * c.b_step + off[i]]) : Held_t(0);
  };
  Held_t bring[PB][4];
#pragma unroll
  for (int d = 0; d < PB; ++d) load_b(d, bring[d]);
  const int64_t out_at = group * c.out_group + sub * c.sub_out;
  float* out_f = c.out_float ? static_cast<float*>(c.out) + out_at : nullptr;
  T* out_t = !c.out_float && c.out ? static_cast<T*>(c.out) + out_at : nullptr;
  T* last = c.last && last_sub ? static_cast<T*>(c.last) + group * c.last_group : nullptr;

  unsigned char* split = smem + L::kSplit;  // f32: [2][hi, lo]
  const auto split_step = [&](int64_t s) {  // f32: step s's stage into buffer s % 2
    if constexpr (L::kF32) {
      if (s < steps) {
        unsigned char* hi = split + static_cast<int>(s % 2) * 2 * L::kStageBytes;
        split_transition<L, transposed>(stage(s), hi, hi + L::kStageBytes);
      }
    }
  };
  if constexpr (L::kF32) {
    copy_async_wait<D - 2>();
    __syncthreads();
    split_step(0);
  }

  for (int64_t s0 = 0; s0 < steps; s0 += PB) {
#pragma unroll
    for (int d = 0; d < PB; ++d) {
      const int64_t s = s0 + d;
      if (s >= steps) break;
      // Landed for everyone: f32 the stage of step s + 1 (its split runs during this step),
      // bf16 step s's. The previous step's state and split are published; its stage is free.
      copy_async_wait<L::kF32 ? D - 3 : D - 2>();
      fence_async_shared();
      __syncthreads();
      issue(s + D - 1);
      const int state_in = static_cast<int>((s + 1) & 1);
      {
        const unsigned char* h_hi = smem + L::kState + (2 * state_in) * L::kStateBytes;
        const unsigned char* h_lo = h_hi + L::kStateBytes;
        // Independent accumulators: a chain of dependent wgmma m64n8 runs at the latency of
        // each (measured: 24 in a chain took ~1.2 µs a step), independent ones overlap.
        float part[kChains][4];
        attn::wgmma_fence();
        if constexpr (L::kF32) {
          using Op = cute::SM90::GMMA::MMA_64x8x8_F32TF32TF32_SS_TN<>;
          const unsigned char* a_hi = split + static_cast<int>(s % 2) * 2 * L::kStageBytes;
          const unsigned char* a_lo = a_hi + L::kStageBytes;
#pragma unroll
          for (int ks = 0; ks < kSlices; ++ks) {  // chain ks: small terms first
            const uint64_t bh = attn::smem_descriptor(h_hi + L::template slice<C>(ks), 16);
            const uint64_t bl = attn::smem_descriptor(h_lo + L::template slice<C>(ks), 16);
            const uint64_t ah = attn::smem_descriptor(a_hi + L::template slice<N>(ks), 16);
            const uint64_t al = attn::smem_descriptor(a_lo + L::template slice<N>(ks), 16);
            wgmma_ss<Op>(al, bh, part[ks], false);
            wgmma_ss<Op>(ah, bl, part[ks], true);
            wgmma_ss<Op>(ah, bh, part[ks], true);
          }
        } else {
          using OpK = cute::SM90::GMMA::MMA_64x8x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K,
                                                                    cute::SM90::GMMA::Major::K>;
          using OpMN = cute::SM90::GMMA::MMA_64x8x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::MN,
                                                                     cute::SM90::GMMA::Major::K>;
          const unsigned char* a = stage(s);
          // Both parts of h against each k-slice of A, one accumulator each.
          const auto products = [&](auto op, auto a_slice) {
            using Op = decltype(op);
#pragma unroll
            for (int ks = 0; ks < kSlices; ++ks) {
              const uint64_t at = a_slice(ks);
              wgmma_ss<Op>(at, attn::smem_descriptor(h_lo + L::template slice<C>(ks), 16), part[2 * ks], false);
              wgmma_ss<Op>(at, attn::smem_descriptor(h_hi + L::template slice<C>(ks), 16), part[2 * ks + 1], false);
            }
          };
          if constexpr (transposed)  // Aᵀ: row k of the stage holds the operand's column k (MN-major)
            products(OpMN{}, [&](int ks) { return attn::smem_descriptor(a + ks * L::kK * 128, N * 128); });
          else
            products(OpK{}, [&](int ks) { return attn::smem_descriptor(a + L::template slice<N>(ks), 16); });
        }
        attn::wgmma_commit();
        split_step(s + 1);  // f32: while the products run
        attn::wgmma_wait<0>();
#pragma unroll
        for (int q = 0; q < kChains; ++q) attn::fence_registers(part[q]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[i] = part[0][i];
#pragma unroll
          for (int q = 1; q < kChains; ++q) acc[i] += part[q][i];
        }
      }

      // out = product + b: kept in registers, to memory, and as the next step's operand.
      const bool write_last = last && s == steps - 1;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[i] += Held::widen(bring[d][i]);
        if (ok[i]) {
          if (out_f) out_f[s * c.out_step + off[i]] = acc[i];
          if (out_t) out_t[s * c.out_step + off[i]] = from_float<T>(acc[i]);
          if (write_last) last[off[i]] = from_float<T>(acc[i]);
        }
      }
      store_state(static_cast<int>(s & 1));
      load_b(s + PB, bring[d]);
    }
  }
  copy_async_wait<0>();
}

template <class T, int K>
__global__ void __launch_bounds__(128, WalkLayout<T>::kF32 ? 1 : 2) walk_wgmma_kernel(const SeqParams p) {
  extern __shared__ __align__(16) unsigned char walk_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(walk_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  if (p.chains[blockIdx.y].transposed) walk_chain<T, true, K>(p, smem);
  else walk_chain<T, false, K>(p, smem);
}

}  // namespace seqmix::cuda::linrec

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER

namespace seqmix::cuda::linrec {

// The sequential walk on tensor cores for matrix states: by default bf16 with 32 < n ≤ 64,
// where it measured faster than the CUDA cores' walk (G16 T4096 n64 m64 3.77 → 2.73 ms,
// G64 T2048 7.47 → 3.56); f32 (three tf32 products, 5.02 against 3.95 ms) and n ≤ 32
// (2.43 against 2.04) measured slower and keep the CUDA cores (NOTES.md, version 14).
// SEQMIX_LINREC_SEQUENTIAL_WGMMA=1 forces it on for any matrix state with n ≤ 64, =0 off
// (read at every call so that one process can time both).
inline bool walk_on_tensor_cores(const SeqParams& p, bool bf16) {
  if (p.m < 2 || p.n > 64) return false;
  return flag_from_environment("SEQMIX_LINREC_SEQUENTIAL_WGMMA", bf16 && p.n > 32);
}

template <class T>
bool launch_walk_on_tensor_cores(const SeqParams& params, int64_t G, void* stream) {
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
  if (!walk_on_tensor_cores(params, sizeof(T) == 2)) return false;
  using L = WalkLayout<T>;
  SeqParams p = params;
  p.col_blocks = static_cast<int>((p.m + L::kCols - 1) / L::kCols);
  constexpr int smem = L::kBytes + L::kAlignSlack;
  const auto kernel = p.n <= 32 ? walk_wgmma_kernel<T, 32> : walk_wgmma_kernel<T, 64>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (walk on tensor cores)");
  const dim3 grid(static_cast<unsigned>(G * p.col_blocks), p.chains[1].steps > 0 ? 2u : 1u);
  kernel<<<grid, L::kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
  check_launch("linear_recurrence walk on tensor cores");
  return true;
#else  // built without the CUTLASS headers: the CUDA cores' walk
  (void)params, (void)G, (void)stream;
  return false;
#endif
}

}  // namespace seqmix::cuda::linrec
