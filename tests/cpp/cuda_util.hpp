// Device copies of HostTensors for the GPU tests, the skip for machines without a GPU, and
// the event timing of the GPU timing tests.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "seqmix/runtime.hpp"
#include "test_util.hpp"

namespace seqmix::test {

// Skips the test, saying why, when no CUDA device can run it.
#define SKIP_WITHOUT_CUDA_DEVICE()                                                   \
  do {                                                                               \
    if (seqmix::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run"; \
  } while (0)

inline void cuda_ok(cudaError_t status) { ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status); }

// A process-wide choice of the CUDA kernels (a getter and setter pair, as in
// cuda/gla/params.hpp) set for a scope and restored at its end.
template <class T>
struct Chosen {
  void (*set)(T);
  T before;
  Chosen(T (*get)(), void (*set_to)(T), T value) : set(set_to), before(get()) { set(value); }
  ~Chosen() { set(before); }
};

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

// How a timing test times a call: `reps` event-timed calls on the default stream after
// `warmups` untimed ones; with `flush_l2` a 256 MiB buffer is overwritten before each timed
// call, so that no call finds its inputs in the 50 MiB L2 cache.
struct EventTiming {
  int reps = 20;
  int warmups = 1;
  bool flush_l2 = true;
};

// Overwrites a 256 MiB buffer on the default stream (the `i`-th fill), so that the next call
// finds none of its inputs in the 50 MiB L2 cache.
inline void flush_l2(int i) {
  static void* flush = nullptr;
  constexpr size_t kFlushBytes = size_t(256) << 20;
  if (!flush) cuda_ok(cudaMalloc(&flush, kFlushBytes));
  cuda_ok(cudaMemsetAsync(flush, i, kFlushBytes));
}

// A pair of CUDA events timing one call on the default stream.
class EventTimer {
 public:
  EventTimer() {
    cuda_ok(cudaEventCreate(&start_));
    cuda_ok(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  // The milliseconds between the events recorded around `run`.
  template <class Run>
  float ms(const Run& run) const {
    cuda_ok(cudaEventRecord(start_));
    run();
    cuda_ok(cudaEventRecord(stop_));
    cuda_ok(cudaEventSynchronize(stop_));
    float elapsed = 0;
    cuda_ok(cudaEventElapsedTime(&elapsed, start_, stop_));
    return elapsed;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The milliseconds of each timed call of `run`, shortest first.
template <class Run>
std::vector<float> event_times_ms(const Run& run, EventTiming timing = {}) {
  const EventTimer timer;
  for (int i = 0; i < timing.warmups; ++i) run();
  std::vector<float> times;
  for (int i = 0; i < timing.reps; ++i) {
    if (timing.flush_l2) flush_l2(i);
    times.push_back(timer.ms(run));
  }
  cuda_ok(cudaGetLastError());
  std::sort(times.begin(), times.end());
  return times;
}

// A CUDA graph of what `issue` launches on `stream`, captured once at construction (stream
// capture, this thread only), replayed by launch() and destroyed with the object.
class CapturedGraph {
 public:
  template <class Issue>
  CapturedGraph(cudaStream_t stream, const Issue& issue) {
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    issue();
    cuda_ok(cudaStreamEndCapture(stream, &graph_));
    cuda_ok(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    if (exec_) cuda_ok(cudaGraphExecDestroy(exec_));
    if (graph_) cuda_ok(cudaGraphDestroy(graph_));
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) const { cuda_ok(cudaGraphLaunch(exec_, stream)); }
  // The captured graph's nodes (kernels and copies).
  size_t nodes() const {
    size_t count = 0;
    cuda_ok(cudaGraphGetNodes(graph_, nullptr, &count));
    return count;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// The median of event_times_ms.
template <class Run>
float median_ms(const Run& run, EventTiming timing = {}) {
  const std::vector<float> times = event_times_ms(run, timing);
  return times[times.size() / 2];
}

}  // namespace seqmix::test
