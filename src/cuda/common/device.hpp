// Host-side CUDA helpers callable from code compiled without CUDA headers (src/core).
#pragma once

#include <cstddef>

namespace seqmix::cuda {

// Makes `index` the current device for its lifetime, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// Copies `bytes` from device memory to the host, ordered on `stream` (synchronous).
void copy_to_host(void* host, const void* device, size_t bytes, void* stream);

}  // namespace seqmix::cuda
