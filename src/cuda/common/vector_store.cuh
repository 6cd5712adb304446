// 16 bytes to a 16-byte aligned global address in one store instruction.
//
// Written as a uint4 assignment from values built in registers (bf16 pairs packed through a
// local array or make_uint4), the chains' narrow kernels' 16-byte stores compiled to four
// 4-byte stores (ptx st.global.u32 ×4), a lane writing a quarter of its piece of a row per
// instruction; the inline ptx leaves the compiler no choice. (The norm-gate backward's
// stores split the same way, and making them one store measured the same there:
// src/cuda/chains/NOTES.md.)
#pragma once

#include <cstdint>

namespace seqmix::cuda {

__device__ __forceinline__ void store_global_16(void* at, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(at), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

}  // namespace seqmix::cuda
