// The warpgroup-level pieces of wgmma (sm_90a) that every kernel using it shares: the
// descriptor of a shared-memory operand in 128-byte swizzled atoms, the fence before a
// product reads registers other instructions wrote, the commit and wait of a group of
// products, and compiler barriers on accumulators. The attention kernels take the product
// instructions from CuTe's atoms (attention/sm90.cuh); the GLA kernels, built without
// CUTLASS, write the shapes they use themselves (gla/wgmma.cuh).
#pragma once

#include <cstdint>

#include "cuda/common/tma.cuh"

namespace seqmix::cuda {

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

}  // namespace seqmix::cuda
