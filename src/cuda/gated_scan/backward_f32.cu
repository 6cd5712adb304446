// Explicit instantiation: gated scan backward, f32.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_backward<ScanDtype::f32>(const GatedScanParams& p) {
  scan::launch_backward<float>(p);
}

}  // namespace seqmix::cuda
