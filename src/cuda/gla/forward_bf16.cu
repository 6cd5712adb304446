// Explicit instantiation: GLA forward, bf16.
#include "cuda/gla/launch.cuh"

namespace seqmix::cuda {

template <>
void gla_forward<GlaDtype::bf16>(const GlaParams& p) {
  gla::forward_for_shape<__nv_bfloat16>(p);
}

}  // namespace seqmix::cuda
