// GLA's low-rank gate inside the projection GEMM's epilogue (NOTES.md, "The gate in the
// GEMM's epilogue"). The chain's code columns u = x·W_codeᵀ (rank ≤ 16) are the first
// columns of the GEMM's last column tile; when a CTA has finished that tile's K loop, u of
// its rows is in its accumulators, already laid out as the A operand of mma.sync m16n8k16.
// Its epilogue then writes, besides the tile itself, the gate of its rows:
//   gate [rows, width] = logsigmoid(bf16(u)·W_gateᵀ + bias)·scale
// with the narrow-K kernel's slabs, products and activation (narrow_projection.cuh), so the
// result is bit for bit what that kernel computes from the u the GEMM writes. The aim: no
// kernel after the GEMM, the gate's work on the clusters the tile order leaves with a spare
// round (code_tile_scheduler.cuh). Measured: a code tile's gate took ~44 µs, 1.8 tiles'
// time, so the one GEMM was slower than the two calls and is off by default (NOTES.md).
//
// It wraps the epilogue CUTLASS's builder makes (its store writes the tile as before).
#pragma once

#include <cute/tensor.hpp>

#include <cstdint>

#include "cuda/chains/narrow_projection.cuh"

namespace seqmix::cuda::gemm {

// The gate the epilogue of the code tile writes. weight [width, rank] and bias [width]
// (or null; 16-byte aligned) bf16; out [rows, width] bf16, 16-byte aligned rows; width a
// multiple of 32.
struct GateInEpilogue {
  const narrow::bf16* weight = nullptr;
  int64_t weight_stride = 0;
  int rank = 0, width = 0;
  const narrow::bf16* bias = nullptr;
  float scale = 1.f;
  narrow::bf16* out = nullptr;
  int64_t out_stride = 0;
  int code_tile = -1;  // the column tile whose first columns are u
};

constexpr int kLogSigmoid = 3;  // seqmix::Activation::logsigmoid, as the narrow-K kernel's codes

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

  // The tile as the builder's epilogue stores it; then, on the code tile, the gate.
  template <class ProblemShapeMNKL, class TileShapeMNK, class TileCoordMNKL, class AccEngine, class AccLayout,
            class TiledMma>
  CUTLASS_DEVICE auto store(LoadPipeline load_pipeline, LoadPipelineState load_state, StorePipeline store_pipeline,
                            StorePipelineState store_state, ProblemShapeMNKL problem_shape, TileShapeMNK tile_shape,
                            TileCoordMNKL tile_coord, cute::Tensor<AccEngine, AccLayout> accumulators,
                            TiledMma tiled_mma, int thread_idx, TensorStorage& shared_tensors, int subtile_idx = -1) {
    auto next = Built::store(load_pipeline, load_state, store_pipeline, store_state, problem_shape, tile_shape,
                             tile_coord, accumulators, tiled_mma, thread_idx, shared_tensors, subtile_idx);
    if (static_cast<int>(cute::get<1>(tile_coord)) == gate_.code_tile)
      write_gate(cute::get<0>(problem_shape), tile_shape, cute::get<0>(tile_coord), accumulators, tiled_mma,
                 thread_idx);
    return next;
  }

 private:
  // The accumulators: ((2 columns, 2 row halves, N/8 column groups), atoms along M, along N);
  // a lane's columns 2t, 2t + 1 (+ 8 per group) of rows g and g + 8 of each 64-row atom
  // (t = lane % 4, g = lane / 4): column groups 0 and 1 are the m16n8k16 A fragment of u.
  template <class TileShapeMNK, class AccEngine, class AccLayout, class TiledMma>
  CUTLASS_DEVICE void write_gate(int rows, TileShapeMNK tile_shape, int m_tile,
                                 cute::Tensor<AccEngine, AccLayout> const& accumulators, TiledMma tiled_mma,
                                 int thread_idx) const {
    using namespace cute;
    static_assert(size<0, 0>(AccLayout{}) == 2 && size<0, 1>(AccLayout{}) == 2 && size<0, 2>(AccLayout{}) >= 2,
                  "wgmma's accumulator layout: column pairs, two row halves, 8-column groups");
    static_assert(size<2>(AccLayout{}) == 1, "one atom along N covers the code columns");
    constexpr int kAtoms = size<1>(AccLayout{});
    const int lane = thread_idx % 32;

    // Each fragment's rows in the problem, from the MMA's own partition of the tile.
    Tensor coordinates = tiled_mma.get_thread_slice(thread_idx)
                             .partition_C(make_identity_tensor(take<0, 2>(tile_shape)));  // (MMA, MMA_M, MMA_N)
    const int first_row = m_tile * int(size<0>(tile_shape));
    uint32_t u[kAtoms][4];
    int row[kAtoms][2];
    CUTLASS_PRAGMA_UNROLL
    for (int atom = 0; atom < kAtoms; ++atom)
      CUTLASS_PRAGMA_UNROLL
      for (int half = 0; half < 2; ++half) {
        row[atom][half] = first_row + get<0>(coordinates(make_coord(0, half, 0), atom, 0));
        CUTLASS_PRAGMA_UNROLL
        for (int group = 0; group < 2; ++group)
          u[atom][half + 2 * group] = narrow::bf16_pair(accumulators(make_coord(0, half, group), atom, 0),
                                                        accumulators(make_coord(1, half, group), atom, 0));
      }

    // Slab by slab (32 gate columns, the narrow-K kernel's order), every atom's rows.
    const int k = lane % 4 * 2;
    int code[narrow::kColumnsPerLane];
    float scale[narrow::kColumnsPerLane];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < narrow::kColumnsPerLane; ++j) code[j] = kLogSigmoid, scale[j] = gate_.scale;
    // Rank 16 with 4-byte pairs: every weight pair is one plain load (the checked form is
    // ~25 instructions a pair with its branches, 8 pairs a slab).
    const bool whole_weight = gate_.rank == 16 && gate_.weight_stride % 2 == 0 &&
                              reinterpret_cast<uintptr_t>(gate_.weight) % 4 == 0;
    // A slab's weight fragments and a lane's 8 bias values (one 16-byte load: the host
    // takes this path only for a 16-byte aligned bias). W_gate (32 KB) does not stay in the
    // L1 beside the GEMM's shared memory, so each load is an L2 round trip of about a
    // microsecond under the GEMM's traffic: the slabs go in groups of kGroup, the next
    // group's operands loaded while this group's outputs are computed (measured: one slab
    // at a time, each waiting for its loads, took ~1.6 µs a slab).
    struct Slab {
      uint32_t b[4][2];
      uint4 bias;
    };
    const auto load = [&](int slab, Slab& s) {
      CUTLASS_PRAGMA_UNROLL
      for (int t = 0; t < 4; ++t) {
        const int column = slab + narrow::slab_column(t, lane / 4);
        if (whole_weight) {
          const narrow::bf16* at = gate_.weight + int64_t(column) * gate_.weight_stride + k;
          s.b[t][0] = *reinterpret_cast<const uint32_t*>(at);
          s.b[t][1] = *reinterpret_cast<const uint32_t*>(at + 8);
        } else {
          s.b[t][0] = narrow::pair(gate_.weight, gate_.weight_stride, column, gate_.width, k, gate_.rank);
          s.b[t][1] = narrow::pair(gate_.weight, gate_.weight_stride, column, gate_.width, k + 8, gate_.rank);
        }
      }
      const int first = slab + lane % 4 * narrow::kColumnsPerLane;
      s.bias = gate_.bias ? *reinterpret_cast<const uint4*>(gate_.bias + first) : make_uint4(0, 0, 0, 0);
    };
    const auto compute = [&](int slab, const Slab& s) {
      const int first = slab + lane % 4 * narrow::kColumnsPerLane;
      float bias[narrow::kColumnsPerLane];
      narrow::unpack_row(s.bias, bias);
      // Every atom's products first (reorderable mma: measured with the ordered form, the
      // warps stalled on one row's chain of 8 outputs at a time, 2 warps a scheduler).
      float product[kAtoms][4][4] = {};
      CUTLASS_PRAGMA_UNROLL
      for (int atom = 0; atom < kAtoms; ++atom)
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < 4; ++t) narrow::mma_bf16<false>(product[atom][t], u[atom], s.b[t][0], s.b[t][1]);
      CUTLASS_PRAGMA_UNROLL
      for (int atom = 0; atom < kAtoms; ++atom) {
        CUTLASS_PRAGMA_UNROLL
        for (int half = 0; half < 2; ++half) {
          if (row[atom][half] >= rows) continue;
          float z[narrow::kColumnsPerLane], v[narrow::kColumnsPerLane];
          narrow::pre_activations(product[atom], half, bias, z);
          narrow::finish<narrow::Mode::forward, kLogSigmoid>(v, z, code, scale);
          narrow::store_whole_row(gate_.out + int64_t(row[atom][half]) * gate_.out_stride + first, v);
        }
      }
    };
    constexpr int kGroup = 4, kGroupColumns = kGroup * narrow::kSlabColumns;
    Slab next[kGroup];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kGroup; ++i)
      if (i * narrow::kSlabColumns < gate_.width) load(i * narrow::kSlabColumns, next[i]);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int group = 0; group < gate_.width; group += kGroupColumns) {
      Slab now[kGroup];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kGroup; ++i) {
        now[i] = next[i];
        const int ahead = group + kGroupColumns + i * narrow::kSlabColumns;
        if (ahead < gate_.width) load(ahead, next[i]);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kGroup; ++i)
        if (group + i * narrow::kSlabColumns < gate_.width) compute(group + i * narrow::kSlabColumns, now[i]);
    }
  }

  GateInEpilogue gate_;
};

}  // namespace seqmix::cuda::gemm
