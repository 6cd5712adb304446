// Launchers of the GLA forward: the split decision, the segment passes, the shapes.
#pragma once

#include "cuda/gla/forward.cuh"
#include "cuda/gla/forward_pipelined.cuh"
#include "cuda/gla/profile.cuh"

namespace seqmix::cuda::gla {

// Chains the segments of each (sequence, head): slot s of the workspace holds segment s's
// own end state on entry and the state entering it on exit,
//   S_in(0) = initial state,  S_in(s+1) = e^{Σg over s} ⊙ S_in(s) + own(s).
// One thread per state element, walking the segments in order.
static __global__ void chain_segments_kernel(const GlaParams p) {
  const int64_t element = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (element >= p.K * p.V) return;
  const int64_t pair = static_cast<int64_t>(blockIdx.z) * p.H + blockIdx.y;  // n·H + h
  const int64_t row = element / p.V;
  const float* decays = p.workspace + p.num_sequences * p.H * p.segments * p.K * p.V;
  float S = p.initial_state ? p.initial_state[pair * p.K * p.V + element] : 0.0f;
  for (int64_t seg = 0; seg < p.segments; ++seg) {
    const int64_t slot = pair * p.segments + seg;
    float* at = p.workspace + slot * p.K * p.V + element;
    const float own = *at;
    *at = S;
    S = decays[slot * p.K + row] * S + own;
  }
}

// Launches through `launch`, checks the launch, and brackets it with the profiling events
// (profile.hpp; nothing while profiling is off).
template <class Launch>
void timed_launch(cudaStream_t stream, const char* kernel, Launch&& launch) {
  launch_began(stream);
  launch();
  check_launch(kernel);
  launch_ended(stream, kernel);
}

inline int multiprocessors() {
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sms;
}

// Segments per sequence: one block per SM at most (a block fills an SM's shared memory),
// so split only when the unsplit grid leaves at least half the SMs idle.
inline void plan_segments(GlaParams& p, int64_t value_blocks) {
  const int64_t blocks = p.num_sequences * p.H * value_blocks, sms = multiprocessors();
  p.segments = 1, p.segment_chunks = 0;
  if (2 * blocks > sms || p.max_chunks < 4) return;
  const int64_t segments = std::min<int64_t>(sms / blocks, p.max_chunks / 2);
  p.segment_chunks = (p.max_chunks + segments - 1) / segments;
  p.segments = (p.max_chunks + p.segment_chunks - 1) / p.segment_chunks;
}

template <class E, int KD, int VB, Pass kPass>
void launch_pass(GlaParams p, cudaStream_t stream) {
  const size_t smem = sizeof(Smem<E, KD, VB>);
  auto kernel = forward_kernel<E, KD, VB, kPass>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "gla forward shared memory");
  const dim3 grid(static_cast<unsigned>(p.V / VB), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences * p.segments));
  p.phase_cycles = profile_counters();
  timed_launch(stream,
               kPass == Pass::outputs        ? "gla forward"
               : kPass == Pass::segment_ends ? "gla forward segment states"
                                             : "gla chunk states",
               [&] { kernel<<<grid, kThreads, smem, stream>>>(p); });
}

// The outputs pass by the walk selected (params.hpp, gla_forward_walk).
template <class E, int KD, int VB>
void launch_outputs(GlaParams p, cudaStream_t stream) {
  if (gla_forward_walk() == GlaForwardWalk::serial) return launch_pass<E, KD, VB, Pass::outputs>(p, stream);
  const size_t smem = sizeof(PipelinedSmem<E, KD, VB>);
  auto kernel = pipelined_forward_kernel<E, KD, VB>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "gla forward shared memory");
  const dim3 grid(static_cast<unsigned>(p.V / VB), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences * p.segments));
  p.phase_cycles = profile_counters();
  timed_launch(stream, "gla forward (pipelined)", [&] { kernel<<<grid, kPipelinedThreads, smem, stream>>>(p); });
}

// Floats of the segment tables in p.workspace: states, then decays.
inline size_t segment_table_floats(const GlaParams& p) {
  return p.segments > 1 ? static_cast<size_t>(p.num_sequences * p.H * p.segments * p.K * (p.V + 1)) : 0;
}

// With p.segments > 1: the state entering each segment, into p.workspace (each segment's own
// end state, then the chain).
template <class E, int KD, int VB>
void segment_entering_states(const GlaParams& p, cudaStream_t stream) {
  launch_pass<E, KD, VB, Pass::segment_ends>(p, stream);
  const dim3 grid(static_cast<unsigned>((KD * p.V + 255) / 256), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences));
  timed_launch(stream, "gla chain segments", [&] { chain_segments_kernel<<<grid, 256, 0, stream>>>(p); });
}

template <class E, int KD, int VB>
void launch_forward(GlaParams p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  plan_segments(p, p.V / VB);
  if (p.segments == 1) {
    p.workspace = nullptr;
    launch_outputs<E, KD, VB>(p, stream);
    return;
  }
  // The segment tables live only for these three launches: a stream-ordered allocation
  // from the device's pool (the public API has no workspace argument for them yet).
  void* workspace = nullptr;
  check(cudaMallocAsync(&workspace, segment_table_floats(p) * sizeof(float), stream), "gla forward workspace");
  p.workspace = static_cast<float*>(workspace);
  segment_entering_states<E, KD, VB>(p, stream);
  launch_outputs<E, KD, VB>(p, stream);
  check(cudaFreeAsync(workspace, stream), "gla forward workspace");
}

// The value block: 128 columns when V allows (the state then takes 64 registers a thread).
template <class E>
void forward_for_shape(const GlaParams& p) {
  if (p.K == 128) {
    if (p.V % 128 == 0) launch_forward<E, 128, 128>(p);
    else launch_forward<E, 128, 64>(p);
  } else {
    if (p.V % 128 == 0) launch_forward<E, 64, 128>(p);
    else launch_forward<E, 64, 64>(p);
  }
}

}  // namespace seqmix::cuda::gla
