// The chains' programmatic dependent launches (dependent_launch.hpp): the kernels' side is
// cuda/common/dependent_launch.cuh. The chains' kernels may also read, before their wait,
// what only earlier kernels write when the previous kernel lets them start only after its own
// wait (the chains' GEMMs do: at their last tile), since those have finished by then.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/chains/dependent_launch.hpp"
#include "cuda/common/dependent_launch.cuh"

namespace seqmix::cuda {

// kernel<<<grid, block, shared, stream>>>(args...), as a programmatic dependent of the
// stream's previous kernel when programmatic_launch_enabled().
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                      const char* what, Args&&... args) {
  launch_maybe_programmatic(programmatic_launch_enabled(), kernel, grid, block, shared, stream, what,
                            std::forward<Args>(args)...);
}

}  // namespace seqmix::cuda
