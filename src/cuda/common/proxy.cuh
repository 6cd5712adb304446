// Ordering between the generic proxy (ordinary st.shared) and the async proxy (wgmma
// operand reads, TMA): a kernel that writes an operand tile with ordinary stores and
// then hands it to wgmma needs this fence by every writing thread before the barrier
// that publishes the tile.
#pragma once

namespace seqmix::cuda {

__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace seqmix::cuda
