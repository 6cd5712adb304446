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

// The current device's scratch pool, made on first use: a stream-ordered memory pool that keeps
// what is freed (no release threshold), so it holds the largest scratch in use at once so far,
// as PyTorch's caching allocator does. The device's default pool gives its memory back at every
// synchronization, and mapping 136 MB again cost ~0.2 ms of host time a call on the H100
// (attention/NOTES.md, the workspace pool).
cudaMemPool_t scratch_pool();

// Stream-ordered scratch for one call's launches, freed with cudaFreeAsync on the same stream:
// from scratch_pool() outside stream capture, from the default pool under it (the graph's
// memory nodes). `what` names the caller in errors.
void* stream_scratch(size_t bytes, cudaStream_t stream, const char* what);

}  // namespace seqmix::cuda
