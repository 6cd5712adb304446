// Host-side description of the projection chain's fused GEMM: plain pointers and sizes,
// no CUDA or CUTLASS types, so src/core can fill it in without their headers.
#pragma once

#include <cstdint>

namespace seqmix::cuda {

// out = act(x·weightᵀ + bias), the activation chosen per output column:
//   x [M, K] rows `x_stride` elements apart, weight [N, K] rows `weight_stride` apart,
//   out [M, N] rows `out_stride` apart, all in one 16-bit dtype;
//   column_bias, column_code, column_scale [N] f32 on the device: the bias (or nullptr
//   for none), the activation code (seqmix::Activation as a float) and the factor applied
//   after it (1/tau for logsigmoid, 1 otherwise).
struct ProjectionGemmParams {
  int64_t M = 0, N = 0, K = 0;
  const void* x = nullptr;
  int64_t x_stride = 0;
  const void* weight = nullptr;
  int64_t weight_stride = 0;
  void* out = nullptr;
  int64_t out_stride = 0;
  const float* column_bias = nullptr;
  const float* column_code = nullptr;
  const float* column_scale = nullptr;
  void* workspace = nullptr;  // projection_gemm_workspace_bytes(...) bytes, or nullptr when 0
  void* stream = nullptr;
};

enum class ProjectionDtype { bf16, f16 };

// Scratch bytes the GEMM's kernel asks for at these sizes (0 for the persistent schedule
// without split-K).
template <ProjectionDtype dtype>
size_t projection_gemm_workspace_bytes(const ProjectionGemmParams& p);
// Launches on p.stream; throws seqmix::Error when CUTLASS refuses the problem.
template <ProjectionDtype dtype>
void projection_gemm(const ProjectionGemmParams& p);

}  // namespace seqmix::cuda
