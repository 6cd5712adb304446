// Explicit instantiation: gated scan forward, f16.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_forward<ScanDtype::f16>(const GatedScanParams& p) {
  scan::launch_forward<__half>(p);
}

}  // namespace seqmix::cuda
