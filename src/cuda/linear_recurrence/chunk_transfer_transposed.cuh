// The one-pass forward's chunk transfer with the running product in registers and its
// product on wgmma (vector states, m = 1, padded N = 64; NOTES.md, version 11). As in
// chunk_transfer_registers.cuh the product is transposed,
//   Pᵀ ← Pᵀ·A_sᵀ,
// so the accumulators (wgmma m64n64, one warpgroup) are also the A operand of the next
// step, taken from registers (the RS form). The B operand A_sᵀ needs, per column j of the
// product, the k values of row j of A_s: the stage as it comes from memory is already
// K-major. It lands (cp.async, 16-byte units) in 128-byte swizzled atoms, so wgmma reads
// it straight from the stage: nothing of P is ever stored.
// - bf16 transitions are exact in bf16: Pᵀ is split in registers into three bf16 parts
//   (hi, mid, lo: 24 bits of mantissa, about the 3×tf32 accuracy), 3 wgmma m64n64k16 a
//   k-slice, 12 a step; one barrier a step, no shared-memory stores but v.
// - f32 transitions take the 3×tf32 form: Pᵀ split in registers; the tensor cores read the
//   stage's f32 elements as tf32 by dropping their low 13 bits, so the stage itself is
//   A_hi, and A_lo = A − A_hi (exact) is stored once per step by the threads that read the
//   stage for v anyway (8 16-byte stores a thread). Pᵀ_lo·A_hi and Pᵀ_hi·A_hi (16 wgmma
//   m64n64k8) run while A_lo is formed; then a proxy fence, a second barrier and the 8
//   products Pᵀ_hi·A_lo.
// v ← A_s·v + b_s runs on the CUDA cores: thread (row, half) sums half of its row while it
// reads (and in f32 splits) it, the pair (lanes 16 apart) adds, v in shared memory (two
// buffers). Selectable (SEQMIX_LINREC_FUSED_TRANSFER=transposed, chunked_tensor.cuh);
// NOTES.md says what it measured.
#pragma once

#include "cuda/linear_recurrence/chunk_transfer_registers.cuh"

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

namespace seqmix::cuda::linrec {

// Where everything lives, in bytes from the 1024-aligned base: (f32: A_lo, one stage's
// size), the A stages, the b stages, v. Row j of a stage is 128 bytes per K half (two
// halves of 32 floats in f32, one of 64 bf16); the rows of a half follow each other, so 8
// rows make one 1024-byte swizzle atom (the descriptor's stride), and the 16-byte unit u of
// a row sits at unit (u % 8) XOR (j % 8) of its 128 bytes (the hardware's 128-byte swizzle).
template <class T>
struct TransposedTransfer {
  static constexpr int N = 64;
  static constexpr bool kF32 = sizeof(T) == 4;
  static constexpr int kStages = kF32 ? 3 : 4;
  static constexpr int kK = kF32 ? 8 : 16;  // k per wgmma
  static constexpr int kSlices = N / kK;
  static constexpr int kUnitElems = 16 / int(sizeof(T));
  static constexpr int kUnitsPerRow = N / kUnitElems;  // 16 (f32) or 8 (bf16)
  static constexpr int kStageBytes = N * N * int(sizeof(T));
  static constexpr int kLo = 0;
  static constexpr int kA = kF32 ? kStageBytes : 0;
  static constexpr int kB = kA + kStages * kStageBytes;
  static constexpr int kV = kB + kStages * N * int(sizeof(T));
  static constexpr int kBytes = kV + 2 * N * int(sizeof(float));
  static_assert(kStageBytes % 1024 == 0 && kA % 1024 == 0, "swizzle atoms 1024-byte aligned");
  static_assert(kV >= N * (N + 8) * int(sizeof(float)), "v outside the summary the caller writes last");
  static constexpr int kRowBytes = 128;  // a row of a K half: the hardware's 128-byte swizzle

  __device__ static int unit_offset(int j, int u) {
    return (u / 8) * (N * kRowBytes) + j * kRowBytes + (((u % 8) ^ (j % 8)) * 16);
  }
  // Byte offset of k-slice ks along the rows: 32 bytes a slice within a K half.
  __device__ static constexpr int slice_offset(int ks) {
    return (ks * kK * int(sizeof(T)) / kRowBytes) * (N * kRowBytes) + (ks * kK * int(sizeof(T))) % kRowBytes;
  }
};

// acc (= or +=) A (registers) · B (the K-major swizzled slice at desc), one warpgroup.
template <class T>
__device__ __forceinline__ void transfer_wgmma(const unsigned (&a)[4], uint64_t desc, float (&acc)[32],
                                               bool accumulate) {
  using Op = std::conditional_t<sizeof(T) == 4, cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_RS_TN<>,
                                cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_RS<cute::SM90::GMMA::Major::K,
                                                                              cute::SM90::GMMA::Major::K>>;
  wgmma_rs<Op>(a, desc, acc, accumulate);
}

// x as hi + mid + lo, each a bf16 (round to nearest at each step).
__device__ __forceinline__ void split3_bf16(float x, float (&part)[3]) {
  part[0] = __bfloat162float(__float2bfloat16_rn(x));
  const float rest = x - part[0];
  part[1] = __bfloat162float(__float2bfloat16_rn(rest));
  part[2] = rest - part[1];
}

// The order of a step's work after the previous step's products (measured: NOTES.md,
// version 11): matvec_first: barrier, v (and f32's A_lo), Pᵀ split, products; early: Pᵀ
// split, barrier, the stage's products, v while they run; late: barrier, Pᵀ split, the
// stage's products, v while they run. f32 then adds the A_lo products after a second
// barrier.
enum class TransposedOrder { matvec_first, early, late };

// Chunk `chunk_index` of group g of a forward chain (not transposed, no identity step),
// m = 1, padded N = 64: emit(row, col, value) for every row < N and column ≤ N of [P | v]
// (column N: v), as chunk_transfer_in_registers. Cfg: the caller's layout, whose shared
// memory (from the 1024-aligned smem) holds this one's; the caller's summary (the first
// N·(N + 8) floats) is written by emit after a barrier that follows every read of the
// stages. Every thread leaves after that barrier.
template <class T, int N, class Cfg, TransposedOrder kOrder, class Emit>
__device__ __forceinline__ void chunk_transfer_transposed(unsigned char* smem, const SeqChain& c, int64_t g,
                                                          int64_t chunk, int64_t chunk_index, int n, Emit&& emit) {
  using L = TransposedTransfer<T>;
  static_assert(N == L::N && Cfg::kThreads == 128, "one warpgroup, N = 64");
  static_assert(L::kBytes + Cfg::kAlignSlack <= Cfg::smem_bytes(), "inside the caller's shared memory");
  constexpr int S = L::kStages, NT = N / 8, KS = L::kSlices, kHalfUnits = L::kUnitsPerRow / 2;
  const int64_t s_begin = chunk_index * chunk, len = min(chunk, c.steps - s_begin);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int row = 16 * warp + lane % 16, half = lane / 16;  // v's thread: row `row`, K half `half`
  const T* A = static_cast<const T*>(c.A) + g * c.a_group;
  const T* b = static_cast<const T*>(c.b) + g * c.b_group;
  float* v_buffers = reinterpret_cast<float*>(smem + L::kV);  // [2][N]
  const auto stage_a = [&](int64_t i) { return smem + L::kA + static_cast<int>(i % S) * L::kStageBytes; };
  const auto stage_b = [&](int64_t i) {
    return reinterpret_cast<T*>(smem + L::kB + static_cast<int>(i % S) * N * int(sizeof(T)));
  };
  const auto issue = [&](int64_t i) {  // step i into its slot (nothing past the chunk), one commit group
    if (i < len) {
      const T* A_s = A + (s_begin + i) * c.a_step;
      constexpr int kPieces = N * L::kUnitsPerRow / 128;
      // A thread's units step by a multiple of 8 rows, so the swizzle (j mod 8) is the same for
      // all of them.
      using Units = ThreadUnits<128, L::kUnitsPerRow>;
      constexpr int kRowStep = Units::kRowStep;
      static_assert(kRowStep % 8 == 0, "a thread's units keep their swizzle");
      const Units units(tid);
      const int j0 = units.row0, u = units.unit, col = u * L::kUnitElems;
      unsigned char* const to = stage_a(i) + L::unit_offset(j0, u);
      const T* const from = A_s + j0 * n + col;
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const bool ok = j0 + k * kRowStep < n && col < n;
        copy_async<16>(to + k * kRowStep * L::kRowBytes, ok ? from + k * kRowStep * n : A_s, ok);
      }
      const T* b_s = b + (s_begin + i) * c.b_step;
      for (int e = tid * L::kUnitElems; e < n; e += 128 * L::kUnitElems) copy_async<16>(stage_b(i) + e, b_s + e, true);
    }
    copy_async_commit();
  };
  // Step i's stage landed for everyone (and is visible to wgmma's reads), step i − 1 done
  // everywhere (its slot and v buffer free): request step i + S − 1 into that slot.
  const auto begin_step = [&](int64_t i) {
    copy_async_wait<S - 2>();
    fence_async_shared();
    __syncthreads();
    issue(i + S - 1);
  };
#pragma unroll
  for (int d = 0; d < S - 1; ++d) issue(d);

  // acc[4t + k]: Pᵀ at row 16·warp + gid + 8·(k / 2), column 8t + 2·tig + k % 2.
  float acc[4 * NT];
  begin_step(0);
  {  // the first step forms no product: Pᵀ = A_firstᵀ, v = b_first
    const unsigned char* stage = stage_a(0);
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = 16 * warp + gid + 8 * (k / 2), col = 8 * t + 2 * tig + k % 2;  // A_first[col][r]
        acc[4 * t + k] = to_float(*reinterpret_cast<const T*>(stage + L::unit_offset(col, r / L::kUnitElems) +
                                                              (r % L::kUnitElems) * int(sizeof(T))));
      }
    if (half == 0) v_buffers[row] = row < n ? to_float(stage_b(0)[row]) : 0.f;
  }
  constexpr int kParts = L::kF32 ? 2 : 3;
  // Pᵀ (after step i − 1) as the A operand, split: f32 into tf32 hi and lo, bf16 into three
  // bf16 parts.
  const auto split_product = [&](unsigned (&a)[kParts][KS][4]) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      if constexpr (L::kF32) {
        float x[4];
        tile_as_tf32_a_fragment(reinterpret_cast<const float(&)[4]>(acc[4 * ks]), lane, x);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          a[0][ks][k] = to_tf32(x[k]);
          a[1][ks][k] = to_tf32(x[k] - __uint_as_float(a[0][ks][k]));
        }
      } else {
        // The bf16 A fragment of k-slice ks is accumulator tiles 2ks and 2ks + 1 as they are:
        // register r holds (row gid + 8·(r % 2), columns 16ks + 8·(r / 2) + 2·tig, + 1).
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float lo_col[3], hi_col[3];
          split3_bf16(acc[4 * (2 * ks + r / 2) + 2 * (r % 2)], lo_col);
          split3_bf16(acc[4 * (2 * ks + r / 2) + 2 * (r % 2) + 1], hi_col);
#pragma unroll
          for (int part = 0; part < 3; ++part) a[part][ks][r] = attn::pack2<__nv_bfloat16>(lo_col[part], hi_col[part]);
        }
      }
    }
  };
  // The products that read the stage as it landed (f32: the tensor cores take its
  // elements as tf32 by dropping the low 13 bits, so the stage is A_hi = A − A_lo with
  // A_lo as split below; small terms first).
  const auto stage_products = [&](const unsigned (&a)[kParts][KS][4], const unsigned char* stage) {
    attn::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const uint64_t b_hi = attn::smem_descriptor(stage + L::slice_offset(ks), 16);
#pragma unroll
      for (int part = kParts - 1; part >= 0; --part)
        transfer_wgmma<T>(a[part][ks], b_hi, acc, ks > 0 || part < kParts - 1);
    }
  };
  // v_i = A_i·v_{i-1} + b_i over this thread's half row; f32: A_i's lo part on the way.
  const auto matvec = [&](int64_t i, const unsigned char* stage) {
    const float* v_prev = v_buffers + ((i - 1) % 2) * N;
    float sum = 0.f;
#pragma unroll
    for (int q = 0; q < kHalfUnits; ++q) {
      const int u = half * kHalfUnits + q, at = L::unit_offset(row, u);
      const float* x = v_prev + u * L::kUnitElems;
      sum += dot_unit(reinterpret_cast<const T*>(stage + at), x);
      if constexpr (L::kF32) {
        const float4 a4 = *reinterpret_cast<const float4*>(stage + at);
        const auto lo = [](float y) { return y - __uint_as_float(__float_as_uint(y) & 0xffffe000u); };
        *reinterpret_cast<float4*>(smem + L::kLo + at) = make_float4(lo(a4.x), lo(a4.y), lo(a4.z), lo(a4.w));
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    if (half == 0) v_buffers[(i % 2) * N + row] = row < n ? sum + to_float(stage_b(i)[row]) : 0.f;
  };
  for (int64_t i = 1; i < len; ++i) {
    unsigned a[kParts][KS][4];
    if constexpr (kOrder == TransposedOrder::early) split_product(a);  // overlaps the others' arrival
    begin_step(i);
    const unsigned char* stage = stage_a(i);
    if constexpr (kOrder == TransposedOrder::matvec_first) {
      matvec(i, stage);
      split_product(a);
      stage_products(a, stage);
    } else {
      if constexpr (kOrder == TransposedOrder::late) split_product(a);
      stage_products(a, stage);
      matvec(i, stage);  // while the products run
    }
    if constexpr (L::kF32) {  // every thread's A_lo stored (for wgmma's reads): Pᵀ_hi·A_lo
      fence_async_shared();
      __syncthreads();
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
        transfer_wgmma<T>(a[0][ks], attn::smem_descriptor(smem + L::kLo + L::slice_offset(ks), 16), acc, true);
    }
    attn::wgmma_commit();
    attn::wgmma_wait<0>();
    attn::fence_registers(acc);
    attn::fence_registers(a[0]);
    attn::fence_registers(a[1]);
    if constexpr (kParts == 3) attn::fence_registers(a[2]);
  }
  const float v_last = half == 0 ? v_buffers[((len - 1) % 2) * N + row] : 0.f;  // this thread's own
  copy_async_wait<0>();
  __syncthreads();  // every read of the stages and of v done: the caller's summary may overwrite them
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int k = 0; k < 4; ++k) emit(8 * t + 2 * tig + k % 2, 16 * warp + gid + 8 * (k / 2), acc[4 * t + k]);
  if (half == 0) emit(row, N, v_last);
}

}  // namespace seqmix::cuda::linrec

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER
