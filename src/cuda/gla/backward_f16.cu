// Explicit instantiation: GLA backward, f16.
#include "cuda/gla/backward.cuh"

namespace seqmix::cuda {

template <>
void gla_backward<GlaDtype::f16>(const GlaParams& p) {
  gla::backward_for_shape<__half>(p);
}

}  // namespace seqmix::cuda
