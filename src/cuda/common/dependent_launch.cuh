// Programmatic dependent launch (PDL): a kernel launched as a programmatic dependent of the
// stream's previous kernel may start its blocks once every block of that kernel has let it
// (allow_next_grid) or exited, on the SMs that kernel leaves free, instead of the launch
// waiting for it to complete and flush. Such a kernel calls wait_for_previous_grid() in every
// block before it reads what the previous kernel writes or writes what that kernel reads;
// what only earlier kernels wrote it may read at once, since the previous kernel itself
// started after they completed.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/runtime.cuh"

namespace seqmix::cuda {

// griddepcontrol exists from sm_90 on; before, a launch waits for the previous kernel anyway.
// Both are no-ops in a kernel that was launched normally.
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
// stream's previous kernel when `programmatic`; checked, `what` naming it in errors.
template <class... Params, class... Args>
void launch_maybe_programmatic(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                               cudaStream_t stream, const char* what, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace seqmix::cuda
