// Explicit instantiation: the gated-scan layer kernel, f16.
#include "cuda/gated_scan/layer.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_layer_forward<ScanDtype::f16>(const GatedScanLayerParams& p) {
  layer::launch_forward<__half>(p);
}

template <>
int64_t gated_scan_layer_capacity<ScanDtype::f16>() {
  return layer::capacity<__half>();
}

}  // namespace seqmix::cuda
