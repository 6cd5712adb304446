// The gated-scan layer in one kernel: the projection u = x·Wᵀ on the tensor cores, then
// the scan h_t = decay(a_t)·h_{t-1} + b_t and the output y_t = h_t·SiLU(z_t), where
// a, b, z are u's three blocks of D columns (W's rows [a | b | z]).
//
// Why one kernel: for a small layer (B·T·D of a few hundred thousand) the cuBLAS GEMM, the
// scan and the gate are each a few µs of GPU time, dominated by launch and ramp-up; the
// three-kernel layer pays that three or more times and moves u through memory. Here u never
// leaves the chip.
//
// Decomposition: a CTA owns (sequence, slab of 16 channels, chunk of 64 tokens). It
//   1. computes its [64 × 48] block of u (x chunk × the slab's a, b, z rows of W) with
//      mma.sync, K in pieces of 64 double-buffered through cp.async;
//   2. scans its chunk from a zero state: 8 segments of 8 tokens per channel, combined by
//      shuffles across the 8 lanes of a channel, and publishes the chunk's map
//      h_out = A·h_in + H to the workspace;
//   3. waits at a grid-wide barrier (cooperative launch: every CTA is resident), folds the
//      maps of all earlier chunks of its sequence into the state entering its chunk (no
//      chain of waits: each CTA folds its predecessors itself), and writes y.
// The grid must fit on the GPU at once; gated_scan_layer_capacity() says how many CTAs do.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/runtime.cuh"
#include "cuda/gated_scan/params.hpp"
#include "cuda/gated_scan/tile.cuh"  // decay_factor, silu
#include "cuda/gla/mma.cuh"          // cp.async, ldmatrix and mma.sync wrappers

namespace seqmix::cuda::layer {

namespace mm = seqmix::cuda::gla;

inline constexpr int kThreads = 128;         // 4 warps, 16 tokens of the GEMM each
inline constexpr int kSegments = 8;          // per channel: lanes that scan one channel
inline constexpr int kSegmentSteps = kLayerChunk / kSegments;
inline constexpr int kColumns = 3 * kLayerChannels;  // a, b, z of the slab
inline constexpr int kPiece = 64;                   // K elements per copy stage
inline constexpr int kPitch = kPiece + 8;           // padded rows: ldmatrix without bank conflicts
inline constexpr int kUPitch = kColumns + 1;
static_assert(kLayerChannels * kSegments == kThreads, "one thread per (channel, segment)");

template <class E>
struct Shared {
  E x[2][kLayerChunk][kPitch];  // x chunk, K piece, two stages
  E w[2][kColumns][kPitch];     // the slab's W rows, K piece, two stages
  float u[kLayerChunk][kUPitch];
  E y[kLayerChunk][kLayerChannels];
};

// An (A, H) map h -> A·h + H; `then` composes "this, then next".
struct Map {
  float A = 1.f, H = 0.f;
  __device__ Map then(const Map& next) const { return {next.A * A, next.A * H + next.H}; }
};

// Inclusive scan of maps over the 8 lanes of a channel (lane order = time order).
__device__ inline Map scan_segments(Map m, int segment) {
#pragma unroll
  for (int offset = 1; offset < kSegments; offset *= 2) {
    Map earlier{__shfl_up_sync(0xffffffffu, m.A, offset, kSegments), __shfl_up_sync(0xffffffffu, m.H, offset, kSegments)};
    if (segment >= offset) m = earlier.then(m);
  }
  return m;
}

template <class E>
__device__ void load_piece(Shared<E>& s, int stage, const GatedScanLayerParams& p, int64_t batch, int64_t t0,
                           int64_t c0, int64_t k0) {
  constexpr int kVec = 8;  // elements per 16-byte copy
  constexpr int kChunksPerRow = kPiece / kVec;
  const E* x = static_cast<const E*>(p.x) + batch * p.x_stride_batch;
  for (int i = threadIdx.x; i < kLayerChunk * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, col = (i % kChunksPerRow) * kVec;
    const int64_t t = t0 + row, k = k0 + col;
    const bool valid = t < p.T && k < p.d;
    mm::copy16_async(&s.x[stage][row][col], valid ? x + t * p.x_stride_time + k : x, valid);
  }
  const E* w = static_cast<const E*>(p.weight);
  for (int i = threadIdx.x; i < kColumns * kChunksPerRow; i += kThreads) {
    const int row = i / kChunksPerRow, col = (i % kChunksPerRow) * kVec;
    const int64_t channel = c0 + row % kLayerChannels, k = k0 + col;
    const bool valid = channel < p.D && k < p.d;
    const int64_t w_row = (row / kLayerChannels) * p.D + channel;
    mm::copy16_async(&s.w[stage][row][col], valid ? w + w_row * p.weight_stride + k : w, valid);
  }
  mm::copy_async_commit();
}

// u[64 × 48] = x chunk · (slab rows of W)ᵀ into shared memory, fp32.
template <class E>
__device__ void project(Shared<E>& s, const GatedScanLayerParams& p, int64_t batch, int64_t t0, int64_t c0) {
  constexpr int kTiles = kColumns / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kTiles][4] = {};
  const int pieces = static_cast<int>((p.d + kPiece - 1) / kPiece);
  load_piece(s, 0, p, batch, t0, c0, 0);
  for (int piece = 0; piece < pieces; ++piece) {
    const int stage = piece % 2;
    if (piece + 1 < pieces) {
      load_piece(s, stage ^ 1, p, batch, t0, c0, int64_t(piece + 1) * kPiece);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      mm::copy_async_wait_all();
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPiece; k += 16) {
      uint32_t a[4];
      mm::load_a(a, &s.x[stage][0][0], kPitch, 16 * warp, k, lane);
#pragma unroll
      for (int n = 0; n < kTiles; n += 2) {
        uint32_t b[4];
        mm::load_b_from_rows(b, &s.w[stage][0][0], kPitch, 8 * n, k, lane);
        mm::mma_pair<E>(acc[n], acc[n + 1], a, b);
      }
    }
    __syncthreads();  // the stage is refilled by the next iteration's copy
  }
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kTiles; ++n) {
    const int row = 16 * warp + g, col = 8 * n + 2 * t;
    s.u[row][col] = acc[n][0], s.u[row][col + 1] = acc[n][1];
    s.u[row + 8][col] = acc[n][2], s.u[row + 8][col + 1] = acc[n][3];
  }
  __syncthreads();
}

// The map of one channel's segment (8 tokens) from the zero state.
template <class E>
__device__ Map segment_map(const Shared<E>& s, const GatedScanLayerParams& p, int channel, int segment,
                           int64_t t0) {
  Map m;
#pragma unroll
  for (int i = 0; i < kSegmentSteps; ++i) {
    const int row = segment * kSegmentSteps + i;
    if (t0 + row < p.T)
      m = m.then({scan::decay_factor(p.decay, s.u[row][channel]), s.u[row][kLayerChannels + channel]});
  }
  return m;
}

// The state entering chunk `chunk`: the maps of chunks 0..chunk-1, folded by the 8 lanes of
// the channel (a contiguous share each), then combined across them.
__device__ inline float entering_state(const GatedScanLayerParams& p, int64_t batch, int64_t chunk, int64_t channel,
                                       int segment, int64_t chunks) {
  const int64_t share = (chunk + kSegments - 1) / kSegments;
  const int64_t first = segment * share, last = min(chunk, first + share);
  Map m;
  if (channel < p.D)
    for (int64_t j = first; j < last; ++j) {
      const float2 map = __ldcg(reinterpret_cast<const float2*>(p.workspace) + (batch * chunks + j) * p.D + channel);
      m = m.then({map.x, map.y});
    }
  m = scan_segments(m, segment);
  return __shfl_sync(0xffffffffu, m.H, kSegments - 1, kSegments);
}

template <class E>
__device__ void store_y(const Shared<E>& s, const GatedScanLayerParams& p, int64_t batch, int64_t t0, int64_t c0) {
  E* y = static_cast<E*>(p.y) + batch * p.y_stride_batch;
  for (int i = threadIdx.x; i < kLayerChunk * kLayerChannels; i += kThreads) {
    const int row = i / kLayerChannels, col = i % kLayerChannels;
    if (t0 + row < p.T && c0 + col < p.D) y[(t0 + row) * p.y_stride_time + c0 + col] = s.y[row][col];
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) layer_forward_kernel(const GatedScanLayerParams p) {
  __shared__ Shared<E> s;
  const int64_t slab = blockIdx.x, chunk = blockIdx.y, batch = blockIdx.z;
  const int64_t chunks = gridDim.y;
  const int64_t t0 = chunk * kLayerChunk, c0 = slab * kLayerChannels;
  project(s, p, batch, t0, c0);

  const int channel = threadIdx.x / kSegments, segment = threadIdx.x % kSegments;
  const Map inclusive = scan_segments(segment_map(s, p, channel, segment, t0), segment);
  if (segment == kSegments - 1 && c0 + channel < p.D)
    reinterpret_cast<float2*>(p.workspace)[(batch * chunks + chunk) * p.D + c0 + channel] =
        make_float2(inclusive.A, inclusive.H);
  __threadfence();
  cooperative_groups::this_grid().sync();

  const float h_in = entering_state(p, batch, chunk, c0 + channel, segment, chunks);
  // The state entering this segment: the earlier segments' maps applied to h_in.
  const float A_before = __shfl_up_sync(0xffffffffu, inclusive.A, 1, kSegments);
  const float H_before = __shfl_up_sync(0xffffffffu, inclusive.H, 1, kSegments);
  float h = segment == 0 ? h_in : A_before * h_in + H_before;
#pragma unroll
  for (int i = 0; i < kSegmentSteps; ++i) {
    const int row = segment * kSegmentSteps + i;
    h = scan::decay_factor(p.decay, s.u[row][channel]) * h + s.u[row][kLayerChannels + channel];
    s.y[row][channel] = mm::from_float<E>(h * scan::silu(s.u[row][2 * kLayerChannels + channel]));
  }
  __syncthreads();
  store_y(s, p, batch, t0, c0);
}

// CTAs of layer_forward_kernel<E> the current device holds at once, asked once per device.
template <class E>
int64_t capacity() {
  static int64_t known[64] = {};  // 0: not asked yet (a benign race: every thread writes the same value)
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  if (device < 64 && known[device] > 0) return known[device];
  int sms = 0, per_sm = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layer_forward_kernel<E>, kThreads, 0),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  const int64_t blocks = int64_t(sms) * per_sm;
  if (device < 64) known[device] = blocks;
  return blocks;
}

template <class E>
void launch_forward(const GatedScanLayerParams& p) {
  const dim3 grid(static_cast<unsigned>(layer_slabs(p.D)), static_cast<unsigned>(layer_chunks(p.T)),
                  static_cast<unsigned>(p.B));
  void* args[] = {const_cast<GatedScanLayerParams*>(&p)};
  check(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(layer_forward_kernel<E>), grid, dim3(kThreads),
                                    args, 0, static_cast<cudaStream_t>(p.stream)),
        "gated scan layer forward (cooperative launch)");
}

}  // namespace seqmix::cuda::layer
