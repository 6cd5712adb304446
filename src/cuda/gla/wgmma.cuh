// wgmma (sm_90a) for the GLA kernels, written without CuTe (this folder builds without CUTLASS):
// the bf16 products with A in registers and B MN-major in shared memory that the pipelined
// outputs pass's state side takes (forward_pipelined.cuh), and the tile layout of B.
//
// A warpgroup's accumulators have the mma.sync layout (mma.cuh): warp w of the group holds
// rows 16w..16w+15, d[4j..4j+3] the 8-column tile j as mma.sync's c0..c3.
#pragma once

#include <cstdint>

#include "cuda/common/wgmma.cuh"

namespace seqmix::cuda::gla {

// A [kRows, kCols] tile of 16-bit elements in wgmma's 128-byte swizzled atoms: column blocks of
// 64 (128-byte rows) one after the other, each [kRows, 64]; inside a row, the 16-byte unit u
// of columns 8u..8u+7 sits at unit u ^ (row % 8). The tile must start at a multiple of 1024
// bytes. 16-byte pieces and a warp's 4-byte stores of 8 rows × 4 column pairs fall in distinct
// banks.
template <int kRows, int kCols>
struct SwizzledTile {
  static_assert(kCols % 64 == 0 && kRows % 8 == 0, "whole atoms");
  static constexpr int kBlockElements = kRows * 64;  // one column block
  static constexpr int kElements = kRows * kCols;
  __host__ __device__ static constexpr int offset(int row, int col) {
    return (col / 64) * kBlockElements + row * 64 + (((col % 64) / 8) ^ (row % 8)) * 8 + col % 8;
  }
  // The descriptor of rows [row0, row0 + 16) × columns from col0 read MN-major (the columns along
  // N, the rows along K): row0 a multiple of 8, col0 of 64.
  template <class E>
  __device__ static uint64_t mn_major(const E* tile, int row0, int col0) {
    return smem_descriptor(tile + offset(row0, col0), 2 * kBlockElements);
  }
};

// d[32] += A (64 × 16 in registers: warp w's rows 16w..16w+15 as mma.sync's A fragment) ·
// B (16 × 64, MN-major in shared memory, by descriptor).
__device__ __forceinline__ void wgmma_rs_m64n64(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
            "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
            "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// d[64] += A (64 × 16 in registers: warp w's rows 16w..16w+15 as mma.sync's A fragment) ·
// B (16 × 128, MN-major in shared memory, by descriptor).
__device__ __forceinline__ void wgmma_rs_m64n128(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
            "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
            "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
            "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
            "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
            "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
            "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

}  // namespace seqmix::cuda::gla
