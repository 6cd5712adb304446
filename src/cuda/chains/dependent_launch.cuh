// The kernels' side of a programmatic dependent launch (dependent_launch.hpp), and the launch
// itself. A kernel launched with launch_dependent must call wait_for_previous_grid() in every
// block before it writes global memory or reads what the previous kernel writes (a no-op
// when it was launched normally). It may read before it what only earlier kernels write when
// the previous kernel lets it start only after its own wait (the chains' GEMMs do: at their
// last tile), since those have finished by then; a kernel
// may call allow_next_grid() to let a programmatic dependent start before it finishes (a
// hint: the dependent still waits for its completion before reading what it wrote).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/chains/dependent_launch.hpp"
#include "cuda/common/runtime.cuh"

namespace seqmix::cuda {

// griddepcontrol exists from sm_90 on; before, a launch waits for the previous kernel anyway.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent of the
// stream's previous kernel when programmatic_launch_enabled().
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                      const char* what, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch_enabled() ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace seqmix::cuda
