// The launchers' side of profile.hpp: events around launches, and the device counters the
// forward walks add their phase cycles to (nullptr while profiling is off).
#pragma once

#include <cuda_runtime.h>

#include "cuda/gla/profile.hpp"

namespace seqmix::cuda::gla {

// Device counters [kGlaPhaseCount], or nullptr when not profiling.
unsigned long long* profile_counters();
// Bracket one launch: `launch_began` before it, `launch_ended` after its launch check.
void launch_began(cudaStream_t stream);
void launch_ended(cudaStream_t stream, const char* kernel);

}  // namespace seqmix::cuda::gla
