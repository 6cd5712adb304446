// Tensor maps for the copy engine, encoded through the driver entry point found at run
// time (the runtime library hands it out), so the library needs no -lcuda.
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>

#include "cuda/common/runtime.cuh"
#include "cuda/common/tensor_map.hpp"
#include "seqmix/error.hpp"

namespace seqmix::cuda {
namespace {

bool fits(int64_t v, int64_t limit) { return v > 0 && v <= limit; }

}  // namespace

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || !fn) throw Error("seqmix: the CUDA driver has no cuTensorMapEncodeTiled");
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  });
  return encode;
}

bool tensor_map_supported(const void* base, const TensorMapShape& s) {
  const int64_t bytes_y = s.stride_y * s.element_bytes, bytes_z = s.stride_z * s.element_bytes;
  constexpr int64_t kMaxExtent = int64_t{1} << 32, kMaxStride = int64_t{1} << 40;
  return reinterpret_cast<uintptr_t>(base) % 16 == 0 && bytes_y % 16 == 0 && bytes_z % 16 == 0 &&
         fits(bytes_y, kMaxStride - 1) && fits(bytes_z, kMaxStride - 1) && fits(s.extent[0], kMaxExtent) &&
         fits(s.extent[1], kMaxExtent) && fits(s.extent[2], kMaxExtent) && s.box[0] * s.element_bytes % 16 == 0 &&
         fits(s.box[0], 256) && fits(s.box[1], 256) && fits(s.box[2], 256);
}

CUtensorMap make_tensor_map(const void* base, const TensorMapShape& s) {
  CUtensorMap map;
  const cuuint64_t extent[3] = {static_cast<cuuint64_t>(s.extent[0]), static_cast<cuuint64_t>(s.extent[1]),
                                static_cast<cuuint64_t>(s.extent[2])};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(s.stride_y * s.element_bytes),
                                 static_cast<cuuint64_t>(s.stride_z * s.element_bytes)};
  const cuuint32_t box[3] = {s.box[0], s.box[1], s.box[2]}, element_strides[3] = {1, 1, 1};
  const CUresult status = tensor_map_encoder()(
      &map, s.dtype, 3, const_cast<void*>(base), extent, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) throw Error("seqmix: cuTensorMapEncodeTiled failed with CUresult " + std::to_string(status));
  return map;
}

CUtensorMap make_head_rows_map(const void* base, const HeadRowsShape& s, int box_rows, const char* what) {
  constexpr int64_t e = 2;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(s.columns), static_cast<cuuint64_t>(s.rows),
                              static_cast<cuuint64_t>(s.heads), static_cast<cuuint64_t>(s.batch)};
  // A varlen view has one batch entry and stride 0 there: any 16-byte multiple will do.
  const int64_t batch_stride = s.stride_batch != 0 ? s.stride_batch : 16;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(s.stride_row * e), static_cast<cuuint64_t>(s.stride_head * e),
                                 static_cast<cuuint64_t>(batch_stride * e)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult status = tensor_map_encoder()(&map, s.dtype, 4, const_cast<void*>(base), dims, strides, box,
                                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw Error(std::string("seqmix: cuTensorMapEncodeTiled (") + what + ") failed with CUresult " +
                std::to_string(status));
  return map;
}

}  // namespace seqmix::cuda
