// The warpgroup-level basics of wgmma (sm_90a) that need no CuTe: the fence before a
// product reads registers other instructions wrote, the commit and wait of a group of
// products, and a compiler barrier on accumulators. The attention kernels take the
// instructions themselves from CuTe's atoms (attention/sm90.cuh); the GLA backward, built
// without CUTLASS, writes its few shapes itself (gla/wgmma.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

namespace seqmix::cuda {

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

// The same for a two-dimensional array of accumulators (float) or fragments (uint32_t).
template <class T, int N, int M>
__device__ __forceinline__ void fence_registers(T (&r)[N][M]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint32_t>, "32-bit registers");
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) {
      if constexpr (std::is_same_v<T, float>) asm volatile("" : "+f"(r[i][j])::"memory");
      else asm volatile("" : "+r"(r[i][j])::"memory");
    }
}

}  // namespace seqmix::cuda
