// Explicit instantiation: the projection chain's fused GEMM, bf16.
#include "cuda/chains/projection_gemm.cuh"

namespace seqmix::cuda {

template <>
size_t projection_gemm_workspace_bytes<ProjectionDtype::bf16>(const ProjectionGemmParams& p) {
  return proj::ProjectionGemm<cutlass::bfloat16_t>::workspace_bytes(p);
}

template <>
void projection_gemm<ProjectionDtype::bf16>(const ProjectionGemmParams& p) {
  proj::ProjectionGemm<cutlass::bfloat16_t>::run(p);
}

}  // namespace seqmix::cuda
