// Instrumentation of the GLA kernels for the timing tests (plain C++, no CUDA headers).
// While on, every GLA launch is bracketed by CUDA events on its stream, and the chunk walks
// of the forward (forward.cuh) add the SM cycles of each phase of a chunk step to device
// counters. Off by default; one process-wide switch, meant for one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace seqmix::cuda {

// Phases of one chunk step of a forward walk, as thread 0 of each block sees them between
// the block's barriers (so each includes waiting for the slowest warp).
enum GlaPhase : int {
  kGlaPhaseLoadWait,  // wait for this chunk's copies, then the barrier
  kGlaPhaseDecays,    // the walkers: decayed operands from g (and the state operand)
  kGlaPhaseDiagonal,  // the diagonal sub-chunk blocks of A on the CUDA cores
  kGlaPhasePairs,     // the sub-chunk pairs of A on the tensor cores
  kGlaPhaseOutput,    // o = scale·(q_start·S + A·v), warp 0's time
  kGlaPhaseAdvance,   // S ← e^{b_last} ⊙ S + k_endᵀ v, warp 0's time
  kGlaPhaseSteps,     // chunk steps counted (one per block per chunk)
  kGlaPhaseBlocks,    // blocks counted
  kGlaPhaseCount
};

struct GlaLaunchTime {
  std::string kernel;  // the name the launch check uses
  float ms;            // between events recorded just before and just after the launch
};

struct GlaProfile {
  std::vector<GlaLaunchTime> launches;
  // Cycles summed over all blocks of all profiled walks, per phase; then the counts.
  uint64_t phase_cycles[kGlaPhaseCount] = {};
};

// Turns the instrumentation on and clears what was recorded.
void gla_profile_start();
// Waits for the device, turns the instrumentation off and returns what was recorded.
GlaProfile gla_profile_stop();

}  // namespace seqmix::cuda
