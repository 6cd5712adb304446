// Explicit instantiation: GLA forward, f16.
#include "cuda/gla/launch.cuh"

namespace seqmix::cuda {

template <>
void gla_forward<GlaDtype::f16>(const GlaParams& p) {
  gla::forward_for_shape<__half>(p);
}

}  // namespace seqmix::cuda
