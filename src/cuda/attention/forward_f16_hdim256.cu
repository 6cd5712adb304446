// Explicit instantiation: attention forward, f16, head dim 256.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::f16, 256>(const AttentionParams& p) {
  attn::launch_forward<__half, 256>(p);
}

}  // namespace seqmix::cuda
