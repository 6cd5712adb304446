// Warp-level building blocks of the GLA kernels: 16-byte asynchronous copies into shared
// memory, ldmatrix fragment loads and the m16n8k16 tensor-core product (fp32 accumulate).
//
// Fragment layouts (PTX ISA, mma.m16n8k16), with g = lane / 4 and t = lane % 4:
//   A (16×16):  a0 = (row g, cols 2t..2t+1), a1 = (row g+8, same), a2 = (row g, cols 2t+8..),
//               a3 = (row g+8, cols 2t+8..)
//   B (16×8):   b0 = (k 2t..2t+1, col g), b1 = (k 2t+8.., col g)
//   C (16×8):   c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, same)
// Every shared-memory tile here is row-major with a pitch of (columns + 8) elements, so
// the eight 16-byte rows one ldmatrix reads fall in different bank groups.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace seqmix::cuda::gla {

template <class E>
__device__ __forceinline__ float to_float(E x);
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <>
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <class E>
__device__ __forceinline__ E from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }

__device__ __forceinline__ uint32_t bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ uint32_t bits(__half x) { return __half_as_ushort(x); }

// Two floats as one 32-bit register of two 16-bit values (low half = first).
template <class E>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  return bits(from_float<E>(lo)) | (bits(from_float<E>(hi)) << 16);
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers; zero-filled when !valid
// (src must still be a mapped address then; it is not read).
__device__ __forceinline__ void copy16_async(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// One arrival on the mbarrier once every cp.async this thread issued so far has landed
// (the barrier's expected count includes this arrival).
__device__ __forceinline__ void copy_async_arrive(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(barrier)) : "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

// A fragment of rows [m0, m0+16) × cols [k0, k0+16) of a row-major [m][k] tile.
template <class E>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const E* tile, int pitch, int m0, int k0, int lane) {
  const int row = m0 + (lane % 8) + 8 * ((lane / 8) % 2), col = k0 + 8 * (lane / 16);
  ldmatrix_x4(a, tile + row * pitch + col);
}

// A fragment of the transpose of a row-major [k][m] tile: A[m][k] = tile[k][m].
template <class E>
__device__ __forceinline__ void load_a_transposed(uint32_t (&a)[4], const E* tile, int pitch, int k0, int m0,
                                                  int lane) {
  const int row = k0 + (lane % 8) + 8 * (lane / 16), col = m0 + 8 * ((lane / 8) % 2);
  ldmatrix_x4_trans(a, tile + row * pitch + col);
}

// B fragments of two adjacent 8-column tiles (cols n0..n0+15, k rows k0..k0+15) from a
// row-major [n][k] tile (B = tileᵀ): b[0], b[1] for the first, b[2], b[3] the second.
template <class E>
__device__ __forceinline__ void load_b_from_rows(uint32_t (&b)[4], const E* tile, int pitch, int n0, int k0,
                                                 int lane) {
  const int row = n0 + (lane % 8) + 8 * (lane / 16), col = k0 + 8 * ((lane / 8) % 2);
  ldmatrix_x4(b, tile + row * pitch + col);
}

// The same two B fragments from a row-major [k][n] tile (B = tile).
template <class E>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const E* tile, int pitch, int k0, int n0, int lane) {
  const int row = k0 + (lane % 8) + 8 * ((lane / 8) % 2), col = n0 + 8 * (lane / 16);
  ldmatrix_x4_trans(b, tile + row * pitch + col);
}

// c += a·b on the tensor cores, 16×8×16, fp32 accumulators.
template <class E>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c[0..1] += a·b for the two 8-column tiles whose fragments load_b* returned.
template <class E>
__device__ __forceinline__ void mma_pair(float (&c0)[4], float (&c1)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[4]) {
  mma<E>(c0, a, b[0], b[1]);
  mma<E>(c1, a, b[2], b[3]);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace seqmix::cuda::gla
