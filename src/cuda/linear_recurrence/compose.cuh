// Batched composition of affine maps on float copies, the building block of the
// chunked, scan and cyclic-reduction methods:
//   (M_out, v_out) = (X, x) ∘ (Y, y) = (X·Y, X·y + x)     or, without Y,  v_out = X·y + x.
// One block per item: X goes to shared memory transposed, [Y | y] in slices of 64
// columns, and each thread computes 4×4 tiles of X·[Y | y] in registers (fp32 FMA).
// Outputs may alias X and x (in-place updates): every read of X happens before the
// first write, and x is read element by element by the thread that overwrites it.
#pragma once

#include "cuda/linear_recurrence/common.cuh"

namespace seqmix::cuda::linrec {

// Item i of a batched op refers to position off + (i / div)·stride of a float array
// [G, positions, rows, cols] (group g at base + g·group); a negative position means
// `fallback` ([G, rows, cols], the state before step 0).
struct MapRef {
  float* base = nullptr;
  int64_t off = 0, stride = 1, div = 1;
  int64_t elems = 0;  // rows·cols
  int64_t group = 0;  // elements between groups
  const float* fallback = nullptr;
  int64_t fallback_group = 0;

  __host__ __device__ float* at(int64_t group_index, int64_t item) const {
    const int64_t pos = off + (item / div) * stride;
    if (pos < 0) return const_cast<float*>(fallback) + group_index * fallback_group;
    return base + group_index * group + pos * elems;
  }
};

struct ComposeParams {
  MapRef X, x, Y, y;          // Y.base null: apply only (no M_out)
  MapRef out_M, out_v;        // out_M unused without Y
  int64_t items = 0;
  int n = 0, m = 0;
};

inline constexpr int kSliceCols = 64;

// Shared floats compose_item uses for state size n.
__host__ __device__ inline int compose_smem_floats(int n) { return n * (n + 4) + n * (kSliceCols + 4); }

// One item, all threads of the block.
__device__ inline void compose_item(const float* X, const float* x, const float* Y, const float* y, float* out_M,
                                    float* out_v, int n, int m, float* smem) {
  const int ldx = n + 4, ldz = kSliceCols + 4;
  float* Xt = smem;               // [n][n+4]   Xt[j][i] = X[i][j]
  float* Z = smem + n * ldx;      // [n][64+4]  a slice of [Y | y]
  const int tid = threadIdx.x;
  for (int e = tid; e < n * n; e += kThreads) Xt[(e % n) * ldx + e / n] = X[e];
  const int y_cols = Y ? n : 0, width = y_cols + m;
  const int row_tiles = n / 4;
  for (int w0 = 0; w0 < width; w0 += kSliceCols) {
    const int cols = min(kSliceCols, width - w0), col_tiles = (cols + 3) / 4;
    __syncthreads();  // the previous slice is consumed (and Xt written, the first time)
    for (int e = tid; e < n * col_tiles * 4; e += kThreads) {
      const int j = e / (col_tiles * 4), w = e % (col_tiles * 4);
      const int col = w0 + w;
      float value = 0.f;
      if (w < cols) value = col < y_cols ? Y[j * n + col] : y[j * m + col - y_cols];
      Z[j * ldz + w] = value;
    }
    __syncthreads();
    for (int tile = tid; tile < row_tiles * col_tiles; tile += kThreads) {
      const int i0 = (tile / col_tiles) * 4, k0 = (tile % col_tiles) * 4;
      float acc[4][4] = {};
      for (int j = 0; j < n; ++j) {
        const float4 a = *reinterpret_cast<const float4*>(Xt + j * ldx + i0);
        const float4 z = *reinterpret_cast<const float4*>(Z + j * ldz + k0);
        const float av[4] = {a.x, a.y, a.z, a.w}, zv[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int cc = 0; cc < 4; ++cc) acc[r][cc] = fmaf(av[r], zv[cc], acc[r][cc]);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int cc = 0; cc < 4; ++cc) {
          const int row = i0 + r, col = w0 + k0 + cc;
          if (k0 + cc >= cols) continue;
          if (col < y_cols) out_M[row * n + col] = acc[r][cc];
          else {
            const int e = row * m + col - y_cols;
            out_v[e] = acc[r][cc] + x[e];
          }
        }
    }
  }
  __syncthreads();  // outputs written before the block moves on (they may be the next item's inputs)
}

template <int unused = 0>
__global__ void __launch_bounds__(kThreads) compose_kernel(const ComposeParams p) {
  extern __shared__ __align__(16) float compose_smem[];
  const int64_t g = blockIdx.y;
  for (int64_t item = blockIdx.x; item < p.items; item += gridDim.x) {
    const bool with_M = p.Y.base != nullptr;
    compose_item(p.X.at(g, item), p.x.at(g, item), with_M ? p.Y.at(g, item) : nullptr, p.y.at(g, item),
                 with_M ? p.out_M.at(g, item) : nullptr, p.out_v.at(g, item), p.n, p.m, compose_smem);
  }
}

// Chunk-local prefix maps, in place: for t in the chunk, (M_t, v_t) ← (M_t, v_t) ∘
// (M_{t-1}, v_{t-1}), so M_t becomes A_t···A_{t0} and v_t the state from a zero start.
struct ChunkPrefixParams {
  float* maps;    // [G, T, n, n]
  float* states;  // [G, T, n, m]
  int64_t T = 0, chunk = 0;
  int n = 0, m = 0;
};

template <int unused = 0>
__global__ void __launch_bounds__(kThreads) chunk_prefix_kernel(const ChunkPrefixParams p) {
  extern __shared__ __align__(16) float compose_smem[];
  const int64_t g = blockIdx.y, t0 = blockIdx.x * p.chunk;
  const int64_t t1 = min(p.T, t0 + p.chunk), nn = int64_t(p.n) * p.n, nm = int64_t(p.n) * p.m;
  float* M = p.maps + g * p.T * nn;
  float* v = p.states + g * p.T * nm;
  for (int64_t t = t0 + 1; t < t1; ++t)
    compose_item(M + t * nn, v + t * nm, M + (t - 1) * nn, v + (t - 1) * nm, M + t * nn, v + t * nm, p.n, p.m,
                 compose_smem);
}

}  // namespace seqmix::cuda::linrec
