// Explicit instantiation: out = a·bᵀ (a [M, K], b [N, K] row-major), bf16, no fusion, in the
// tile cooperative_256x128_cluster2x1, with the persistent grid limited to a given number of
// SMs (gate_beside.hpp): CUTLASS sizes the grid from KernelHardwareInfo, so a smaller
// sm_count (and at most sm_count / 2 clusters) leaves the other SMs to a side kernel.
#include <algorithm>

#include "cuda/chains/gate_beside.hpp"
#include "cuda/chains/plain_gemm.cuh"

namespace seqmix::cuda {

void gemm_nt_bf16_on_sms(int sms, GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows a, Rows b,
                         MutableRows out, void* stream) {
  constexpr GemmTile kTile = GemmTile::cooperative_256x128_cluster2x1;
  if (schedule.tile != kTile) throw Error("seqmix: chain GEMM on fewer SMs: built for cooperative 256x128 2x1 only");
  using G = gemm::Sm90Gemm<kTile, cutlass::bfloat16_t, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, void,
                           plain::Identity<cutlass::bfloat16_t>>;
  auto args = G::arguments(M, N, K, a.data, a.stride, b.data, b.stride, nullptr, out.stride, out.data, out.stride,
                           plain::identity_arguments<G>(), schedule);
  // Clusters of 2 along M: the grid is max_active_clusters · 2 CTAs when that fits in
  // sm_count (CUTLASS's get_grid_shape), one persistent CTA a SM.
  constexpr int kCluster = 2;
  args.hw_info.sm_count = sms;
  args.hw_info.max_active_clusters = std::min(args.hw_info.max_active_clusters, sms / kCluster);
  G::run(args, static_cast<cudaStream_t>(stream), "chain GEMM (nt) on fewer SMs", schedule.programmatic);
}

}  // namespace seqmix::cuda
