// Explicit instantiation: gated scan forward, f32.
#include "cuda/gated_scan/launch.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_forward<ScanDtype::f32>(const GatedScanParams& p) {
  scan::launch_forward<float>(p);
}

}  // namespace seqmix::cuda
