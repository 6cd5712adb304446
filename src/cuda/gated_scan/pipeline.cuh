// A multi-stage copy pipeline for the scan tiles. Each thread copies its own 8-byte
// vectors of the next tiles into shared memory with cp.async (kStages − 1 tiles in flight)
// and reads them back itself, so no barrier is needed between copy and use: the data
// waits in shared memory instead of registers, and more bytes are in flight per SM than
// registers could hold. Vectors that are masked (past the sequence), partial (past D) or
// unaligned skip the pipeline and are loaded directly when used.
#pragma once

#include "cuda/gated_scan/tile.cuh"

namespace seqmix::cuda::scan {

// The [B, T, D] inputs a pass may read, as bits of Pipeline::operands.
enum Operand : unsigned { kOperandA = 1, kOperandB = 2, kOperandZ = 4, kOperandDy = 8 };
constexpr int kStages = 4;

__device__ inline void cp_async_8(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(address), "l"(global));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// The block's dynamic shared memory, as an array of T.
template <class T>
__device__ T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char dynamic_shared_memory[];
  return reinterpret_cast<T*>(dynamic_shared_memory);
}

// Bytes of dynamic shared memory for a pipeline of `operands` inputs.
template <class T>
constexpr int pipeline_bytes(int operands) {
  return kStages * operands * kSteps * kThreads * static_cast<int>(sizeof(typename Pack<T>::Raw));
}

template <class T>
struct Pipeline {
  using Raw = typename Pack<T>::Raw;
  static constexpr int kVec = Pack<T>::kVec;

  Raw* memory;         // [kStages][operands][kSteps][kThreads]
  unsigned operands;   // the Operand bits this walk reads
  int64_t first, step, count;  // the walk: tiles first, first + step, ... (count of them)

  __device__ int slot_of(Operand op) const { return __popc(operands & (static_cast<unsigned>(op) - 1)); }
  __device__ Raw* slot(int stage, Operand op, int s) const {
    return memory + ((stage * __popc(operands) + slot_of(op)) * kSteps + s) * kThreads + threadIdx.x;
  }
  __device__ static const BtdView& view(const GatedScanParams& p, Operand op) {
    return op == kOperandA ? p.a : op == kOperandB ? p.b : op == kOperandZ ? p.z : p.dy;
  }
  __device__ static bool pipelined(const GatedScanParams& p, const BlockCoords& c, int64_t t) {
    return t < c.length && p.vector_aligned && c.d0 + kVec <= p.D;
  }

  // Issues the copies of walk position `index` (none past the walk) as one group.
  __device__ void issue(const GatedScanParams& p, const BlockCoords& c, int64_t index) const {
    if (index < count) {
      const int64_t tile = first + index * step;
#pragma unroll
      for (unsigned bit = 1; bit <= kOperandDy; bit <<= 1) {
        if (!(operands & bit)) continue;
        const Operand op = static_cast<Operand>(bit);
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
          const int64_t t = c.step(tile, s);
          if (pipelined(p, c, t)) cp_async_8(slot(static_cast<int>(index % kStages), op, s), row_ptr<T>(view(p, op), c, t) + c.d0);
        }
      }
    }
    cp_async_commit();  // empty groups too, so that the wait below counts positions
  }
  __device__ void start(const GatedScanParams& p, const BlockCoords& c) const {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) issue(p, c, i);
  }
  // Makes walk position `index` readable and puts position index + kStages − 1 in flight.
  __device__ void arrive(const GatedScanParams& p, const BlockCoords& c, int64_t index) const {
    issue(p, c, index + kStages - 1);
    cp_async_wait<kStages - 1>();
  }
  // The thread's vector of `op` at step s of walk position `index`; `fill` where masked.
  __device__ Pack<T> fetch(const GatedScanParams& p, const BlockCoords& c, int64_t index, Operand op, int s,
                           float fill) const {
    const int64_t t = c.step(first + index * step, s);
    Pack<T> v;
    if (pipelined(p, c, t)) {
      v.raw = *slot(static_cast<int>(index % kStages), op, s);
      return v;
    }
    return scan::load<T>(view(p, op), c, t, p.D, p.vector_aligned, fill);
  }
  // Waits for every copy in flight (before the memory serves another walk).
  __device__ static void drain() { cp_async_wait<0>(); }
};

}  // namespace seqmix::cuda::scan
