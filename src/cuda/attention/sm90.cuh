// Hopper building blocks for the attention kernels (beside cuda/common/tma.cuh, and
// cuda/common/warp_roles.cuh for named barriers and register reallocation): wgmma shared-memory
// descriptors and calls, tensor-map prefetch. Thin PTX wrappers; the wgmma instructions
// themselves come from CuTe's atoms (cute/arch/mma_sm90_gmma.hpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>  // N = 112 and 176 (not powers of two)

#include "cuda/common/tma.cuh"
#include "cuda/common/warp_roles.cuh"

namespace seqmix::cuda::attn {

// mbarriers and TMA box loads: cuda/common/tma.cuh.

__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// --- wgmma -----------------------------------------------------------------------------

// Descriptor of a shared-memory operand stored in 128-byte swizzled atoms (what TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B): rows of 128 bytes, 8-row groups 1024 bytes
// apart (stride offset). `leading` is the byte distance between 64-element column chunks
// for MN-major operands; K-major operands never cross a chunk within one instruction.
__device__ __forceinline__ uint64_t smem_descriptor(const void* p, uint32_t leading_bytes) {
  const uint32_t addr = tma::shared_address(p);
  uint64_t desc = (addr & 0x3FFFF) >> 4;
  desc |= static_cast<uint64_t>((leading_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= 1ull << 62;  // 128-byte swizzle
  return desc;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulators across a wgmma wait.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N, int M>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// The m64nNk16 instructions for element type T: SS (A and B K-major in shared memory)
// and RS (A in registers, B MN-major in shared memory).
template <class T, int N>
struct Gmma;

#define SEQMIX_ATTN_GMMA(TYPE, TAG, N)                                                                      \
  template <>                                                                                              \
  struct Gmma<TYPE, N> {                                                                                   \
    using SS = cute::SM90::GMMA::MMA_64x##N##x16_F32##TAG##TAG##_SS<cute::SM90::GMMA::Major::K,            \
                                                                     cute::SM90::GMMA::Major::K>;          \
    using RS = cute::SM90::GMMA::MMA_64x##N##x16_F32##TAG##TAG##_RS<cute::SM90::GMMA::Major::K,            \
                                                                     cute::SM90::GMMA::Major::MN>;         \
  };
SEQMIX_ATTN_GMMA(__nv_bfloat16, BF16, 64)
SEQMIX_ATTN_GMMA(__nv_bfloat16, BF16, 112)
SEQMIX_ATTN_GMMA(__nv_bfloat16, BF16, 128)
SEQMIX_ATTN_GMMA(__nv_bfloat16, BF16, 176)
SEQMIX_ATTN_GMMA(__nv_bfloat16, BF16, 256)
SEQMIX_ATTN_GMMA(__half, F16, 64)
SEQMIX_ATTN_GMMA(__half, F16, 112)
SEQMIX_ATTN_GMMA(__half, F16, 128)
SEQMIX_ATTN_GMMA(__half, F16, 176)
SEQMIX_ATTN_GMMA(__half, F16, 256)
#undef SEQMIX_ATTN_GMMA

template <class Op, int... I>
__device__ __forceinline__ void gmma_ss_impl(uint64_t a, uint64_t b, float* d, bool accumulate,
                                             std::integer_sequence<int, I...>) {
  Op::fma(a, b, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}
template <class Op, int... I>
__device__ __forceinline__ void gmma_rs_impl(const uint32_t (&a)[4], uint64_t b, float* d,
                                             std::integer_sequence<int, I...>) {
  Op::fma(a[0], a[1], a[2], a[3], b, d[I]..., cute::SM90::GMMA::ScaleOut::One);
}

// d[N/2] (+)= A(64x16, smem) · B(Nx16, smem)ᵀ
template <class T, int N>
__device__ __forceinline__ void gmma_ss(uint64_t a, uint64_t b, float (&d)[N / 2], bool accumulate) {
  gmma_ss_impl<typename Gmma<T, N>::SS>(a, b, d, accumulate, std::make_integer_sequence<int, N / 2>{});
}
// d[N/2] += A(64x16, registers) · B(16xN, smem)
template <class T, int N>
__device__ __forceinline__ void gmma_rs(const uint32_t (&a)[4], uint64_t b, float (&d)[N / 2]) {
  gmma_rs_impl<typename Gmma<T, N>::RS>(a, b, d, std::make_integer_sequence<int, N / 2>{});
}

// Two floats as one register of two 16-bit values (the lower column first).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The inverse of pack2.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t packed);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t packed) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&packed));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t packed) {
  return __half22float2(*reinterpret_cast<const __half2*>(&packed));
}

}  // namespace seqmix::cuda::attn
