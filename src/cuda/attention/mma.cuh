// Warp-level tensor-core pieces for the backward kernels: mma.sync m16n8k16 with fp32
// accumulators, ldmatrix loads of its fragments from padded shared-memory tiles, and the
// accumulator -> A-operand conversion. Fragment layouts (g = lane / 4, t = lane % 4):
//   A 16x16: regs (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)
//   B 16x8:  regs (k 2t..2t+1, n g), (k 2t+8.., n g)
//   C 16x8:  c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attention/sm90.cuh"

namespace seqmix::cuda::attn {

template <class T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tma::shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(tma::shared_address(row)));
}

// A tile in shared memory: rows of `stride` elements (the row length plus 8 elements of
// padding, so the 8 rows one ldmatrix reads fall in different banks).
template <class T>
struct SmemTile {
  T* data;
  int stride;
  __device__ const T* at(int row, int col) const { return data + row * stride + col; }
};

// A fragment of the 16x16 block at (row0, col0) of a row-major tile.
template <class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const SmemTile<T>& t, int row0, int col0, int lane) {
  ldmatrix_x4(a, t.at(row0 + (lane % 8) + ((lane / 8) % 2) * 8, col0 + (lane / 16) * 8));
}

// B fragments of two n8 tiles (n0..n0+15) × k16 from a tile stored as Bᵀ: rows n, k contiguous.
// b[0], b[1]: n-tile n0; b[2], b[3]: n-tile n0 + 8.
template <class T>
__device__ __forceinline__ void load_b_rows_n(uint32_t (&b)[4], const SmemTile<T>& t, int n0, int k0, int lane) {
  ldmatrix_x4(b, t.at(n0 + (lane % 8) + (lane / 16) * 8, k0 + ((lane / 8) % 2) * 8));
}

// The same fragments from a tile stored as B: rows k, n contiguous (transposing load).
template <class T>
__device__ __forceinline__ void load_b_rows_k(uint32_t (&b)[4], const SmemTile<T>& t, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, t.at(k0 + (lane % 8) + ((lane / 8) % 2) * 8, n0 + (lane / 16) * 8));
}

// Accumulators of n8 tiles 2j and 2j+1 (16 x 16) as the A fragment of k-step j.
template <class T, int kTiles>
__device__ __forceinline__ void accumulator_to_a(uint32_t (&a)[4], const float (&c)[kTiles][4], int j) {
  a[0] = pack2<T>(c[2 * j][0], c[2 * j][1]);
  a[1] = pack2<T>(c[2 * j][2], c[2 * j][3]);
  a[2] = pack2<T>(c[2 * j + 1][0], c[2 * j + 1][1]);
  a[3] = pack2<T>(c[2 * j + 1][2], c[2 * j + 1][3]);
}

}  // namespace seqmix::cuda::attn
