// Explicit instantiation: the gated-scan layer kernel, bf16.
#include "cuda/gated_scan/layer.cuh"

namespace seqmix::cuda {

template <>
void gated_scan_layer_forward<ScanDtype::bf16>(const GatedScanLayerParams& p) {
  layer::launch_forward<__nv_bfloat16>(p);
}

template <>
int64_t gated_scan_layer_capacity<ScanDtype::bf16>() {
  return layer::capacity<__nv_bfloat16>();
}

}  // namespace seqmix::cuda
