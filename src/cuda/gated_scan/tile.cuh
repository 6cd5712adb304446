// The tile machinery shared by the gated-scan kernels.
//
// A block owns one sequence and a slab of channels (kLanes × 8-byte vectors) and walks
// the sequence in tiles of kSteps·kSegments time steps. Thread (lane, segment) holds
// kSteps consecutive steps of one 8-byte channel vector in registers. A tile is scanned
// in three moves: each thread composes its own steps into one affine map h ↦ A·h + H;
// a Hillis–Steele scan over the segments in shared memory gives every thread the map of
// all earlier segments; applying that to the carry from the previous tile gives the
// thread's starting state. Every input is read once and every output written once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/gated_scan/params.hpp"

namespace seqmix::cuda::scan {

constexpr int kThreads = 256;
constexpr int kLanes = 4;                       // vectors across the channel slab
// Bytes per thread per row: 8 keeps the backward's per-channel state in registers
// (16 needed 255 registers there); 4 lanes × 8 bytes still fill whole 32-byte sectors.
constexpr int kVecBytes = 8;
constexpr int kSegments = kThreads / kLanes;    // 64 time segments per tile
constexpr int kSteps = kScanStepsPerThread;     // time steps per thread per tile
static_assert(kSteps * kSegments == kScanTileSteps, "tile length must match params.hpp");

template <class T>
struct Traits;
template <>
struct Traits<__nv_bfloat16> {
  static __device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
};
template <>
struct Traits<__half> {
  static __device__ float to_float(__half x) { return __half2float(x); }
  static __device__ __half from_float(float x) { return __float2half(x); }
};
template <>
struct Traits<float> {
  static __device__ float to_float(float x) { return x; }
  static __device__ float from_float(float x) { return x; }
};

// One vector of channels.
template <class T>
union Pack {
  static constexpr int kVec = kVecBytes / sizeof(T);
  using Raw = std::conditional_t<kVecBytes == 16, uint4, uint2>;
  Raw raw;
  T e[kVec];
  __device__ float operator[](int i) const { return Traits<T>::to_float(e[i]); }
};

// Where a block works: its sequence's first row and length, and its channel slab.
struct BlockCoords {
  int64_t batch, start, length;
  int64_t d0;  // first channel of this thread's vector
  int lane, segment;

  // Thread t is lane t % kLanesT (a vector of channels) of segment t / kLanesT.
  template <class T, int kLanesT = kLanes>
  __device__ static BlockCoords make(const SequenceLayout& seq) {
    BlockCoords c;
    const int64_t n = blockIdx.y;
    if (seq.cu_seqlens) {
      int64_t begin, end;
      if (seq.cu_seqlens_int64) {
        begin = static_cast<const int64_t*>(seq.cu_seqlens)[n];
        end = static_cast<const int64_t*>(seq.cu_seqlens)[n + 1];
      } else {
        begin = static_cast<const int32_t*>(seq.cu_seqlens)[n];
        end = static_cast<const int32_t*>(seq.cu_seqlens)[n + 1];
      }
      c.batch = 0;
      c.start = begin;
      c.length = end - begin;
    } else {
      c.batch = n;
      c.start = 0;
      c.length = seq.T;
    }
    c.lane = threadIdx.x % kLanesT;
    c.segment = threadIdx.x / kLanesT;
    c.d0 = (static_cast<int64_t>(blockIdx.x) * kLanesT + c.lane) * Pack<T>::kVec;
    return c;
  }
  // Time step (within the sequence) of this thread's step `i` in tile `tile` (the
  // register kernels' layout: kSteps steps per segment).
  __device__ int64_t step(int64_t tile, int i) const { return tile * kScanTileSteps + segment * kSteps + i; }
  // Row of tile `tile` of this sequence in a tile-state table.
  __device__ int64_t tile_row(const SequenceLayout& seq, int64_t tile) const {
    return tile_state_row(batch * seq.T + start, blockIdx.y, tile);
  }
};

// The tiles a block scans: its split of the sequence's tiles (all of them unsplit).
struct TileRange {
  int64_t first, end, tiles;
  __device__ static TileRange make(const GatedScanParams& p, const BlockCoords& c) {
    TileRange r;
    r.tiles = scan_tiles(c.length);
    const int64_t per_split = p.split_tiles > 0 ? p.split_tiles : r.tiles;
    r.first = blockIdx.z * per_split;
    r.end = r.first + per_split < r.tiles ? r.first + per_split : r.tiles;
    return r;
  }
  __device__ bool empty() const { return first >= end; }
};

// Workspace regions (see GatedScanParams::workspace).
struct Workspace {
  float* tile_states;   // [tile_rows, D]
  float* forward_maps;  // [N, splits, 2, D]: (A, H) of h ↦ A·h + H over each split
  float* reverse_maps;  // [N, splits, 2, D]: the same for c flowing backwards in time
  __device__ static Workspace make(const GatedScanParams& p) {
    const int64_t N = p.seq.num_sequences, splits = gridDim.z;
    Workspace w;
    w.tile_states = p.workspace;
    w.forward_maps = p.workspace + p.tile_rows * p.D;
    w.reverse_maps = w.forward_maps + N * splits * 2 * p.D;
    return w;
  }
  __device__ static float* map(float* maps, int64_t n, int64_t split, int64_t D) {
    return maps + (n * gridDim.z + split) * 2 * D;
  }
};

// Applies the split maps of splits [from, to) (forward) or (to, from] walking down
// (step -1) to `carry`, for the thread's channels.
template <int kVec>
__device__ void apply_split_maps(float* maps, int64_t n, int64_t from, int64_t to, int step, int64_t D,
                                 int64_t d0, float (&carry)[kVec]) {
  for (int64_t k = from; k != to; k += step) {
    const float* m = Workspace::map(maps, n, k, D);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      if (d0 + i < D) carry[i] = m[d0 + i] * carry[i] + m[D + d0 + i];
  }
}

template <class T>
__device__ T* row_ptr(const BtdView& v, const BlockCoords& c, int64_t t) {
  return static_cast<T*>(v.data) + c.batch * v.stride_batch + (c.start + t) * v.stride_time;
}

// Loads the thread's vector at step t; elements past D or steps past the sequence get
// `fill` (the identity of the scan for decays, 0 otherwise).
template <class T>
__device__ Pack<T> load(const BtdView& v, const BlockCoords& c, int64_t t, int64_t D, bool aligned, float fill) {
  Pack<T> p;
  constexpr int kVec = Pack<T>::kVec;
  if (t < c.length && aligned && c.d0 + kVec <= D) {
    p.raw = __ldcs(reinterpret_cast<const typename Pack<T>::Raw*>(row_ptr<T>(v, c, t) + c.d0));
    return p;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const bool inside = t < c.length && c.d0 + i < D;
    p.e[i] = inside ? row_ptr<T>(v, c, t)[c.d0 + i] : Traits<T>::from_float(fill);
  }
  return p;
}

template <class T>
__device__ void store(const BtdView& v, const BlockCoords& c, int64_t t, int64_t D, bool aligned,
                      const float (&values)[Pack<T>::kVec]) {
  if (t >= c.length) return;
  constexpr int kVec = Pack<T>::kVec;
  Pack<T> p;
#pragma unroll
  for (int i = 0; i < kVec; ++i) p.e[i] = Traits<T>::from_float(values[i]);
  if (aligned && c.d0 + kVec <= D) {
    __stcs(reinterpret_cast<typename Pack<T>::Raw*>(row_ptr<T>(v, c, t) + c.d0), p.raw);
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    if (c.d0 + i < D) row_ptr<T>(v, c, t)[c.d0 + i] = p.e[i];
}

// Shared memory of the segment scan: each warp's composed map and the map of the warps
// before it, per channel and lane; the tile's map; the carry between tiles.
template <int kVec, int kLanesT = kLanes>
struct ScanShared {
  static constexpr int kWarps = kThreads / 32;
  float warp_A[kWarps][kVec][kLanesT], warp_H[kWarps][kVec][kLanesT];
  float before_A[kWarps][kVec][kLanesT], before_H[kWarps][kVec][kLanesT];
  float tile_A[kVec][kLanesT], tile_H[kVec][kLanesT];
  float carry[kVec][kLanesT];  // state entering the tile (forward) or leaving it (reverse)
};

// The barrier among the kThreads scanning threads: the whole block, or (in kernels with
// a copy-issuing warp beside them) named barrier 1 over the first kThreads threads.
struct BlockSync {
  __device__ void operator()() const { __syncthreads(); }
};
struct ScanThreadsSync {
  __device__ void operator()() const { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }
};

// Given each thread's own map (A, H) over its steps, returns in (A, H) the map of all
// segments strictly before it (forward) — or strictly after it when `reverse` — and
// in (tile_A, tile_H) the map of the whole tile. Thread t is lane t % kLanesT of segment
// t / kLanesT. Within a warp (32 / kLanesT segments) the scan runs on shuffles; the
// first threads compose the 8 warp maps in shared memory: two barriers in all. The next
// call may start at once: what it writes first (the warp maps) was last read before this
// call's second barrier.
template <int kVec, int kLanesT, class Sync = BlockSync>
__device__ void exclusive_segment_scan(ScanShared<kVec, kLanesT>& s, int lane, bool reverse, float (&A)[kVec],
                                       float (&H)[kVec], float (&tile_A)[kVec], float (&tile_H)[kVec],
                                       Sync sync = {}) {
  constexpr int kSegmentsPerWarp = 32 / kLanesT, kWarps = ScanShared<kVec, kLanesT>::kWarps;
  constexpr unsigned kAll = 0xffffffffu;
  const int warp = threadIdx.x / 32, segment_in_warp = (threadIdx.x % 32) / kLanesT;
  const int pos = reverse ? kSegmentsPerWarp - 1 - segment_in_warp : segment_in_warp;  // order of composition
  // Inclusive scan within the warp: compose with the map `distance` positions earlier.
#pragma unroll
  for (int distance = 1; distance < kSegmentsPerWarp; distance *= 2) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float prev_A = reverse ? __shfl_down_sync(kAll, A[i], distance * kLanesT)
                                   : __shfl_up_sync(kAll, A[i], distance * kLanesT);
      const float prev_H = reverse ? __shfl_down_sync(kAll, H[i], distance * kLanesT)
                                   : __shfl_up_sync(kAll, H[i], distance * kLanesT);
      if (pos >= distance) {  // first prev, then self: h ↦ A·(prev_A·h + prev_H) + H
        H[i] = A[i] * prev_H + H[i];
        A[i] *= prev_A;
      }
    }
  }
  float within_A[kVec], within_H[kVec];  // exclusive within the warp: the previous position's inclusive
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    within_A[i] = reverse ? __shfl_down_sync(kAll, A[i], kLanesT) : __shfl_up_sync(kAll, A[i], kLanesT);
    within_H[i] = reverse ? __shfl_down_sync(kAll, H[i], kLanesT) : __shfl_up_sync(kAll, H[i], kLanesT);
    if (pos == 0) within_A[i] = 1.f, within_H[i] = 0.f;
  }
  if (pos == kSegmentsPerWarp - 1) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) s.warp_A[warp][i][lane] = A[i], s.warp_H[warp][i][lane] = H[i];
  }
  sync();
  // One thread per (channel, lane) composes the warp maps in order.
  if (threadIdx.x < kVec * kLanesT) {
    const int i = threadIdx.x / kLanesT, l = threadIdx.x % kLanesT;
    float run_A = 1.f, run_H = 0.f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) {
      const int w = reverse ? kWarps - 1 - k : k;
      s.before_A[w][i][l] = run_A, s.before_H[w][i][l] = run_H;
      const float wA = s.warp_A[w][i][l];
      run_H = wA * run_H + s.warp_H[w][i][l];
      run_A *= wA;
    }
    s.tile_A[i][l] = run_A, s.tile_H[i][l] = run_H;
  }
  sync();
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    tile_A[i] = s.tile_A[i][lane], tile_H[i] = s.tile_H[i][lane];
    const float before_A = s.before_A[warp][i][lane], before_H = s.before_H[warp][i][lane];
    A[i] = within_A[i] * before_A;
    H[i] = within_A[i] * before_H + within_H[i];
  }
}

// Fast-math forms (MUFU exp and approximate division, a few ulp): the outputs are
// rounded to bf16/f16 or compared at 1e-5 in f32. For x → −∞, __fdividef by an infinite
// denominator returns 0, the right limit.
__device__ inline float sigmoid(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
__device__ inline float silu(float x) { return __fdividef(x, 1.f + __expf(-x)); }
// The factor of h_{t-1} given a_t in the form seqmix::Decay names (0 direct, 1 log, 2 logit).
__device__ inline float decay_factor(int decay, float a) {
  return decay == 1 ? __expf(a) : decay == 2 ? sigmoid(a) : a;
}
__device__ inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.f + x * (1.f - s));
}

// Number of channel slabs (grid.x) for D channels of dtype T.
template <class T>
inline int64_t num_slabs(int64_t D) {
  constexpr int64_t slab = kLanes * (kVecBytes / sizeof(T));
  return (D + slab - 1) / slab;
}

}  // namespace seqmix::cuda::scan
