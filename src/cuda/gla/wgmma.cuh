// wgmma (sm_90a) for the GLA forward's state update, written without CuTe (this folder builds
// without CUTLASS): the m64n64k16 product with fp32 accumulators and both operands in shared
// memory, each K-major or MN-major, and the tile layout those operands live in.
//
// A warpgroup's accumulators have the mma.sync layout (mma.cuh): warp w of the group holds
// rows 16w..16w+15, d[4j..4j+3] the 8-column tile j as mma.sync's c0..c3.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/wgmma.cuh"

namespace seqmix::cuda::gla {

// A [kRows, kCols] tile of 16-bit elements in wgmma's 128-byte swizzled atoms: column blocks of
// 64 (128-byte rows) one after the other, each [kRows, 64]; inside a row, the 16-byte unit u
// of columns 8u..8u+7 sits at unit u ^ (row % 8). The tile must start at a multiple of 1024
// bytes. 16-byte pieces, ldmatrix rows and a warp's 4-byte accesses along one row (64
// columns) all fall in distinct banks.
template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "whole atoms");
  static constexpr int kBlockElements = kRows * 64;  // one column block
  __host__ __device__ static constexpr int offset(int row, int col) {
    return (col / 64) * kBlockElements + row * 64 + (((col % 64) / 8) ^ (row % 8)) * 8 + col % 8;
  }
  // The descriptor of rows [row0, row0 + 16) × columns [col0, col0 + 64) read MN-major (the
  // columns along M or N, the rows along K): row0 a multiple of 8, col0 of 64.
  template <class E>
  __device__ static uint64_t mn_major(const E* tile, int row0, int col0) {
    return smem_descriptor(tile + offset(row0, col0), 2 * kBlockElements);
  }
};

// d += A·B for a 64 × 64 × 16 step, A and B from descriptors; kTransposeA / kTransposeB: 0
// for a K-major operand, 1 for an MN-major one.
template <class E>
struct Wgmma64;

#define SEQMIX_GLA_WGMMA64(E, T)                                                                               \
  template <>                                                                                                 \
  struct Wgmma64<E> {                                                                                         \
    template <int kTransposeA, int kTransposeB>                                                               \
    __device__ __forceinline__ static void ss(float (&d)[32], uint64_t a, uint64_t b) {                       \
      asm volatile(                                                                                           \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                        \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T                                               \
          " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
          "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"        \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),          \
            "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),        \
            "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),        \
            "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                             \
          : "l"(a), "l"(b), "r"(1), "n"(kTransposeA), "n"(kTransposeB));                                              \
    }                                                                                                         \
  };
SEQMIX_GLA_WGMMA64(__nv_bfloat16, "bf16")
SEQMIX_GLA_WGMMA64(__half, "f16")
#undef SEQMIX_GLA_WGMMA64

}  // namespace seqmix::cuda::gla
