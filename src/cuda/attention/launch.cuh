// Launchers: tensor maps for the TMA copies, the grid, the launch.
#pragma once

#include <cuda.h>

#include "cuda/attention/forward.cuh"
#include "cuda/common/runtime.cuh"
#include "cuda/common/tensor_map.hpp"

namespace seqmix::cuda::attn {

// A 4-d map (D, rows, heads, batch) of a [B, S, H, D] view, read in boxes of 64 head-dim
// columns (128 bytes, 128-byte swizzle) × box_rows rows. Rows past `rows` read as zeros.
template <class T>
CUtensorMap tensor_map(const AttentionView& view, int64_t rows, int64_t heads, int64_t batch, int64_t D,
                       int box_rows) {
  constexpr int64_t e = sizeof(T);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  // The batch stride of a varlen view is 0: one batch entry, any 16-byte multiple will do.
  const int64_t batch_stride = view.stride_batch != 0 ? view.stride_batch : 16;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(view.stride_row * e),
                                 static_cast<cuuint64_t>(view.stride_head * e),
                                 static_cast<cuuint64_t>(batch_stride * e)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult status = tensor_map_encoder()(
      &map, sizeof(T) == 2 && std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      4, view.data, dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS) check(cudaErrorInvalidValue, "cuTensorMapEncodeTiled (attention operand)");
  return map;
}

template <class T, int D, AttentionForwardSchedule kSchedule>
void launch_forward_schedule(const AttentionParams& p) {
  using Cfg = ForwardConfig<T, D, kSchedule>;
  const int64_t batch = p.cu_seqlens_q ? 1 : p.num_sequences;
  ForwardArgs args;
  args.q_map = tensor_map<T>(p.q, p.rows_q, p.Hq, batch, D, Cfg::kBlockM);
  args.k_map = tensor_map<T>(p.k, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.v_map = tensor_map<T>(p.v, p.rows_k, p.Hkv, batch, D, Cfg::kBlockN);
  args.p = p;
  const auto kernel = forward_kernel<T, D, kSchedule>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
        "cudaFuncSetAttribute(attention forward)");
  const dim3 grid(static_cast<unsigned>((p.max_seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM),
                  static_cast<unsigned>(p.Hq), static_cast<unsigned>(p.num_sequences));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(args);
  check_launch("attention forward");
}

template <class T, int D>
void launch_forward(const AttentionParams& p) {
  if (attention_forward_schedule() == AttentionForwardSchedule::pingpong)
    launch_forward_schedule<T, D, AttentionForwardSchedule::pingpong>(p);
  else
    launch_forward_schedule<T, D, AttentionForwardSchedule::standard>(p);
}

}  // namespace seqmix::cuda::attn
