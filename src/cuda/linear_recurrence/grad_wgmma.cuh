// The backward's gradient products on tensor cores for bf16 matrix states given the
// forward's h: dA_t = g_t·h_{t-1}ᵀ and db_t = g_t, n ≤ 64 and m ≤ 64 padded to 64 (NOTES.md,
// version 15). The CUDA cores' tiled kernel (io.cuh grad_kernel) spends ~3.5 ms of the
// 6.2 ms backward at G16 T4096 n64 m64 bf16, on 64×64×64 products done as 4×4 register
// tiles; their bytes (g in f32, h, dA and db) take ~0.9 ms at the copy rate.
//
// One warpgroup a block, blocks striding over the G·T steps, a ring of three stages (g as
// f32, h_{t-1} as the B operand, both by cp.async, two steps ahead). Per step: the threads
// turn g into bf16 hi and lo parts (the A operand: g·hᵀ = g_hi·hᵀ + g_lo·hᵀ keeps g's float
// accuracy to ~2⁻¹⁷, h being exact in bf16) and write db from it, then 8 wgmma m64n64k16
// form dA, stored from the accumulators.
#pragma once

#include <algorithm>
#include <type_traits>

#include "cuda/common/environment.hpp"
#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/chunk_transfer.cuh"
#include "cuda/linear_recurrence/io.cuh"

namespace seqmix::cuda::linrec {

#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)

struct GradLayout {
  static constexpr int N = 64, K = 64, kThreads = 128, kStages = 3;
  static constexpr int kGBytes = N * K * 4;            // g_t as f32, rows of 256 bytes
  static constexpr int kOperandBytes = N * K * 2;       // a bf16 operand, 128-byte swizzled rows
  static constexpr int kG = 0;                          // [kStages] g
  static constexpr int kH = kG + kStages * kGBytes;     // [kStages] h_{t-1} (B operand)
  static constexpr int kA = kH + kStages * kOperandBytes;  // g's hi and lo parts (A operand)
  static constexpr int kBytes = kA + 2 * kOperandBytes;
  static constexpr int kAlignSlack = 1024;
  // Byte offset of bf16 element k of row `row` of a swizzled operand (WalkLayout's form).
  __device__ static constexpr int at(int row, int k) { return row * 128 + ((((k * 2) / 16) ^ (row % 8)) * 16) + (k * 2) % 16; }
};

// acc (= or +=) A·B, both K-major in shared memory, one warpgroup, m64n64.
template <class Op, int... I>
__device__ __forceinline__ void grad_wgmma(uint64_t a, uint64_t b, float (&acc)[32], bool accumulate,
                                           std::integer_sequence<int, I...>) {
  Op::fma(a, b, acc[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

template <class T>
__global__ void __launch_bounds__(GradLayout::kThreads, 2) grad_wgmma_kernel(const GradParams<T> p, int64_t G) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "bf16 operands");
  using L = GradLayout;
  using Op = cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>;
  constexpr auto kAcc = std::make_integer_sequence<int, 32>{};
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
        copy_async<16>(g_stage + row * L::K * 4 + k * 4, ok ? u + row * m + k : u, ok);
      }
      unsigned char* h_stage = smem + L::kH + slot * L::kOperandBytes;
#pragma unroll
      for (int q = 0; q < L::N * L::K / 8 / L::kThreads; ++q) {  // 16-byte units of 8 bf16
        const int unit = tid + L::kThreads * q, row = unit / (L::K / 8), k = (unit % (L::K / 8)) * 8;
        const bool ok = h && row < n && k < m;
        copy_async<16>(h_stage + L::at(row, k), ok ? h + row * m + k : p.h_saved, ok);
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
  unsigned char* a_hi = smem + L::kA;
  unsigned char* a_lo = a_hi + L::kOperandBytes;
  for (int slot = 0; item < items; item += stride, slot = slot == L::kStages - 1 ? 0 : slot + 1) {
    copy_async_wait<1>();
    __syncthreads();  // step `item` landed; the previous step's products are done everywhere
    issue(item + 2 * stride, slot == 0 ? L::kStages - 1 : slot - 1);
    const int64_t g = item / p.T_len, t = item % p.T_len;
    // g's parts into the A operand, and db_t = g_t.
    const unsigned char* g_stage = smem + L::kG + slot * L::kGBytes;
    T* db = p.db + (g * p.T_len + t) * nm;
#pragma unroll
    for (int q = 0; q < L::N * L::K / 8 / L::kThreads; ++q) {
      const int unit = tid + L::kThreads * q, row = unit / (L::K / 8), k = (unit % (L::K / 8)) * 8;
      const float4 x0 = *reinterpret_cast<const float4*>(g_stage + row * L::K * 4 + k * 4);
      const float4 x1 = *reinterpret_cast<const float4*>(g_stage + row * L::K * 4 + k * 4 + 16);
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
      *reinterpret_cast<uint4*>(a_hi + L::at(row, k)) = hi.bits;
      *reinterpret_cast<uint4*>(a_lo + L::at(row, k)) = lo.bits;
      if (row < n && k < m) *reinterpret_cast<uint4*>(db + row * m + k) = hi.bits;  // db in bf16: g rounded
    }
    fence_async_shared();
    __syncthreads();
    float acc[32];
    attn::wgmma_fence();
    const int h_at = L::kH + slot * L::kOperandBytes;
#pragma unroll
    for (int ks = 0; ks < L::K / 16; ++ks)  // lo parts first, then hi, one accumulator
      grad_wgmma<Op>(desc_at(L::kA + L::kOperandBytes + ks * 32), desc_at(h_at + ks * 32), acc, ks > 0, kAcc);
#pragma unroll
    for (int ks = 0; ks < L::K / 16; ++ks)
      grad_wgmma<Op>(desc_at(L::kA + ks * 32), desc_at(h_at + ks * 32), acc, true, kAcc);
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
        if (row < n && col < n)
          *reinterpret_cast<__nv_bfloat162*>(dA + row * n + col) =
              __floats2bfloat162_rn(acc[4 * c + 2 * half], acc[4 * c + 2 * half + 1]);
      }
  }
  copy_async_wait<0>();
}

#endif  // SEQMIX_LINREC_WGMMA_TRANSFER

// dA and db of bf16 matrix states on tensor cores when the forward's h is given, n ≤ 64
// and 8 ≤ m ≤ 64 (m a multiple of 8), the tensors 16-byte aligned; SEQMIX_LINREC_GRADIENT=tiles
// keeps the CUDA cores' kernel (read at every call). Returns false where it does not apply
// (f32 always).
template <class T>
bool launch_gradients_on_tensor_cores(const GradParams<T>& p, int64_t G, void* stream) {
#if defined(SEQMIX_LINREC_WGMMA_TRANSFER)
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    if (!p.h_saved || p.n > 64 || p.m > 64 || p.m < 8 || p.m % 8 != 0) return false;
    if (!(aligned(p.u) && aligned(p.h_saved) && aligned(p.h0) && aligned(p.db) && aligned(p.dA))) return false;
    if (choice_from_environment<bool>("SEQMIX_LINREC_GRADIENT", {{"tiles", true}}, false)) return false;
    constexpr int smem = GradLayout::kBytes + GradLayout::kAlignSlack;
    check(cudaFuncSetAttribute(grad_wgmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "cudaFuncSetAttribute (gradients on tensor cores)");
    int device = 0, sms = 132;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    const int64_t blocks = std::min<int64_t>(G * p.T_len, 2 * sms);
    grad_wgmma_kernel<T><<<static_cast<unsigned>(blocks), GradLayout::kThreads, smem,
                           static_cast<cudaStream_t>(stream)>>>(p, G);
    check_launch("linear_recurrence gradients on tensor cores");
    return true;
  }
#endif
  (void)p, (void)G, (void)stream;
  return false;
}

}  // namespace seqmix::cuda::linrec
