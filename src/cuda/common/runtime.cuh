// CUDA runtime helpers: device queries, and turning a failed call or launch into a
// seqmix::Error that says where it happened.
#pragma once

#include <cuda_runtime.h>

namespace seqmix::cuda {

int device_count();
void check(cudaError_t status, const char* what);
// Streaming multiprocessors of the current device (throws where the query fails).
int multiprocessor_count();
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

}  // namespace seqmix::cuda
