// Host side of the copy engine: describing a strided 3-D tensor for it.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace seqmix::cuda {

// A tensor of `extent` = {x, y, z} elements (x contiguous) of `element_bytes` each, rows
// `stride_y` elements apart and planes `stride_z` apart, read in boxes of `box` = {x, y, 1}
// elements; `dtype` is the CUtensorMapDataType. Out-of-range box elements read as zero.
struct TensorMapShape {
  CUtensorMapDataType dtype;
  int element_bytes;
  int64_t extent[3];
  int64_t stride_y, stride_z;
  uint32_t box[2];
};

// True when the copy engine can read it: 16-byte aligned base and strides (in bytes), and
// extents and strides within its limits.
bool tensor_map_supported(const void* base, const TensorMapShape& shape);

// The driver's cuTensorMapEncodeTiled, found once through the runtime's driver entry
// point (so nothing links against libcuda). Throws seqmix::Error when the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

// Encodes the map (through the driver's cuTensorMapEncodeTiled, found at run time, so
// nothing links against libcuda). Throws seqmix::Error when the driver refuses it.
CUtensorMap make_tensor_map(const void* base, const TensorMapShape& shape);

}  // namespace seqmix::cuda
