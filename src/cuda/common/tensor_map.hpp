// Host side of the copy engine: describing a strided 3-D tensor for it.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace seqmix::cuda {

// A tensor of `extent` = {x, y, z} elements (x contiguous) of `element_bytes` each, rows
// `stride_y` elements apart and planes `stride_z` apart, copied in boxes of `box` = {x, y, z}
// elements; `dtype` is the CUtensorMapDataType. Out-of-range box elements read as zero and
// are not written.
struct TensorMapShape {
  CUtensorMapDataType dtype;
  int element_bytes;
  int64_t extent[3];
  int64_t stride_y, stride_z;
  uint32_t box[3];
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

// A [batch, rows, heads, columns] tensor of 16-bit elements (columns contiguous; strides in
// elements), as the attention and GLA kernels read and write their token tiles.
struct HeadRowsShape {
  CUtensorMapDataType dtype;  // CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 or _FLOAT16
  int64_t columns, rows, heads, batch;
  int64_t stride_row, stride_head, stride_batch;  // stride_batch 0: one batch entry (varlen)
};

// Its 4-d map (columns, rows, heads, batch), copied in boxes of 64 columns (128 bytes, in the
// 128-byte swizzle) × box_rows rows of one head. Rows past `rows` read as zeros and are not
// written. `what` names the tensor in the error thrown when the driver refuses the map.
CUtensorMap make_head_rows_map(const void* base, const HeadRowsShape& shape, int box_rows, const char* what);

}  // namespace seqmix::cuda
