// Explicit instantiation: attention forward, f16, head dim 64.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::f16, 64>(const AttentionParams& p) {
  attn::launch_forward<__half, 64>(p);
}

}  // namespace seqmix::cuda
