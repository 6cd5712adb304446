// CUDA runtime helpers shared by the kernels: device queries and launch checks.
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/runtime.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda {

int device_count() {
  int count = 0;
  // No driver or no GPU is not an error for the library: it means no CUDA device.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string("seqmix: CUDA error in ") + what + ": " + cudaGetErrorString(status));
}

}  // namespace seqmix::cuda
