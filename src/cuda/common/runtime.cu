// CUDA runtime helpers shared by the kernels: device queries, launch checks and call scratch.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "cuda/common/environment.hpp"
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

cudaMemPool_t scratch_pool() {
  static std::mutex mutex;
  static cudaMemPool_t pools[64] = {};
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice (scratch pool)");
  if (device >= 64) throw Error("seqmix: scratch pool: device index above 63");
  std::lock_guard<std::mutex> lock(mutex);
  if (!pools[device]) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&pools[device], &props), "cudaMemPoolCreate (scratch pool)");
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pools[device], cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute (scratch pool)");
  }
  return pools[device];
}

void* stream_scratch(size_t bytes, cudaStream_t stream, const char* what) {
  // SEQMIX_SCRATCH_POOL_KEEP=0 (read once): the default pool outside capture too, to time the difference.
  static const bool keep = flag_from_environment("SEQMIX_SCRATCH_POOL_KEEP", true);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), what);
  void* ptr = nullptr;
  if (capture != cudaStreamCaptureStatusNone || !keep) check(cudaMallocAsync(&ptr, bytes, stream), what);
  else check(cudaMallocFromPoolAsync(&ptr, bytes, scratch_pool(), stream), what);
  return ptr;
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
