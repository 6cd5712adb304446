// Helpers of the chains' launchers. Stream-ordered scratch: allocated from the device's
// scratch pool (common/runtime.cuh scratch_pool) on the caller's stream and given back on that
// stream when it leaves scope, so kernels queued before the free still see it. The chains'
// intermediates (the column vectors, dz, the normalised gated heads) live here: the public API
// has no workspace argument, as for gla (src/cuda/gla/launch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/runtime.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::chains {

using bf16 = __nv_bfloat16;

template <class T>
class Scratch {
 public:
  Scratch(size_t count, cudaStream_t stream) : stream_(stream) {
    if (count > 0)
      check(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&data_), count * sizeof(T), scratch_pool(), stream),
            "chain scratch");  // the pool that keeps its memory (common/runtime.cuh), under capture too
  }
  ~Scratch() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_;
};

inline int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Blocks for a grid-stride loop over `work` items: enough to fill the device, no more.
inline unsigned grid_for(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

namespace {
// out = in rounded to bf16 (the f32 sums of a reduction, finished).
__global__ void to_bf16(const float* in, int64_t n, bf16* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}
}  // namespace

}  // namespace seqmix::cuda::chains
