// CUTLASS's sm90 stream-K tile scheduler, usable with the grid dependency control the chains
// compile CUTLASS with (gemm_sm90.cuh). With CUTLASS_ENABLE_GDC_FOR_SM90 the cooperative
// kernel asks its scheduler is_last_tile() to let the next grid launch early; CUTLASS 4.2's
// stream-K scheduler declares it const but passes a member by non-const reference, so it
// does not compile. Here it answers false: the next grid then launches when this one ends,
// which CUTLASS documents as a timing hint only, never a matter of correctness; the chains
// never launch a stream-K GEMM's successor as a programmatic dependent anyway.
#pragma once

#include <cutlass/gemm/kernel/sm90_tile_scheduler_stream_k.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

namespace seqmix::cuda::gemm {

struct StreamKTag {};

template <class TileShape, class ClusterShape>
class StreamKScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;

 public:
  using Base::Base;
  using typename Base::WorkTileInfo;

  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo, uint32_t = 1) const { return false; }
};

}  // namespace seqmix::cuda::gemm

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t kStages>
struct TileSchedulerSelector<seqmix::cuda::gemm::StreamKTag, ArchTag, TileShape, ClusterShape, kStages> {
  using Scheduler = seqmix::cuda::gemm::StreamKScheduler<TileShape, ClusterShape>;
};

}  // namespace cutlass::gemm::kernel::detail
