// Warp-specialized kernels' building blocks (sm_90): named barriers among some of a block's
// warps, and register reallocation between warpgroups. Barrier 0 is __syncthreads; a kernel
// names the others and the threads that take each.
#pragma once

#include <cstdint>

namespace seqmix::cuda {

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// named_barrier_sync that also returns whether any of its threads passed `x`.
__device__ __forceinline__ bool named_barrier_any(int id, int threads, bool x) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(x)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// A warpgroup gives up registers down to kRegisters a thread, or claims them up to it.
template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

}  // namespace seqmix::cuda
