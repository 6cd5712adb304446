// Explicit instantiation: gated scan forward, bf16.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_forward<ScanDtype::bf16>(const GatedScanParams& p) {
  scan::launch_forward<__nv_bfloat16>(p);
}

}  // namespace seqmix::cuda
