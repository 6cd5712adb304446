// Probe: cp.async pieces (every thread) against bulk row copies (one warp issues, the copy engine moves)
// for the split's pass-1 pattern, with a compute delay between a chunk's issue and the next wait.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
__device__ __forceinline__ void cp16(void* dst, const void* src) {
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ unsigned sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(uint64_t* b, unsigned n) { asm volatile("mbarrier.init.shared.b64 [%0], %1;" ::"r"(sa(b)), "r"(n)); }
__device__ __forceinline__ void bar_expect(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* b, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(sa(b)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_row(void* dst, const void* src, unsigned bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(sa(dst)), "l"(src), "r"(bytes), "r"(sa(b)) : "memory");
}
constexpr int PITCH = 272;  // padded row, as the kernel's tiles (136 bf16)
constexpr int TILE = 64 * PITCH;
template <int ST, bool BULK>
__global__ void __launch_bounds__(256) stream(const __nv_bfloat16* k, const __nv_bfloat16* g, const __nv_bfloat16* v,
    int64_t stride, int chunks, int heads, int delay, float* sink) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ uint64_t full[ST];
  const int tid = threadIdx.x;
  const int h = blockIdx.x % heads, s = blockIdx.x / heads;
  const __nv_bfloat16* src[3] = {k, g, v};
  if (BULK && tid == 0) {
    for (int i = 0; i < ST; ++i) bar_init(&full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](int c, int stage) {
    unsigned char* dst = sm + stage * 3 * TILE;
    if constexpr (BULK) {
      if (tid < 32) {
        if (tid == 0) bar_expect(&full[stage], 3 * 64 * 256);
        __syncwarp();
        for (int r = tid; r < 192; r += 32) {
          const int t = r / 64, row = r % 64;
          const int64_t tok = (int64_t)(s * chunks + c) * 64 + row;
          bulk_row(dst + t * TILE + row * PITCH, src[t] + tok * stride + h * 128, 256, &full[stage]);
        }
      }
    } else {
      for (int t = 0; t < 3; ++t)
        for (int j = 0; j < 4; ++j) {
          int piece = tid + 256 * j, row = piece / 16, col = piece % 16;
          int64_t tok = (int64_t)(s * chunks + c) * 64 + row;
          cp16(dst + t * TILE + row * PITCH + col * 16, src[t] + tok * stride + h * 128 + col * 8);
        }
      asm volatile("cp.async.commit_group;\n");
    }
  };
  for (int c = 0; c < ST - 1; ++c) issue(c, c);
  float acc = 0;
  for (int c = 0; c < chunks; ++c) {
    if constexpr (BULK) bar_wait(&full[c % ST], (c / ST) & 1);
    else {
      if constexpr (ST == 2) asm volatile("cp.async.wait_group 0;\n");
      else asm volatile("cp.async.wait_group 1;\n");
    }
    __syncthreads();
    acc += reinterpret_cast<float*>(sm + (c % ST) * 3 * TILE)[tid];
    if (c + ST - 1 < chunks) issue(c + ST - 1, (c + ST - 1) % ST);
    else if constexpr (!BULK) asm volatile("cp.async.commit_group;\n");
    if (delay) {
      const long long t0 = clock64();
      while (clock64() - t0 < delay) {}
    }
    __syncthreads();
  }
  if (acc == 12345.f) sink[0] = acc;
}
int main() {
  const int T = 32768, H = 16, K = 128;
  size_t n = (size_t)T * H * K;
  __nv_bfloat16 *k, *g, *v; float* sink;
  cudaMalloc(&k, n * 2); cudaMalloc(&g, n * 2); cudaMalloc(&v, n * 2); cudaMalloc(&sink, 4);
  cudaMemset(k, 1, n * 2); cudaMemset(g, 2, n * 2); cudaMemset(v, 3, n * 2);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const int blocks = 7 * H, chunks = (T / 64) / 8;
  const size_t smem = 3 * 3 * TILE + 1024;
  using F = void (*)(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, int, int, int, float*);
  struct Cfg { const char* name; F f; int delay; };
  Cfg cfgs[] = {{"cp.async 2 stages", stream<2, false>, 0}, {"bulk rows 2 stages", stream<2, true>, 0},
                {"bulk rows 3 stages", stream<3, true>, 0},
                {"cp.async 2 stages", stream<2, false>, 3000}, {"bulk rows 2 stages", stream<2, true>, 3000},
                {"bulk rows 3 stages", stream<3, true>, 3000},
                {"cp.async 2 stages", stream<2, false>, 4000}, {"bulk rows 2 stages", stream<2, true>, 4000},
                {"bulk rows 3 stages", stream<3, true>, 4000}, {"cp.async 3 stages", stream<3, false>, 4000}};
  for (int rep = 0; rep < 2; ++rep)
    for (auto& c : cfgs) {
      cudaFuncSetAttribute(c.f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      for (int w = 0; w < 3; ++w) c.f<<<blocks, 256, smem>>>(k, g, v, H * K, chunks, H, c.delay, sink);
      cudaEventRecord(a);
      for (int r = 0; r < 20; ++r) c.f<<<blocks, 256, smem>>>(k, g, v, H * K, chunks, H, c.delay, sink);
      cudaEventRecord(b); cudaEventSynchronize(b);
      float ms; cudaEventElapsedTime(&ms, a, b); ms /= 20;
      double bytes = 3.0 * blocks * chunks * 64 * 128 * 2;
      printf("%-20s delay %4d: %.4f ms, %.2f TB/s, delay at 1.755 GHz %.4f ms (%s)\n", c.name, c.delay, ms,
             bytes / ms / 1e9, chunks * (double)c.delay / 1.755e6, cudaGetErrorString(cudaGetLastError()));
    }
  return 0;
}
