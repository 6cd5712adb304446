// The backward's gradient products on tensor cores for matrix states given the forward's
// h: dA_t = g_t·h_{t-1}ᵀ and db_t = g_t, n ≤ 64 and m ≤ 64 padded to 64 (NOTES.md, versions
// 15 and 16). The CUDA cores' tiled kernel (io.cuh grad_kernel) spends ~3.5 ms of the
// 6.2 ms backward at G16 T4096 n64 m64 bf16, on 64×64×64 products done as 4×4 register
// tiles; their bytes (g in f32, h, dA and db) take ~0.9 ms at the copy rate.
//
// One warpgroup a block, blocks striding over the G·T steps, a ring of three stages (g as
// f32, h_{t-1} as the B operand, both by cp.async, two steps ahead). Per step, bf16: the
// threads turn g into bf16 hi and lo parts (the A operand: g·hᵀ = g_hi·hᵀ + g_lo·hᵀ keeps g's
// float accuracy to ~2⁻¹⁷, h being exact in bf16) and write db from it, then 8 wgmma
// m64n64k16 form dA, stored from the accumulators. f32: g and h land in the tf32 operands'
// layout (read as tf32, their hi parts), the threads write their remainders and db, and 24
// wgmma m64n64k8 form g_lo·hᵀ + g·h_loᵀ + g·hᵀ (three tf32 products, one block an SM).
#pragma once

#include <algorithm>
#include <type_traits>

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/io.cuh"

namespace seqmix::cuda::linrec {

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

template <class T>
struct GradLayout {
  static constexpr bool kF32 = sizeof(T) == 4;
  static constexpr int N = 64, K = 64, kThreads = 128, kStages = 3, kBlocksPerSM = kF32 ? 1 : 2;
  static constexpr int kGBytes = N * K * 4;                     // g_t in f32
  static constexpr int kHBytes = N * K * int(sizeof(T));        // h_{t-1}, the B operand
  static constexpr int kPartBytes = N * K * (kF32 ? 4 : 2);     // one part the threads write
  static constexpr int kG = 0;                                  // [kStages] g
  static constexpr int kH = kG + kStages * kGBytes;             // [kStages] h
  static constexpr int kParts = kH + kStages * kHBytes;         // f32: g_lo, h_lo; bf16: g_hi, g_lo
  static constexpr int kBytes = kParts + 2 * kPartBytes;
  static constexpr int kAlignSlack = 1024;
  static constexpr int kK = kF32 ? 8 : 16;  // k per wgmma
  // Byte offset of element k (of type E) of row `row` in a K-major operand of 64 rows.
  template <class E>
  __device__ static constexpr int at(int row, int k) {
    return swizzled_offset<N, int(sizeof(E))>(row, k);
  }
  // Where g's element (row, k) lands: f32 straight in the tf32 A operand's layout (the
  // tensor cores read its top 19 bits: the hi part), bf16 in plain rows to be split.
  __device__ static constexpr int g_at(int row, int k) { return kF32 ? at<float>(row, k) : row * K * 4 + k * 4; }
};

// x − (x with its low 13 mantissa bits cleared): what the tensor cores drop reading x as tf32.
__device__ __forceinline__ float4 tf32_remainder(float4 x) {
  const auto lo = [](float y) { return y - __uint_as_float(__float_as_uint(y) & 0xffffe000u); };
  return make_float4(lo(x.x), lo(x.y), lo(x.z), lo(x.w));
}

template <class T>
__global__ void __launch_bounds__(GradLayout<T>::kThreads, GradLayout<T>::kBlocksPerSM)
    grad_wgmma_kernel(const GradParams<T> p, int64_t G) {
  using L = GradLayout<T>;
  constexpr int kHUnit = 16 / int(sizeof(T));  // elements of h a 16-byte copy
  extern __shared__ __align__(16) unsigned char grad_smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(grad_smem_raw) + 1023) &
                                                         ~uintptr_t(1023));
  const int n = p.n, m = p.m, tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int64_t nm = int64_t(n) * m, nn = int64_t(n) * n, items = G * p.T_len;

  // Step `item`'s g and h_{t-1} (h0 or zeros at t = 0) into stage `slot`, one commit group.
  const auto issue = [&](int64_t item, int slot) {
    if (item < items) {
      const int64_t g = item / p.T_len, t = item % p.T_len;
      const float* u = p.u + (g * p.T_len + p.T_len - 1 - t) * nm;
      const T* h = t > 0 ? p.h_saved + (g * p.T_len + t - 1) * nm : (p.h0 ? p.h0 + g * nm : nullptr);
      unsigned char* g_stage = smem + L::kG + slot * L::kGBytes;
#pragma unroll
      for (int q = 0; q < L::N * L::K / 4 / L::kThreads; ++q) {  // 16-byte units of 4 floats
        const int unit = tid + L::kThreads * q, row = unit / (L::K / 4), k = (unit % (L::K / 4)) * 4;
        const bool ok = row < n && k < m;
        copy_async<16>(g_stage + L::g_at(row, k), ok ? u + row * m + k : u, ok);
      }
      unsigned char* h_stage = smem + L::kH + slot * L::kHBytes;
#pragma unroll
      for (int q = 0; q < L::N * L::K / kHUnit / L::kThreads; ++q) {
        const int unit = tid + L::kThreads * q, row = unit / (L::K / kHUnit), k = (unit % (L::K / kHUnit)) * kHUnit;
        const bool ok = h && row < n && k < m;
        copy_async<16>(h_stage + L::template at<T>(row, k), ok ? h + row * m + k : p.h_saved, ok);
      }
    }
    copy_async_commit();
  };
  const int64_t stride = gridDim.x;
  int64_t item = blockIdx.x;
  issue(item, 0);
  issue(item + stride, 1);
  const uint64_t desc = attn::smem_descriptor(smem, 16);
  const auto desc_at = [&](int bytes) { return desc + static_cast<uint64_t>(bytes >> 4); };
  unsigned char* part0 = smem + L::kParts;
  unsigned char* part1 = part0 + L::kPartBytes;
  for (int slot = 0; item < items; item += stride, slot = slot == L::kStages - 1 ? 0 : slot + 1) {
    copy_async_wait<1>();
    __syncthreads();  // step `item` landed; the previous step's products are done everywhere
    issue(item + 2 * stride, slot == 0 ? L::kStages - 1 : slot - 1);
    const int64_t g = item / p.T_len, t = item % p.T_len;
    const unsigned char* g_stage = smem + L::kG + slot * L::kGBytes;
    const int h_at = L::kH + slot * L::kHBytes;
    T* db = p.db + (g * p.T_len + t) * nm;
    if constexpr (L::kF32) {  // db_t = g_t; the remainders of g and h past tf32 (g_lo, h_lo)
#pragma unroll
      for (int q = 0; q < L::N * L::K / 4 / L::kThreads; ++q) {
        const int unit = tid + L::kThreads * q, row = unit / (L::K / 4), k = (unit % (L::K / 4)) * 4;
        const int at = L::template at<float>(row, k);
        const float4 x = *reinterpret_cast<const float4*>(g_stage + at);
        *reinterpret_cast<float4*>(part0 + at) = tf32_remainder(x);
        *reinterpret_cast<float4*>(part1 + at) = tf32_remainder(*reinterpret_cast<const float4*>(smem + h_at + at));
        if (row < n && k < m) *reinterpret_cast<float4*>(db + row * m + k) = x;
      }
    } else {  // g's bf16 parts (hi, lo) as the A operand; db_t = g_t rounded
#pragma unroll
      for (int q = 0; q < L::N * L::K / 8 / L::kThreads; ++q) {
        const int unit = tid + L::kThreads * q, row = unit / (L::K / 8), k = (unit % (L::K / 8)) * 8;
        const float4 x0 = *reinterpret_cast<const float4*>(g_stage + L::g_at(row, k));
        const float4 x1 = *reinterpret_cast<const float4*>(g_stage + L::g_at(row, k) + 16);
        const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        union Unit {
          T elems[8];
          uint4 bits;
        } hi, lo;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          hi.elems[e] = __float2bfloat16_rn(x[e]);
          lo.elems[e] = __float2bfloat16_rn(x[e] - __bfloat162float(hi.elems[e]));
        }
        *reinterpret_cast<uint4*>(part0 + L::template at<T>(row, k)) = hi.bits;
        *reinterpret_cast<uint4*>(part1 + L::template at<T>(row, k)) = lo.bits;
        if (row < n && k < m) *reinterpret_cast<uint4*>(db + row * m + k) = hi.bits;
      }
    }
    fence_async_shared();
    __syncthreads();
    float acc[32];
    attn::wgmma_fence();
    const auto slice = [](int ks) { return L::template at<T>(0, ks * L::kK); };
    if constexpr (L::kF32) {  // three tf32 products a k-slice, small terms first
      using Op = cute::SM90::GMMA::MMA_64x64x8_F32TF32TF32_SS_TN<>;
      const int g_at = L::kG + slot * L::kGBytes;
#pragma unroll
      for (int ks = 0; ks < L::K / L::kK; ++ks) {
        wgmma_ss<Op>(desc_at(L::kParts + slice(ks)), desc_at(h_at + slice(ks)), acc, ks > 0);
        wgmma_ss<Op>(desc_at(g_at + slice(ks)), desc_at(L::kParts + L::kPartBytes + slice(ks)), acc, true);
        wgmma_ss<Op>(desc_at(g_at + slice(ks)), desc_at(h_at + slice(ks)), acc, true);
      }
    } else {  // g's lo part first, then hi, one accumulator
      using Op = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
#pragma unroll
      for (int ks = 0; ks < L::K / L::kK; ++ks)
        wgmma_ss<Op>(desc_at(L::kParts + L::kPartBytes + slice(ks)), desc_at(h_at + slice(ks)), acc, ks > 0);
#pragma unroll
      for (int ks = 0; ks < L::K / L::kK; ++ks)
        wgmma_ss<Op>(desc_at(L::kParts + slice(ks)), desc_at(h_at + slice(ks)), acc, true);
    }
    attn::wgmma_commit();
    attn::wgmma_wait<0>();
    attn::fence_registers(acc);
    // acc[4c + k]: dA at row 16·warp + gid + 8·(k / 2), column 8c + 2·tig + k % 2.
    T* dA = p.dA + (g * p.T_len + t) * nn;
#pragma unroll
    for (int c = 0; c < 8; ++c)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * warp + gid + 8 * half, col = 8 * c + 2 * tig;
        const float x0 = acc[4 * c + 2 * half], x1 = acc[4 * c + 2 * half + 1];
        if (row >= n || col >= n) continue;
        if constexpr (L::kF32) *reinterpret_cast<float2*>(dA + row * n + col) = make_float2(x0, x1);
        else *reinterpret_cast<__nv_bfloat162*>(dA + row * n + col) = __floats2bfloat162_rn(x0, x1);
      }
  }
  copy_async_wait<0>();
}

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER

// dA and db of matrix states on tensor cores when the forward's h is given, n ≤ 64 and
// 8 ≤ m ≤ 64 (m a multiple of 8), the tensors 16-byte aligned; SEQMIX_LINREC_GRADIENT=tiles
// keeps the CUDA cores' kernel (read at every call). Returns false where it does not apply.
template <class T>
bool launch_gradients_on_tensor_cores(const GradParams<T>& p, int64_t G, void* stream) {
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!p.h_saved || p.n > 64 || p.m > 64 || p.m < 8 || p.m % 8 != 0) return false;
  if (!(aligned(p.u) && aligned(p.h_saved) && aligned(p.h0) && aligned(p.db) && aligned(p.dA))) return false;
  if (choice_from_environment<bool>("SEQMIX_LINREC_GRADIENT", {{"tiles", true}}, false)) return false;
  using L = GradLayout<T>;
  constexpr int smem = L::kBytes + L::kAlignSlack;
  check(cudaFuncSetAttribute(grad_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
        "cudaFuncSetAttribute (gradients on tensor cores)");
  const int64_t blocks = std::min<int64_t>(G * p.T_len, int64_t(L::kBlocksPerSM) * multiprocessor_count());
  grad_wgmma_kernel<T><<<static_cast<unsigned>(blocks), L::kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p, G);
  check_launch("linear_recurrence gradients on tensor cores");
  return true;
#else
  (void)p, (void)G, (void)stream;
  return false;
#endif
}

}  // namespace seqmix::cuda::linrec
