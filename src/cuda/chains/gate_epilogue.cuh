// GLA's low-rank gate computed inside the projection GEMM (NOTES.md, "The gate in the
// epilogue producer warp"). The chain's code columns u = x·W_codeᵀ (rank ≤ 16) are the first
// columns of the GEMM's last column tile, and the gate is
//   gate [rows, width] = logsigmoid(bf16(u)·W_gateᵀ + bias)·scale,
// bit for bit what the narrow-K kernel (narrow_projection.cuh) computes from the u the GEMM
// writes: the same m16n8k16 products, bias and activation.
//
// Who does what:
// - The code tiles run first (code_tile_scheduler.cuh). Their consumer threads, after the
//   tile's own store, write u (rounded to bf16, as the stored tile) to a [rows, 16] scratch,
//   fence, and count themselves into their band's counter.
// - The warp CUTLASS's cooperative kernel keeps for the epilogue's source loads (producer
//   warp 2; this epilogue reads no source, so it is otherwise idle) computes this CTA's share
//   of the gate: it waits for a band's count, then writes the band's gate rows while the
//   consumers run the GEMM's later tiles, in issue slots the mainloop leaves free.
// Measured: one warp a SM computes the gate too slowly to hide it under the GEMM (the GEMM
// ends waiting for it), so the path is off by default (NOTES.md).
// - That warp runs at the producer warpgroup's 40 registers: one n8 tile at a time, W_gate's
//   fragments read through L1 (a CTA works on one 256-column part of the gate, 8 KB of it).
//
// It wraps the epilogue CUTLASS's builder makes (its store writes the tile as before).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/chains/narrow_projection.cuh"

namespace seqmix::cuda::gemm {

// The gate. weight [width, rank] and bias [width] (or null; 16-byte aligned) bf16; out
// [rows, width] bf16 with 4-byte aligned rows; width a multiple of 32. u [rows, 16] and
// published [bands of kBandRows] are the call's scratch, the counts zeroed before the GEMM.
struct GateInEpilogue {
  const narrow::bf16* weight = nullptr;
  int64_t weight_stride = 0;
  int rank = 0, width = 0;
  const narrow::bf16* bias = nullptr;
  float scale = 1.f;
  narrow::bf16* out = nullptr;
  int64_t out_stride = 0;
  int code_tile = -1;  // the column tile whose first columns are u
  narrow::bf16* u = nullptr;
  int* published = nullptr;
  int rows = 0;
};

// The GEMM tile's rows (one band of u a code tile) and the consumer threads that publish it.
constexpr int kBandRows = 256, kPublishers = 256;
// A CTA's part of the gate's columns: W_gate's rows for it (8 KB at rank 16) stay in L1.
constexpr int kPartColumns = 256;

template <class Built>
struct GateEpilogue : Built {
  using typename Built::LoadPipeline;
  using typename Built::LoadPipelineState;
  using typename Built::StorePipeline;
  using typename Built::StorePipelineState;
  using typename Built::TensorStorage;

  struct Arguments : Built::Arguments {
    GateInEpilogue gate;
  };
  struct Params : Built::Params {
    GateInEpilogue gate;
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    Params params;
    static_cast<typename Built::Params&>(params) = Built::to_underlying_arguments(problem_shape, args, workspace);
    params.gate = args.gate;
    return params;
  }

  CUTLASS_HOST_DEVICE GateEpilogue(Params const& params, TensorStorage& shared_tensors)
      : Built(params, shared_tensors), gate_(params.gate) {}

  // The kernel runs the epilogue's load warp only when this says so; the builder's own store
  // asks its fusion, not this, so the consumers never wait for loads that are not made.
  CUTLASS_DEVICE bool is_producer_load_needed() const { return true; }

  // The load warp, once a tile: nothing to load.
  template <class... Args>
  CUTLASS_DEVICE LoadPipelineState load(LoadPipeline, LoadPipelineState state, Args&&...) {
    return state;
  }

  // The load warp, after its tiles: this CTA's share of the gate.
  CUTLASS_DEVICE void load_tail(LoadPipeline, LoadPipelineState) { gate_share(int(threadIdx.x) % 32); }

  // The tile as the builder's epilogue stores it; on a code tile, u published as well.
  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline load_pipeline, LoadPipelineState load_state, StorePipeline store_pipeline,
                            StorePipelineState store_state, ProblemShapeMNKL problem_shape, TileShapeMNK tile_shape,
                            TileCoordMNKL tile_coord, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, TensorStorage& shared_tensors, int subtile_idx = -1) {
    auto next = Built::store(load_pipeline, load_state, store_pipeline, store_state, problem_shape, tile_shape,
                             tile_coord, accumulators, tiled_mma, thread_idx, shared_tensors, subtile_idx);
    if (static_cast<int>(cute::get<1>(tile_coord)) == gate_.code_tile)
      publish_u(tile_shape, cute::get<0>(tile_coord), accumulators, tiled_mma, thread_idx);
    return next;
  }

 private:
  // The accumulators: ((2 columns, 2 row halves, N/8 column groups), atoms along M, along N);
  // a lane's columns 2t, 2t + 1 (+ 8 per group) of rows g and g + 8 of each 64-row atom
  // (t = lane % 4, g = lane / 4). Each lane writes its u values, then fences and counts
  // itself into the band. A tile wholly past the last row (a cluster's padding) publishes
  // nothing: no gate row reads it, and its band has no counter.
  template <class TileShapeMNK, class AccEngine, class AccLayout, class TiledMma>
  CUTLASS_DEVICE void publish_u(TileShapeMNK tile_shape, int m_tile,
                                cute::Tensor<AccEngine, AccLayout> const& accumulators, TiledMma tiled_mma,
                                int thread_idx) const {
    using namespace cute;
    static_assert(size<0, 0>(AccLayout{}) == 2 && size<0, 1>(AccLayout{}) == 2 && size<0, 2>(AccLayout{}) >= 2,
                  "wgmma's accumulator layout: column pairs, two row halves, 8-column groups");
    static_assert(size<2>(AccLayout{}) == 1, "one atom along N covers the code columns");
    static_assert(int(size<0>(TileShapeMNK{})) == kBandRows, "one band a tile");
    constexpr int kAtoms = size<1>(AccLayout{});
    const int first_row = m_tile * kBandRows;
    if (first_row >= gate_.rows) return;
    const int lane = thread_idx % 32;
    Tensor coordinates = tiled_mma.get_thread_slice(thread_idx)
                             .partition_C(make_identity_tensor(take<0, 2>(tile_shape)));  // (MMA, MMA_M, MMA_N)
    CUTLASS_PRAGMA_UNROLL
    for (int atom = 0; atom < kAtoms; ++atom)
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        const int row = first_row + get<0>(coordinates(make_coord(0, half, 0), atom, 0));
        if (row >= gate_.rows) continue;
        CUTLASS_PRAGMA_UNROLL
        for (int group = 0; group < 2; ++group)
          *reinterpret_cast<uint32_t*>(gate_.u + int64_t(row) * 16 + group * 8 + lane % 4 * 2) =
              narrow::bf16_pair(accumulators(make_coord(0, half, group), atom, 0),
                                accumulators(make_coord(1, half, group), atom, 0));
      }
    __threadfence();
    atomicAdd(gate_.published + m_tile, 1);
  }

  // Waits (one lane polling, the others held at the warp barrier) until all publishers of
  // `band` have counted themselves.
  CUTLASS_DEVICE void wait_for_band(int band, int lane) const {
    if (lane == 0) {
      const int* count = gate_.published + band;
      int seen;
      while (true) {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        if (seen >= kPublishers) break;
        __nanosleep(256);
      }
    }
    __syncwarp();
  }

  // Items of 16 rows × one part of the columns, dealt over the grid's CTAs (item i to CTA
  // i mod CTAs, the part i mod parts: with CTAs a multiple of parts, each CTA keeps one
  // part). Per item: u's fragment through L2 (written by another SM in this kernel), then
  // gate_columns.
  CUTLASS_DEVICE void gate_share(int lane) const {
    const bool whole_weight =
        gate_.rank == 16 && gate_.weight_stride % 2 == 0 && reinterpret_cast<uintptr_t>(gate_.weight) % 4 == 0;
    if (whole_weight) gate_.bias ? gate_share<true, true>(lane) : gate_share<true, false>(lane);
    else gate_.bias ? gate_share<false, true>(lane) : gate_share<false, false>(lane);
  }

  // kWhole: rank 16 with 4-byte weight pairs, each pair one load; kBias: a bias.
  template <bool kWhole, bool kBias>
  CUTLASS_DEVICE void gate_share(int lane) const {
    const int ctas = int(gridDim.x * gridDim.y * gridDim.z);
    const int cta = int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    const int parts = (gate_.width + kPartColumns - 1) / kPartColumns;
    const int row_tiles = (gate_.rows + narrow::kTileRows - 1) / narrow::kTileRows;
    const int k = lane % 4 * 2;
    int ready_band = -1;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int item = cta; item < row_tiles * parts; item += ctas) {
      const int part = item % parts, row = item / parts * narrow::kTileRows + lane / 4;
      if (row / kBandRows != ready_band) {
        ready_band = row / kBandRows;  // the same for all lanes: 16-row items inside 256-row bands
        wait_for_band(ready_band, lane);
      }
      const bool low = row < gate_.rows, high = row + 8 < gate_.rows;
      const auto* u = reinterpret_cast<const unsigned int*>(gate_.u + int64_t(row) * 16 + k);
      const uint32_t a[4] = {low ? __ldcg(u) : 0u, high ? __ldcg(u + 4 * 16) : 0u, low ? __ldcg(u + 4) : 0u,
                             high ? __ldcg(u + 4 * 16 + 4) : 0u};
      gate_columns<kWhole, kBias>(a, row, part * kPartColumns, min(gate_.width, (part + 1) * kPartColumns), lane);
    }
  }

  // Columns [first, end) of the 16 rows whose fragment is `a` (this lane's rows `row` and
  // row + 8), one n8 tile at a time: W_gate's fragment and the bias pair (through L1), the
  // product, the activation, and each row's pair stored.
  template <bool kWhole, bool kBias>
  CUTLASS_DEVICE void gate_columns(const uint32_t (&a)[4], int row, int first, int end, int lane) const {
    const int n = lane / 4, k = lane % 4 * 2;
    const bool low = row < gate_.rows, high = row + 8 < gate_.rows;
    narrow::bf16* out = gate_.out + int64_t(row) * gate_.out_stride + k;
#pragma unroll 2
    for (int column = first; column < end; column += 8) {
      uint32_t b0, b1;
      if constexpr (kWhole) {
        const auto* w = reinterpret_cast<const unsigned int*>(gate_.weight + int64_t(column + n) * gate_.weight_stride + k);
        b0 = __ldg(w), b1 = __ldg(w + 4);
      } else {
        b0 = narrow::pair(gate_.weight, gate_.weight_stride, column + n, gate_.width, k, gate_.rank);
        b1 = narrow::pair(gate_.weight, gate_.weight_stride, column + n, gate_.width, k + 8, gate_.rank);
      }
      float2 bias = make_float2(0.f, 0.f);
      if constexpr (kBias) {
        const unsigned int pair = __ldg(reinterpret_cast<const unsigned int*>(gate_.bias + column + k));
        bias = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pair));
      }
      float d[4] = {};
      narrow::mma_bf16<false>(d, a, b0, b1);
      const float v0 = narrow::log_sigmoid_fast(d[0] + bias.x) * gate_.scale;
      const float v1 = narrow::log_sigmoid_fast(d[1] + bias.y) * gate_.scale;
      const float v2 = narrow::log_sigmoid_fast(d[2] + bias.x) * gate_.scale;
      const float v3 = narrow::log_sigmoid_fast(d[3] + bias.y) * gate_.scale;
      if (low) *reinterpret_cast<uint32_t*>(out + column) = narrow::bf16_pair(v0, v1);
      if (high) *reinterpret_cast<uint32_t*>(out + 8 * gate_.out_stride + column) = narrow::bf16_pair(v2, v3);
    }
  }

  GateInEpilogue gate_;
};

}  // namespace seqmix::cuda::gemm
