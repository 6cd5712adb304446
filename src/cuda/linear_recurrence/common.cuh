// Small device helpers shared by the linear-recurrence kernels: element conversion,
// asynchronous copies into shared memory, and the workspace layout.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/linear_recurrence/params.hpp"

namespace seqmix::cuda::linrec {

inline constexpr int kThreads = 256;

template <RecurrenceDtype d>
struct ElementOf;
template <>
struct ElementOf<RecurrenceDtype::f32> {
  using type = float;
};
template <>
struct ElementOf<RecurrenceDtype::bf16> {
  using type = __nv_bfloat16;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Σ_k unit[k]·x[k] over one 16-byte unit of T (4 f32 or 8 bf16), x 16-byte aligned.
__device__ __forceinline__ float dot_unit(const float* unit, const float* x) {
  const float4 a = *reinterpret_cast<const float4*>(unit), v = *reinterpret_cast<const float4*>(x);
  return a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
}
__device__ __forceinline__ float dot_unit(const __nv_bfloat16* unit, const float* x) {
  const uint4 raw = *reinterpret_cast<const uint4*>(unit);
  const float4 v0 = *reinterpret_cast<const float4*>(x), v1 = *reinterpret_cast<const float4*>(x + 4);
  const float2 a0 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 a1 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  const float2 a2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.z));
  const float2 a3 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.w));
  return a0.x * v0.x + a0.y * v0.y + a1.x * v0.z + a1.y * v0.w + a2.x * v1.x + a2.y * v1.y + a3.x * v1.z + a3.y * v1.w;
}

// The 16-byte unit of row `row` of the n×n identity (zero past n) that starts at column col.
template <class T>
__device__ __forceinline__ uint4 identity_unit(int row, int col, int n) {
  constexpr int U = 16 / int(sizeof(T));
  union {
    T elems[U];
    uint4 bits;
  } unit;
#pragma unroll
  for (int e = 0; e < U; ++e) unit.elems[e] = from_float<T>(row == col + e && row < n ? 1.f : 0.f);
  return unit.bits;
}

// Copies `bytes` (4, 8 or 16) from global to shared memory without passing through
// registers; `valid` false writes zeros and reads nothing.
template <int bytes>
__device__ __forceinline__ void copy_async(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? bytes : 0;
  if constexpr (bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(bytes),
                 "r"(src_bytes));
  }
}
// v itself, but opaque to the compiler: what is formed from it is formed again at each use
// instead of being hoisted out of the step loop and held in registers across it (the copies'
// per-thread offsets, which the step's products need the registers for).
__device__ __forceinline__ int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// A thread's 16-byte units when kThreads threads copy rows of kUnitsPerRow units: they share a
// column (unit `unit` of their rows) and step by kRowStep rows from row0, so a copy loop takes
// one offset and a step, not a row and column formed from each unit's index (a signed division
// and a multiply a unit; NOTES.md version 22). The thread index goes through `opaque`.
template <int kThreads, int kUnitsPerRow>
struct ThreadUnits {
  static constexpr int kRowStep = kThreads / kUnitsPerRow;
  static_assert(kThreads % kUnitsPerRow == 0, "a thread's units in one column");
  int row0, unit;
  __device__ explicit ThreadUnits(int tid) {
    const auto thread = static_cast<unsigned>(opaque(tid));
    row0 = static_cast<int>(thread / kUnitsPerRow);
    unit = static_cast<int>(thread % kUnitsPerRow);
  }
};

__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int pending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Byte offset of element k (of `element_bytes` bytes) of row `row` in a K-major wgmma
// operand of `rows` rows kept in 128-byte swizzled atoms: 128 bytes of a row per K part,
// the rows of a part one after another (8 rows: one 1024-byte atom), the 16-byte unit u of
// a row at (u XOR row) mod 8 (the hardware's 128-byte swizzle).
template <int rows, int element_bytes>
__host__ __device__ constexpr int swizzled_offset(int row, int k) {
  const int byte = k * element_bytes;
  return (byte / 128) * (rows * 128) + row * 128 + ((((byte % 128) / 16) ^ (row % 8)) * 16) + byte % 16;
}

// Where the parallel methods keep their float copies (params.hpp sizes it). Per group:
// maps [T, n, n] and states [T, n, m] (the offsets of the maps, which become the states
// in place); `start` [n, m] is the state before step 0.
struct Workspace {
  float* maps;        // [G, T, n, n]
  float* forward;     // [G, T, n, m] states of the forward chain
  float* reverse;     // [G, T, n, m] states of the reverse-time chain (backward only)
  float* start;       // [G, n, m]
  float* extra;       // method-specific: chunk starts, or the scan's second buffers
};

inline Workspace carve(float* base, const LinearRecurrenceParams& p, bool backward) {
  const int64_t maps = p.G * p.T * p.n * p.n, states = p.G * p.T * p.n * p.m;
  Workspace w{};
  w.maps = base;
  w.forward = w.maps + maps;
  w.reverse = backward ? w.forward + states : nullptr;
  w.start = w.forward + (backward ? 2 : 1) * states;
  w.extra = w.start + p.G * p.n * p.m;
  return w;
}

}  // namespace seqmix::cuda::linrec
