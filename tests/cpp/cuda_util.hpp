// Device copies of HostTensors for the GPU tests, and the skip for machines without a GPU.
#pragma once

#include <cuda_runtime.h>

#include "seqmix/runtime.hpp"
#include "test_util.hpp"

namespace seqmix::test {

// Skips the test, saying why, when no CUDA device can run it.
#define SKIP_WITHOUT_CUDA_DEVICE()                                                   \
  do {                                                                               \
    if (seqmix::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run"; \
  } while (0)

inline void cuda_ok(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

// A device buffer holding a copy of a HostTensor's bytes, with the same shape and strides.
struct DeviceTensor {
  void* ptr = nullptr;
  size_t bytes = 0;
  Tensor view;

  explicit DeviceTensor(const HostTensor& host) : bytes(host.storage.size()) {
    cuda_ok(cudaMalloc(&ptr, bytes));
    cuda_ok(cudaMemcpy(ptr, host.storage.data(), bytes, cudaMemcpyHostToDevice));
    view = host.view;
    view.data = ptr;
    view.device = Device::cuda(0);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(ptr); }

  operator const Tensor&() const { return view; }
  // Copies the device bytes back into `host` (same shape) and returns its values.
  std::vector<double> values(HostTensor& host) const {
    cuda_ok(cudaDeviceSynchronize());
    cuda_ok(cudaMemcpy(host.storage.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return host.values();
  }
};

}  // namespace seqmix::test
