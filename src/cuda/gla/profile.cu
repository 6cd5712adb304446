// Events and counters of profile.hpp. The records live until gla_profile_stop reads them.
#include <string>
#include <vector>

#include "cuda/common/runtime.cuh"
#include "cuda/gla/profile.cuh"

namespace seqmix::cuda {
namespace {

struct LaunchEvents {
  std::string kernel;
  cudaEvent_t start, stop;
};

struct ProfileState {
  bool on = false;
  unsigned long long* counters = nullptr;  // device, kGlaPhaseCount
  cudaEvent_t pending = nullptr;           // recorded by launch_began, not yet paired
  std::vector<LaunchEvents> launches;
};

ProfileState& state() {
  static ProfileState s;
  return s;
}

}  // namespace

void gla_profile_start() {
  ProfileState& s = state();
  if (!s.counters) check(cudaMalloc(&s.counters, kGlaPhaseCount * sizeof(unsigned long long)), "gla profile");
  check(cudaMemset(s.counters, 0, kGlaPhaseCount * sizeof(unsigned long long)), "gla profile");
  check(cudaDeviceSynchronize(), "gla profile");
  s.launches.clear();
  s.on = true;
}

GlaProfile gla_profile_stop() {
  ProfileState& s = state();
  GlaProfile out;
  check(cudaDeviceSynchronize(), "gla profile");
  for (LaunchEvents& e : s.launches) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e.start, e.stop), "gla profile");
    out.launches.push_back({e.kernel, ms});
    cudaEventDestroy(e.start);
    cudaEventDestroy(e.stop);
  }
  s.launches.clear();
  if (s.counters)
    check(cudaMemcpy(out.phase_cycles, s.counters, sizeof(out.phase_cycles), cudaMemcpyDeviceToHost),
          "gla profile");
  s.on = false;
  return out;
}

namespace gla {

unsigned long long* profile_counters() { return state().on ? state().counters : nullptr; }

void launch_began(cudaStream_t stream) {
  ProfileState& s = state();
  if (!s.on) return;
  check(cudaEventCreate(&s.pending), "gla profile");
  check(cudaEventRecord(s.pending, stream), "gla profile");
}

void launch_ended(cudaStream_t stream, const char* kernel) {
  ProfileState& s = state();
  if (!s.on || !s.pending) return;
  cudaEvent_t stop;
  check(cudaEventCreate(&stop), "gla profile");
  check(cudaEventRecord(stop, stream), "gla profile");
  s.launches.push_back({kernel, s.pending, stop});
  s.pending = nullptr;
}

}  // namespace gla
}  // namespace seqmix::cuda
