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
  kGlaPhaseFactored,  // chunk steps whose A was factored whole (GlaParams::factored_chunks)
  // The backward's gradient kernel (one block a chunk, no walk), as its thread 0 sees them
  // up to the barrier that ends each (the last: its own dg sums):
  kGlaGradientLoads,     // zero A, issue q, k, g and the first value slice, wait for q, k, g
  kGlaGradientInner,     // A: the pairs inside each quad (CUDA cores), then a barrier
  kGlaGradientWalkers,   // A: the walkers' decayed operands, then a barrier
  kGlaGradientPairs,     // A: the quad pairs and the sub-chunk pairs (mma), thread 0's own
  kGlaGradientSlice,     // waiting for the first value slice (and the slowest warp's A)
  kGlaGradientValues,    // the value loop: dA, do S_0ᵀ, v Hᵀ, dv, Σ H ⊙ S_0
  kGlaGradientFactors,   // dA stored, e^{g} in float, sub-chunk factors, quad operands
  kGlaGradientProducts,  // dq, dk across sub-chunks and quads on the tensor cores
  kGlaGradientWalks,     // the token walks inside a sub-chunk or quad: dq, dk written
  kGlaGradientDecays,    // dg's sums and stores
  kGlaGradientBlocks,    // gradient blocks counted
  kGlaGradientFactored,  // gradient blocks whose chunk was factored whole (GlaParams::factored_chunks)
  // The outputs pass with two chunks in flight (forward_pipelined.cuh), as the first thread of
  // each side sees it, a chunk step:
  kGlaPipelinedSlotWait,     // chunk side: wait for the state side to empty the slot
  kGlaPipelinedCopyWait,     // chunk side: issue the chunk's copies, wait for them (+ barrier)
  kGlaPipelinedWalk,         // chunk side: the factored operands and the vote
  kGlaPipelinedScores,       // chunk side: A, and the arrival on `full`
  kGlaPipelinedOperand,      // state side: S stored as the product's operand (+ barrier)
  kGlaPipelinedFullWait,     // state side: wait for the chunk side
  kGlaPipelinedOutput,       // state side: o = scale·(q_start·S + A·v), stored
  kGlaPipelinedAdvance,      // state side: S's update, the arrival on `empty` (+ barrier)
  kGlaPipelinedSteps,        // chunk steps counted by the state side
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
