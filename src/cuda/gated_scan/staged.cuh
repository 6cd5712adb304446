// The staged layout of the gated-scan kernels: tiles copied into shared memory by the
// copy engine, so the scanning threads spend no instructions on loads in flight.
//
// A block has kThreads scanning threads and one more warp that issues the copies. Each
// tile (kScanTileSteps steps × one slab of kLanes 8-byte vectors, one box per operand)
// goes into one of kStages shared-memory stages through a 3-D tensor map of the
// [B, T, D] operand; a stage's `full` barrier completes when its boxes have landed and
// its `empty` barrier when every scanning warp is done with it. Thread (lane, segment)
// reads kSteps consecutive rows of its lane's vector from the stage. Rows past the end
// of a sequence (the next sequence's, or the zeros the engine fills in past the tensor)
// are masked to the identity map; channels past D are never stored.
#pragma once

#include <cuda.h>

#include "cuda/common/tma.cuh"
#include "cuda/gated_scan/summary.cuh"

namespace seqmix::cuda::scan {

// One tensor map per operand a kernel reads (z and dy unused where absent).
struct StagedMaps {
  CUtensorMap a, b, z, dy;
};

template <class T, int kLanesT, int kStagesT, int kOperandsT>
struct StagedLayout {
  static constexpr int kLanes = kLanesT, kStages = kStagesT, kOperands = kOperandsT;
  static constexpr int kVec = Pack<T>::kVec;
  static constexpr int kSegments = kThreads / kLanes;
  static constexpr int kSteps = kScanTileSteps / kSegments;  // rows per thread per tile
  static constexpr int kRowBytes = kLanes * kVecBytes;
  static constexpr int kBoxBytes = kScanTileSteps * kRowBytes;
  static constexpr int kSlabChannels = kLanes * kVec;
  static constexpr int kSharedBytes = kStages * kOperands * kBoxBytes;
  static_assert(kSegments * kSteps == kScanTileSteps, "a tile's rows must split evenly over the segments");
  static_assert(kScanTileSteps <= 256, "a box has at most 256 rows");

  static __device__ unsigned char* box(unsigned char* stages, int stage, int operand) {
    return stages + (stage * kOperands + operand) * kBoxBytes;
  }
  // The thread's vector in row `row` of a box.
  static __device__ Pack<T> vector(const unsigned char* box, int row, int lane) {
    Pack<T> v;
    v.raw = *reinterpret_cast<const typename Pack<T>::Raw*>(box + row * kRowBytes + lane * kVecBytes);
    return v;
  }
};

template <int kStages>
struct StageBarriers {
  uint64_t full[kStages], empty[kStages];

  // One thread initialises; the caller's block barrier then publishes them.
  __device__ void init() {
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(&full[s], 1);
      tma::barrier_init(&empty[s], kThreads / 32);
    }
    tma::barrier_init_fence();
  }
  // Use k of a stage (k counts the tiles a block has taken, from 0): the stage and the
  // parity of its phase.
  static __device__ int stage(int64_t k) { return static_cast<int>(k % kStages); }
  static __device__ uint32_t parity(int64_t k) { return static_cast<uint32_t>((k / kStages) & 1); }

  __device__ void wait_full(int64_t k) { tma::wait(&full[stage(k)], parity(k)); }
  // A scanning warp is done reading the stage of use k.
  __device__ void release(int64_t k) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) tma::arrive(&empty[stage(k)]);
  }
};

// The copy-issuing thread: for the block's tiles in order (`step` +1 forward, −1
// backward from `first`), waits for the stage to be free and copies one box of each of
// the first `operands` maps into it: a, b, z forward (step +1); a, b, dy, z backward.
template <class Layout>
__device__ void issue_copies(StageBarriers<Layout::kStages>& bars, unsigned char* stages, const StagedMaps& maps,
                             int operands, const BlockCoords& c, int64_t first, int64_t count, int step) {
  const CUtensorMap* const order[4] = {&maps.a, &maps.b, step > 0 ? &maps.z : &maps.dy, &maps.z};
  const int x = static_cast<int>(blockIdx.x) * Layout::kSlabChannels;
  const int z = static_cast<int>(c.batch);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t tile = first + k * step;
    const int s = bars.stage(k);
    tma::wait(&bars.empty[s], bars.parity(k) ^ 1);
    tma::arrive_expect_bytes(&bars.full[s], operands * Layout::kBoxBytes);
    const int y = static_cast<int>(c.start + tile * kScanTileSteps);
    for (int o = 0; o < operands; ++o) tma::load_box(Layout::box(stages, s, o), *order[o], x, y, z, &bars.full[s]);
  }
}

// The opening of every staged kernel: one thread initialises the stage barriers; the
// copy warp issues the boxes of the block's `count` tiles from `first` (step +1 or −1)
// and is then done. True for the copy warp's threads, which return.
template <class Layout>
__device__ bool copy_warp_done(StageBarriers<Layout::kStages>& bars, unsigned char* stages, const StagedMaps& maps,
                               int operands, const BlockCoords& c, int64_t first, int64_t count, int step) {
  if (threadIdx.x == 0) bars.init();
  __syncthreads();
  if (threadIdx.x < kThreads) return false;
  if (threadIdx.x == kThreads) issue_copies<Layout>(bars, stages, maps, operands, c, first, count, step);
  return true;
}

// How many of the kRows rows from time step t0 lie inside a sequence of `length` steps.
template <int kRows>
__device__ int rows_inside(int64_t length, int64_t t0) {
  return static_cast<int>(min(static_cast<int64_t>(kRows), max(length - t0, int64_t{0})));
}

// True when the block's slab of channels lies wholly below D.
template <class Layout>
__device__ bool whole_slab(int64_t D) {
  return (static_cast<int64_t>(blockIdx.x) + 1) * Layout::kSlabChannels <= D;
}

// Segment 0 publishes the carry the first tile starts from (the scan's first barrier
// orders it before every read), and writes the carry left after the last one.
template <int kVec, int kLanesT>
__device__ void publish_carry(ScanShared<kVec, kLanesT>& s, int lane, const float (&carry)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) s.carry[i][lane] = carry[i];
}
template <int kVec, int kLanesT>
__device__ void write_carry(const ScanShared<kVec, kLanesT>& s, const BlockCoords& c, const StateView& out,
                            int64_t n, int64_t D) {
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    if (c.d0 + i < D) out.data[n * out.stride + c.d0 + i] = s.carry[i][c.lane];
}

// Row pointers of one [B, T, D] output (absent: nullptr) for a thread's rows, moving one
// row per put, forward (direction 1) or backward in time (−1).
template <class T>
struct RowWriter {
  T* row;
  int64_t stride;
  __device__ RowWriter(const BtdView& v, const BlockCoords& c, int64_t t, int direction = 1)
      : row(v.data ? static_cast<T*>(v.data) + c.batch * v.stride_batch + (c.start + t) * v.stride_time + c.d0
                   : nullptr),
        stride(direction * v.stride_time) {}
  // Writes the vector at the current row (channels past D skipped) and moves on a row.
  template <int kVec>
  __device__ void put(const float (&values)[kVec], bool in_range, bool whole_slab, int64_t d0, int64_t D) {
    if (in_range && (whole_slab || d0 < D)) {  // D is a multiple of the vector here (vector_aligned)
      Pack<T> v;
#pragma unroll
      for (int i = 0; i < kVec; ++i) v.e[i] = Traits<T>::from_float(values[i]);
      __stcs(reinterpret_cast<typename Pack<T>::Raw*>(row), v.raw);
    }
    row += stride;
  }
};

}  // namespace seqmix::cuda::scan
