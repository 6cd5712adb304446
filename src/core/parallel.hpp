// parallel_for over independent work items (batch × heads, sequences, rows) on all
// cores. SEQMIX_NUM_THREADS caps the thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace seqmix::core {

int num_threads();

// Runs body(i) for i in [0, n), items split in contiguous blocks across threads.
// An exception thrown by body is rethrown on the calling thread.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

}  // namespace seqmix::core
