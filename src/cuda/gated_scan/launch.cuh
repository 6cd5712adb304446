// Launchers: the grid, the split decision, and the launches in order.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/gated_scan/backward.cuh"

namespace seqmix::cuda::scan {

// Splits per sequence so that (sequences × slabs × splits) blocks fill the GPU twice
// over; 1 when the problem already does, or when there is no workspace for split maps.
inline int64_t choose_splits(const GatedScanParams& p, int64_t slabs) {
  if (!p.workspace) return 1;
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  const int64_t blocks = p.seq.num_sequences * slabs, target = 2 * static_cast<int64_t>(sms);
  const int64_t tiles = scan_tiles(p.seq.T);
  if (blocks >= target || tiles <= 1) return 1;
  return std::min(max_splits(p.seq.num_sequences, tiles), (target + blocks - 1) / blocks);
}

// The grid, with p.split_tiles set for the chosen number of splits.
template <class T>
dim3 plan(GatedScanParams& p) {
  const int64_t slabs = num_slabs<T>(p.D), tiles = scan_tiles(p.seq.T);
  int64_t splits = choose_splits(p, slabs);
  p.split_tiles = splits > 1 ? (tiles + splits - 1) / splits : 0;
  if (splits > 1) splits = (tiles + p.split_tiles - 1) / p.split_tiles;
  return dim3(static_cast<unsigned>(slabs), static_cast<unsigned>(p.seq.num_sequences), static_cast<unsigned>(splits));
}

template <class T>
void launch_forward(GatedScanParams p) {
  const dim3 grid = plan<T>(p);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.split_tiles > 0) {
    summary_kernel<T, false><<<grid, kThreads, 0, stream>>>(p);
    check_launch("gated_scan forward split maps");
  }
  forward_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  check_launch("gated_scan forward");
}

template <class T>
void launch_backward(GatedScanParams p) {
  const dim3 grid = plan<T>(p);
  const auto stream = static_cast<cudaStream_t>(p.stream);
  if (p.split_tiles > 0) {
    if (!p.tile_states) {  // the entering states are recomputed from the forward split maps
      summary_kernel<T, false><<<grid, kThreads, 0, stream>>>(p);
      check_launch("gated_scan backward forward split maps");
    }
    summary_kernel<T, true><<<grid, kThreads, 0, stream>>>(p);
    check_launch("gated_scan backward reverse split maps");
  }
  backward_kernel<T><<<grid, kThreads, 0, stream>>>(p);
  check_launch("gated_scan backward");
}

}  // namespace seqmix::cuda::scan
