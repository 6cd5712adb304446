// What this build of seqmix can run on.
#pragma once

#include <string>
#include <vector>

namespace seqmix {

// True when the library was built with its CUDA backend.
bool built_with_cuda();
// Number of CUDA devices visible (0 without a driver, a GPU or the CUDA backend).
int cuda_device_count();
// The ops whose CUDA kernels this build compiled (src/cuda folder names, such as
// "gated_scan"); empty without the CUDA backend. Builds may leave some out
// (SEQMIX_CUDA_KERNELS), and those ops then refuse CUDA tensors.
std::vector<std::string> cuda_kernel_ops();

}  // namespace seqmix
