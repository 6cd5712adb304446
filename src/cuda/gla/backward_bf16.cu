// Explicit instantiation: GLA backward, bf16.
#include "cuda/gla/backward.cuh"

namespace seqmix::cuda {

template <>
void gla_backward<GlaDtype::bf16>(const GlaParams& p) {
  gla::backward_for_shape<__nv_bfloat16>(p);
}

// The scratch size does not depend on the element type (both are 16 bits); defined once here.
size_t gla_backward_workspace_bytes(const GlaParams& p) { return gla::backward_scratch_bytes(p); }

}  // namespace seqmix::cuda
