// Hopper's copy engine and transaction barriers (sm_90): the few PTX instructions a
// staged kernel needs, wrapped so kernels read as what they do.
//
// A stage of shared memory has two barriers. `full` completes when the copies into the
// stage have landed (one arrival that announces the bytes, then the engine's
// transaction count); `empty` completes when every consuming warp has finished reading
// it (one arrival per warp). Both are waited on by phase parity.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace seqmix::cuda::tma {

__device__ inline uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void barrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}

// Makes initialised barriers visible to the copy engine; then a block barrier.
__device__ inline void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also announces `bytes` of copies to come.
__device__ inline void arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

__device__ inline void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
}

// Waits until the barrier's phase with the given parity has completed. A fresh barrier
// counts its (never run) phase of parity 1 as completed.
__device__ inline void wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Copies the box at coordinates (x, y, z) of a 3-D tensor map into shared memory,
// completing `bytes` (the whole box, out-of-range elements zero-filled) on `bar`.
__device__ inline void load_box(void* dst, const CUtensorMap& map, int x, int y, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(x), "r"(y), "r"(z), "r"(shared_address(bar))
      : "memory");
}

// The same for a 4-D tensor map (coordinates innermost first).
__device__ inline void load_box(void* dst, const CUtensorMap& map, int c0, int c1, int c2, int c3, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(shared_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(shared_address(bar))
      : "memory");
}

// Copies a box from shared memory to the given coordinates of a 3-D tensor map (elements
// past the tensor's bounds are not written), as part of this thread's bulk group.
__device__ inline void store_box(const CUtensorMap& map, const void* src, int x, int y, int z) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(shared_address(src)), "r"(x), "r"(y), "r"(z)
               : "memory");
}

// Copies a box from shared memory to the given coordinates of a 4-D tensor map (elements
// past the tensor's bounds are not written), as part of this thread's bulk group.
__device__ inline void store_box(const CUtensorMap& map, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(shared_address(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// Ends this thread's bulk group of copies out of shared memory.
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// This thread's bulk copies have read their shared memory (it may be rewritten).
__device__ inline void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
// This thread's bulk copies are done.
__device__ inline void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace seqmix::cuda::tma
