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

int multiprocessor_count() {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute (SM count)");
  return sms;
}

}  // namespace seqmix::cuda

#include "cuda/common/device.hpp"

namespace seqmix::cuda {

DeviceGuard::DeviceGuard(int index) : previous_(-1) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

void copy_to_host(void* host, const void* device, size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (device to host)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

}  // namespace seqmix::cuda
