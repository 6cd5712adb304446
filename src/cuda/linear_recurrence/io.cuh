// The kernels between the caller's tensors and the methods: float copies of the chain
// (forward, or reversed in time through A_tᵀ for the backward), the states back in the
// input dtype, and the gradient products dA_t = g_t h_{t-1}ᵀ and dh_0 = A_0ᵀ g_0.
#pragma once

#include "cuda/linear_recurrence/common.cuh"

namespace seqmix::cuda::linrec {

// Float copy of the chain a method solves, per group:
//   forward   M_s = A_s,                         v_s = b_s,          start = h0 (or 0)
//   reverse   M_0 = I, M_s = A_{T-s}ᵀ (s ≥ 1),   v_s = dh_{T-1-s},   start = d_final (or 0)
// The reverse chain's state u_s is the gradient g_{T-1-s}.
template <class T>
struct PrepParams {
  const T* A;        // [G, T, n, n]
  const T* b;        // [G, T, n, m]: b, or dh for the reverse chain
  const T* start;    // [G, n, m] or null
  float* maps;       // [G, T, n, n]
  float* states;     // [G, T, n, m]
  float* start_out;  // [G, n, m]
  int64_t T_len = 0;
  int n = 0, m = 0;
  bool reverse = false;
};

template <class T>
__global__ void __launch_bounds__(kThreads) prep_kernel(const PrepParams<T> p) {
  extern __shared__ float tile[];  // [n][n+1] for the transpose
  const int64_t g = blockIdx.y, nn = int64_t(p.n) * p.n, nm = int64_t(p.n) * p.m;
  const int tid = threadIdx.x;
  for (int64_t s = blockIdx.x; s < p.T_len; s += gridDim.x) {
    float* M = p.maps + (g * p.T_len + s) * nn;
    float* v = p.states + (g * p.T_len + s) * nm;
    const int64_t b_step = p.reverse ? p.T_len - 1 - s : s;
    const T* b = p.b + (g * p.T_len + b_step) * nm;
    for (int e = tid; e < nm; e += kThreads) v[e] = to_float(b[e]);
    if (!p.reverse) {
      const T* A = p.A + (g * p.T_len + s) * nn;
      for (int e = tid; e < nn; e += kThreads) M[e] = to_float(A[e]);
    } else if (s == 0) {
      for (int e = tid; e < nn; e += kThreads) M[e] = (e / p.n == e % p.n) ? 1.f : 0.f;
    } else {
      const T* A = p.A + (g * p.T_len + p.T_len - s) * nn;
      __syncthreads();  // the previous step's tile is consumed
      for (int e = tid; e < nn; e += kThreads) tile[(e / p.n) * (p.n + 1) + e % p.n] = to_float(A[e]);
      __syncthreads();
      for (int e = tid; e < nn; e += kThreads) M[e] = tile[(e % p.n) * (p.n + 1) + e / p.n];
    }
  }
  if (blockIdx.x == 0)
    for (int e = tid; e < nm; e += kThreads) p.start_out[g * nm + e] = p.start ? to_float(p.start[g * nm + e]) : 0.f;
}

// h = states in the input dtype, and the last state as final_state.
template <class T>
__global__ void __launch_bounds__(kThreads) store_kernel(const float* states, T* h, T* final_state, int64_t G,
                                                         int64_t T_len, int64_t nm) {
  const int64_t total = G * T_len * nm;
  for (int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x; e < total; e += int64_t(gridDim.x) * kThreads) {
    const float x = states[e];
    h[e] = from_float<T>(x);
    const int64_t g = e / (T_len * nm), rest = e % (T_len * nm);
    if (final_state && rest >= (T_len - 1) * nm) final_state[g * nm + rest - (T_len - 1) * nm] = from_float<T>(x);
  }
}

// dA_t = g_t h_{t-1}ᵀ (h_{-1} = h0 or 0) and db_t = g_t, with g_t = u_{T-1-t} the
// reverse chain's state. One block per step: gᵀ and hᵀ slices of 64 state columns in
// shared memory, 4×4 register tiles of the n×n product.
template <class T>
struct GradParams {
  const float* u;   // [G, T, n, m] reverse-chain states
  const float* h;   // [G, T, n, m] forward states
  const T* h_saved = nullptr;  // [G, T, n, m] the forward's own h, read instead of h when given
  const T* h0;      // [G, n, m] or null
  const T* A;       // [G, T, n, n], for dh0
  T* dA;            // [G, T, n, n]
  T* db;            // [G, T, n, m]
  T* dh0;           // [G, n, m] or null
  int64_t T_len = 0;
  int n = 0, m = 0;
  // Element e of the forward states: h_saved's, or the recomputed float copy's.
  __device__ float state(int64_t e) const { return h_saved ? to_float(h_saved[e]) : h[e]; }
};

// The same products on tensor cores where they apply (grad_wgmma.cuh: bf16, the forward's h
// given, n ≤ 64, m a multiple of 8 up to 64): launched, true; otherwise false.
template <class T>
bool launch_gradients_on_tensor_cores(const GradParams<T>& p, int64_t G, void* stream);

inline constexpr int kGradCols = 32;

// Four consecutive outputs in one store (16 bytes of f32, 8 of bf16) where the address
// allows it: the gradient kernel's dA tiles are rows of 4, and scalar stores at a stride
// of 4 elements spend four store instructions on every sector (version 4, NOTES.md).
__device__ __forceinline__ void store_row4(float* dst, const float (&x)[4], bool vector) {
  if (vector) *reinterpret_cast<float4*>(dst) = make_float4(x[0], x[1], x[2], x[3]);
  else
    for (int c = 0; c < 4; ++c) dst[c] = x[c];
}
__device__ __forceinline__ void store_row4(__nv_bfloat16* dst, const float (&x)[4], bool vector) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(x[0], x[1]), hi = __floats2bfloat162_rn(x[2], x[3]);
  if (vector) {
    uint2 both;
    both.x = *reinterpret_cast<const unsigned*>(&lo), both.y = *reinterpret_cast<const unsigned*>(&hi);
    *reinterpret_cast<uint2*>(dst) = both;
  } else {
    dst[0] = lo.x, dst[1] = lo.y, dst[2] = hi.x, dst[3] = hi.y;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) grad_kernel(const GradParams<T> p) {
  extern __shared__ __align__(16) float grad_smem[];
  const int ld = p.n + 4;
  float* gt = grad_smem;              // [32][n+4]  gt[c][i] = g[i][c]
  float* ht = grad_smem + kGradCols * ld;  // [32][n+4]  ht[c][k] = h[k][c]
  const int64_t g = blockIdx.y, nn = int64_t(p.n) * p.n, nm = int64_t(p.n) * p.m;
  const int tid = threadIdx.x, tiles = (p.n / 4) * (p.n / 4);
  for (int64_t t = blockIdx.x; t < p.T_len; t += gridDim.x) {
    const float* gu = p.u + (g * p.T_len + p.T_len - 1 - t) * nm;
    T* db = p.db + (g * p.T_len + t) * nm;
    for (int e = tid; e < nm; e += kThreads) db[e] = from_float<T>(gu[e]);
    const int64_t h_step = t > 0 ? (g * p.T_len + t - 1) * nm : -1;  // h_{t-1}, or h0 at t = 0
    const T* h0 = t == 0 && p.h0 ? p.h0 + g * nm : nullptr;
    constexpr int kTilesPerThread = 4;  // n = 128 has 1024 tiles
    float acc[kTilesPerThread][4][4] = {};
    for (int c0 = 0; c0 < p.m; c0 += kGradCols) {
      const int cols = min(kGradCols, p.m - c0);
      __syncthreads();
      for (int e = tid; e < p.n * cols; e += kThreads) {
        const int i = e / cols, c = e % cols;
        gt[c * ld + i] = gu[i * p.m + c0 + c];
        ht[c * ld + i] = h_step >= 0 ? p.state(h_step + i * p.m + c0 + c) : (h0 ? to_float(h0[i * p.m + c0 + c]) : 0.f);
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kTilesPerThread; ++k) {
        const int tile = tid + k * kThreads;
        if (tile >= tiles) break;
        const int i0 = (tile / (p.n / 4)) * 4, j0 = (tile % (p.n / 4)) * 4;
        for (int c = 0; c < cols; ++c) {
          const float4 a = *reinterpret_cast<const float4*>(gt + c * ld + i0);
          const float4 z = *reinterpret_cast<const float4*>(ht + c * ld + j0);
          const float av[4] = {a.x, a.y, a.z, a.w}, zv[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) acc[k][r][cc] = fmaf(av[r], zv[cc], acc[k][r][cc]);
        }
      }
    }
    T* dA = p.dA + (g * p.T_len + t) * nn;
    // n is a multiple of 8, so every row of 4 is as aligned as dA itself.
    const bool vector = reinterpret_cast<uintptr_t>(p.dA) % (4 * sizeof(T)) == 0;
#pragma unroll
    for (int k = 0; k < kTilesPerThread; ++k) {
      const int tile = tid + k * kThreads;
      if (tile >= tiles) break;
      const int i0 = (tile / (p.n / 4)) * 4, j0 = (tile % (p.n / 4)) * 4;
#pragma unroll
      for (int r = 0; r < 4; ++r) store_row4(dA + (i0 + r) * p.n + j0, acc[k][r], vector);
    }
  }
}

// The same products for states of at most kStreamGradMaxCols columns (the chunked
// method's tensor-core shapes), without shared memory or barriers. grad_kernel spends
// one block on one step: stage g and h, synchronise, 16 FMA a thread, 16 KB of stores
// (n = 64), so each block is a chain of latencies and the kernel wrote dA at about half
// the copy rate (0.72 ms of the 2.87 ms backward at G16 T4096 n64 m1 f32, NOTES.md
// version 6). Here every thread walks (step, 4×4 tile) items with a grid stride: it
// reads its 4 entries of g and of h (L1 hits: a warp's tiles share them), forms the
// tile and stores it, so a warp's next loads overlap its last stores and nothing waits
// on the rest of the block. Threads of tile column 0 also write db.
inline constexpr int kStreamGradMaxCols = 8;

template <class T>
__global__ void __launch_bounds__(kThreads) grad_stream_kernel(const GradParams<T> p) {
  const int64_t g = blockIdx.y, nn = int64_t(p.n) * p.n, nm = int64_t(p.n) * p.m;
  const int q = p.n / 4, tiles = q * q;
  // The item index e = t·tiles + tile advances by the grid's thread count: kept as
  // (t, tile) and advanced without dividing.
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x, stride = int64_t(gridDim.x) * kThreads;
  const int64_t stride_t = stride / tiles;
  const int stride_tile = static_cast<int>(stride % tiles);
  int64_t t = first / tiles;
  int tile = static_cast<int>(first % tiles);
  const bool vector = reinterpret_cast<uintptr_t>(p.dA) % (4 * sizeof(T)) == 0;
  for (; t < p.T_len; t += stride_t) {
    const int i0 = (tile / q) * 4, j0 = (tile % q) * 4;
    const float* gu = p.u + (g * p.T_len + p.T_len - 1 - t) * nm;
    const int64_t h_step = t > 0 ? (g * p.T_len + t - 1) * nm : -1;  // h_{t-1}, or h0 at t = 0
    const T* h0 = t == 0 && p.h0 ? p.h0 + g * nm : nullptr;
    T* db = p.db + (g * p.T_len + t) * nm;
    float acc[4][4] = {};
    for (int c = 0; c < p.m; ++c) {
      float gv[4], hv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        gv[r] = gu[(i0 + r) * p.m + c];
        const int k = (j0 + r) * p.m + c;
        hv[r] = h_step >= 0 ? p.state(h_step + k) : (h0 ? to_float(h0[k]) : 0.f);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) acc[r][cc] = fmaf(gv[r], hv[cc], acc[r][cc]);
      if (j0 == 0)
#pragma unroll
        for (int r = 0; r < 4; ++r) db[(i0 + r) * p.m + c] = from_float<T>(gv[r]);
    }
    T* dA = p.dA + (g * p.T_len + t) * nn;
#pragma unroll
    for (int r = 0; r < 4; ++r) store_row4(dA + (i0 + r) * p.n + j0, acc[r], vector);
    tile += stride_tile;
    if (tile >= tiles) tile -= tiles, ++t;
  }
}

// dh0 = A_0ᵀ g_0 (g_0 = u_{T-1}); one block per group.
template <class T>
__global__ void __launch_bounds__(kThreads) initial_state_grad_kernel(const GradParams<T> p) {
  const int64_t g = blockIdx.x, nm = int64_t(p.n) * p.m;
  const T* A0 = p.A + g * p.T_len * p.n * p.n;
  const float* g0 = p.u + (g * p.T_len + p.T_len - 1) * nm;
  for (int e = threadIdx.x; e < nm; e += kThreads) {
    const int i = e / p.m, c = e % p.m;
    float sum = 0.f;
    for (int k = 0; k < p.n; ++k) sum = fmaf(to_float(A0[k * p.n + i]), g0[k * p.m + c], sum);
    p.dh0[g * nm + e] = from_float<T>(sum);
  }
}

}  // namespace seqmix::cuda::linrec
