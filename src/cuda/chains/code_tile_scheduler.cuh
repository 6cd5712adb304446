// The persistent tile order of the GEMM that computes GLA's low-rank gate beside its tiles
// (gate_epilogue.cuh). The tiles of the last column tile (the code columns u) come first:
// every other tile's gate rows wait for their band's u, so the code tiles go in the first
// round, one a cluster, and every other tile keeps the raster order after them (NOTES.md,
// "The gate in the epilogue producer warp").
//
// Cluster units: a cluster of cm × 1 CTAs works on cm row tiles of one column tile at a
// time, as in CUTLASS's scheduler. Positions p = round · clusters + cluster; the first
// row_units positions are the code units.
#pragma once

#include <cutlass/gemm/kernel/sm90_tile_scheduler.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <cute/tensor.hpp>

#include <cstdint>

namespace seqmix::cuda::gemm {

struct CodeTilesFirstTag {};

// Clusters lie along x in the grid CUTLASS's scheduler launches (cm × 1 CTAs, cm along M).
class CodeTilesFirstScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using Base::Base;
  using typename Base::Params;
  using typename Base::WorkTileInfo;

  // Which unit a cluster works on at position p.
  struct Order {
    int64_t row_units = 0, column_tiles = 0, clusters = 1;
    bool along_n = false;  // the non-code units' raster: column tiles fastest

    CUTLASS_HOST_DEVICE int64_t units() const { return row_units * column_tiles; }

    // (row unit, column tile) at position p < units().
    CUTLASS_HOST_DEVICE void unit_at(int64_t p, int64_t& row_unit, int64_t& column) const {
      if (p < row_units) {
        row_unit = p, column = column_tiles - 1;
        return;
      }
      const int64_t q = p - row_units, width = column_tiles - 1;
      if (along_n) row_unit = q / width, column = q % width;
      else row_unit = q % row_units, column = q / row_units;
    }
  };

  CUTLASS_DEVICE explicit CodeTilesFirstScheduler(Params const& params) : Base(params) {
#if defined(__CUDA_ARCH__)
    const int cm = static_cast<int>(params.cluster_shape_m_);
    order_.row_units = params.problem_tiles_m_;
    order_.column_tiles = params.problem_tiles_n_;
    order_.clusters = int64_t(gridDim.x) * gridDim.y / cm;
    order_.along_n = params.raster_order_ == RasterOrder::AlongN;
    position_ = blockIdx.x / cm + int64_t(blockIdx.y) * (gridDim.x / cm);
    cta_m_in_cluster_ = blockIdx.x % cm;
    cluster_m_ = cm;
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }
  CUTLASS_DEVICE WorkTileInfo get_current_work() const { return work_at(position_); }
  CUTLASS_DEVICE void advance_to_next_work(uint32_t count = 1) { position_ += order_.clusters * int64_t(count); }
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }
  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }
  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t count = 1) const {
    return !work_at(position_ + order_.clusters * int64_t(count)).is_valid();
  }

 private:
  CUTLASS_DEVICE WorkTileInfo work_at(int64_t p) const {
    if (p >= order_.units()) return WorkTileInfo::invalid_work_tile();
    int64_t row_unit = 0, column = 0;
    order_.unit_at(p, row_unit, column);
    return {static_cast<int32_t>(row_unit * cluster_m_ + cta_m_in_cluster_), static_cast<int32_t>(column), 0, true};
  }

  Order order_;
  int64_t position_ = 0;
  int cta_m_in_cluster_ = 0, cluster_m_ = 1;
};

}  // namespace seqmix::cuda::gemm

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t kStages>
struct TileSchedulerSelector<seqmix::cuda::gemm::CodeTilesFirstTag, ArchTag, TileShape, ClusterShape, kStages> {
  static_assert(cute::size<1>(ClusterShape{}) == 1, "clusters along M only");
  using Scheduler = seqmix::cuda::gemm::CodeTilesFirstScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
