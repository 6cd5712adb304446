// Explicit instantiation: gated scan backward, bf16.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_backward<ScanDtype::bf16>(const GatedScanParams& p) {
  scan::launch_backward<__nv_bfloat16>(p);
}

}  // namespace seqmix::cuda
