// The persistent tile order of the GEMM whose epilogue computes GLA's low-rank gate
// (gate_epilogue.cuh). The tiles of the last column tile (the code columns) take the gate's
// extra epilogue, about half a tile's time; in CUTLASS's order they land wherever the raster
// puts them, so a cluster may hold several and the whole GEMM waits for it. Here the code
// tiles go to the clusters that have one tile fewer than the others (the grid's last,
// partial round leaves them idle), at most as many a cluster as that idle round holds, and
// every other tile keeps the raster order (NOTES.md, "The gate in the GEMM's epilogue").
//
// Cluster units: a cluster of cm × 1 CTAs works on cm row tiles of one column tile at a
// time, as in CUTLASS's scheduler. With U units on G clusters, s = U mod G clusters hold one
// unit more than the rest; the code units (one a row of clusters) are dealt to the other
// G − s clusters (all G when s = 0), one a cluster per round from the first round on.
#pragma once

#include <cutlass/gemm/kernel/sm90_tile_scheduler.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <cute/tensor.hpp>

#include <cstdint>

namespace seqmix::cuda::gemm {

struct CodeTilesLastTag {};

// Clusters lie along x in the grid CUTLASS's scheduler launches (cm × 1 CTAs, cm along M).
class CodeTilesLastScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using Base::Base;
  using typename Base::Params;
  using typename Base::WorkTileInfo;

  // Which unit a cluster works on at position p = round · clusters + cluster.
  struct Order {
    int64_t row_units = 0, column_tiles = 0, clusters = 1;
    bool along_n = false;  // the non-code units' raster: column tiles fastest

    CUTLASS_HOST_DEVICE int64_t units() const { return row_units * column_tiles; }
    // The clusters that take code units, [first_slack, clusters), and how many.
    CUTLASS_HOST_DEVICE int64_t first_slack() const { return units() % clusters; }
    CUTLASS_HOST_DEVICE int64_t slack() const { return clusters - first_slack(); }

    // (row unit, column tile) at position p < units().
    CUTLASS_HOST_DEVICE void unit_at(int64_t p, int64_t& row_unit, int64_t& column) const {
      const int64_t round = p / clusters, cluster = p % clusters, c0 = first_slack(), s = slack();
      const int64_t codes = row_units;
      if (cluster >= c0) {
        const int64_t code = round * s + (cluster - c0);
        if (code < codes) {
          row_unit = code, column = column_tiles - 1;
          return;
        }
      }
      // Code units at positions before p: whole rounds, then this round's slack clusters.
      const int64_t in_rounds = round * s < codes ? round * s : codes;
      int64_t in_round = 0;
      if (cluster > c0 && codes > round * s) {
        in_round = cluster - c0;
        if (in_round > codes - round * s) in_round = codes - round * s;
      }
      const int64_t q = p - in_rounds - in_round, width = column_tiles - 1;
      if (along_n) row_unit = q / width, column = q % width;
      else row_unit = q % row_units, column = q / row_units;
    }
  };

  CUTLASS_DEVICE explicit CodeTilesLastScheduler(Params const& params) : Base(params) {
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
struct TileSchedulerSelector<seqmix::cuda::gemm::CodeTilesLastTag, ArchTag, TileShape, ClusterShape, kStages> {
  static_assert(cute::size<1>(ClusterShape{}) == 1, "clusters along M only");
  using Scheduler = seqmix::cuda::gemm::CodeTilesLastScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
