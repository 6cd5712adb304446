// What this build of seqmix can run on.
#pragma once

namespace seqmix {

// True when the library was built with its CUDA backend.
bool built_with_cuda();
// Number of CUDA devices visible (0 without a driver, a GPU or the CUDA backend).
int cuda_device_count();

}  // namespace seqmix
