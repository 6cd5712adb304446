// Explicit instantiation: gated scan backward, f16.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_backward<ScanDtype::f16>(const GatedScanParams& p) {
  scan::launch_backward<__half>(p);
}

}  // namespace seqmix::cuda
