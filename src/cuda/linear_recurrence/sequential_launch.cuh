// The sequential kernel's launcher: the padded state size N and the column slice MC
// from the shape, the shared-memory opt-in, the grid.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/linear_recurrence/methods.hpp"
#include "cuda/linear_recurrence/sequential.cuh"

namespace seqmix::cuda::linrec {

template <class T, int N, int MC>
void launch_sequential_config(const SeqParams& p, int64_t G, cudaStream_t stream) {
  using Cfg = SeqConfig<T, N, MC>;
  const auto kernel = sequential_kernel<T, N, MC>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes()),
        "cudaFuncSetAttribute (sequential)");
  const unsigned chains = p.chains[1].steps > 0 ? 2u : 1u;
  const dim3 grid(static_cast<unsigned>(G * p.col_blocks), chains);
  kernel<<<grid, kThreads, Cfg::smem_bytes(), stream>>>(p);
  check_launch("linear_recurrence sequential");
}

template <class T, int MC>
void launch_sequential_columns(const SeqParams& p, int64_t G, cudaStream_t stream) {
  if (p.n <= 32) launch_sequential_config<T, 32, MC>(p, G, stream);
  else if (p.n <= 64) launch_sequential_config<T, 64, MC>(p, G, stream);
  else launch_sequential_config<T, 128, MC>(p, G, stream);
}

template <class T>
void launch_sequential(const SeqParams& params, int64_t G, void* stream) {
  SeqParams p = params;
  const auto s = static_cast<cudaStream_t>(stream);
  if (p.m == 1) {
    p.col_blocks = 1;
    launch_sequential_columns<T, 1>(p, G, s);
  } else {
    p.col_blocks = static_cast<int>((p.m + 7) / 8);
    launch_sequential_columns<T, 8>(p, G, s);
  }
}

}  // namespace seqmix::cuda::linrec
