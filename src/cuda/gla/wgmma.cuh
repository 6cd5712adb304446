// wgmma (sm_90a) for the GLA backward's value slices, written without CuTe (this folder
// builds without CUTLASS): the m64nNk16 products with fp32 accumulators that the gradient
// kernel needs, N = 16, 32, 64, and their shared-memory operands in wgmma's canonical layout
// without swizzle (CoreTile).
//
// A warpgroup's accumulators have the mma.sync layout (mma.cuh): warp w of the group holds
// rows 16w..16w+15, d[4j..4j+3] the 8-column tile j as mma.sync's c0..c3. An A operand from
// registers has mma.sync's A fragment layout, warp w its rows 16w..16w+15.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/wgmma.cuh"
#include "cuda/gla/mma.cuh"

namespace seqmix::cuda::gla {

// A [rows, kCols] tile of 16-bit elements as wgmma reads it without swizzle: 8 × 8 core
// matrices (8 rows of 16 bytes, 128 bytes together), the kCols / 8 of an 8-row group side
// by side. The 8 rows one ldmatrix phase or one 16-byte-a-lane access of 8 lanes touches
// are one core matrix: no bank conflicts, and no padding.
template <int kCols>
struct CoreTile {
  static_assert(kCols % 8 == 0, "whole core matrices");
  static constexpr int kGroupElements = 8 * kCols;  // between 8-row groups
  static constexpr int kGroupBytes = 2 * kGroupElements;
  __host__ __device__ static constexpr int offset(int row, int col) {
    return (row / 8) * kGroupElements + (col / 8) * 64 + (row % 8) * 8 + col % 8;
  }
};

// A CoreTile in shared memory as wgmma descriptors (no swizzle) of its parts: the tile's start in
// the descriptors' 16-byte units, so that each descriptor is one add of a constant to it
// (shared addresses stay below 2^18 bytes: the 14-bit field never carries).
template <int kCols>
struct CoreOperand {
  uint32_t unit;
  __device__ explicit CoreOperand(const void* tile) : unit(smem_address(tile) >> 4) {}
  // From (row, col) on, columns along K and rows along M or N (K-major).
  __device__ uint64_t k_major(int row, int col) const { return descriptor(row, col, 128, kGroupBytes); }
  // From (row, col) on, rows along K and columns along N (an MN-major B).
  __device__ uint64_t n_major(int row, int col) const { return descriptor(row, col, kGroupBytes, 128); }

 private:
  static constexpr uint32_t kGroupBytes = CoreTile<kCols>::kGroupBytes;
  // `leading` bytes between core matrices along K, `stride` along M or N; layout type 0.
  __device__ uint64_t descriptor(int row, int col, uint32_t leading, uint32_t stride) const {
    const uint32_t low = unit + static_cast<uint32_t>(CoreTile<kCols>::offset(row, col) * 2 / 16) + ((leading / 16) << 16);
    return (static_cast<uint64_t>(stride / 16) << 32) | low;
  }
};

// d (+)= A·B for a 64 × N × 16 step. ss: A and B from descriptors (A K-major; B K-major, or
// MN-major with kBTransposed); rs: A from registers. accumulate = false overwrites d.
template <class E, int N>
struct Wgmma;
// One specialization: E and its PTX type T, the N/2 accumulators' operand list D and the
// operand numbers that follow them (A's registers, then descriptors, the accumulate flag
// and the transpose immediate).
#define SEQMIX_GLA_WGMMA(E, T, N, D_REGS, D_OPERANDS, A_REGS, SS_AB, SS_P, SS_TB, RS_B, RS_P, RS_TB)            \
  template <>                                                                                                \
  struct Wgmma<E, N> {                                                                                       \
    template <int kBTransposed>                                                                              \
    __device__ __forceinline__ static void ss(float (&d)[N / 2], uint64_t a, uint64_t b, bool accumulate) {   \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SS_P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N      \
                   "k16.f32." T "." T " " D_REGS ", " SS_AB ", p, 1, 1, 0, " SS_TB ";\n}\n"                    \
                   : D_OPERANDS                                                                              \
                   : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kBTransposed));                  \
    }                                                                                                        \
    template <int kBTransposed>                                                                              \
    __device__ __forceinline__ static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b,         \
                                              bool accumulate) {                                             \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " RS_P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N      \
                   "k16.f32." T "." T " " D_REGS ", " A_REGS ", " RS_B ", p, 1, 1, " RS_TB ";\n}\n"            \
                   : D_OPERANDS                                                                              \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),  \
                     "n"(kBTransposed));                                                                     \
    }                                                                                                        \
  };
#define SEQMIX_GLA_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define SEQMIX_GLA_D32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define SEQMIX_GLA_D64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
SEQMIX_GLA_WGMMA(__nv_bfloat16, "bf16", 16, "{%0, %1, %2, %3, %4, %5, %6, %7}", SEQMIX_GLA_D16, "{%8, %9, %10, %11}", "%8, %9", "%10", "%11", "%12", "%13", "%14")
SEQMIX_GLA_WGMMA(__nv_bfloat16, "bf16", 32, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}", SEQMIX_GLA_D32, "{%16, %17, %18, %19}", "%16, %17", "%18", "%19", "%20", "%21", "%22")
SEQMIX_GLA_WGMMA(__nv_bfloat16, "bf16", 64, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}", SEQMIX_GLA_D64, "{%32, %33, %34, %35}", "%32, %33", "%34", "%35", "%36", "%37", "%38")
SEQMIX_GLA_WGMMA(__half, "f16", 16, "{%0, %1, %2, %3, %4, %5, %6, %7}", SEQMIX_GLA_D16, "{%8, %9, %10, %11}", "%8, %9", "%10", "%11", "%12", "%13", "%14")
SEQMIX_GLA_WGMMA(__half, "f16", 32, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}", SEQMIX_GLA_D32, "{%16, %17, %18, %19}", "%16, %17", "%18", "%19", "%20", "%21", "%22")
SEQMIX_GLA_WGMMA(__half, "f16", 64, "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}", SEQMIX_GLA_D64, "{%32, %33, %34, %35}", "%32, %33", "%34", "%35", "%36", "%37", "%38")
#undef SEQMIX_GLA_WGMMA
#undef SEQMIX_GLA_D16
#undef SEQMIX_GLA_D32
#undef SEQMIX_GLA_D64

}  // namespace seqmix::cuda::gla
