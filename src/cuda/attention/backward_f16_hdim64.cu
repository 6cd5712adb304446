// Explicit instantiation: attention backward, f16, head dim 64.
#include "cuda/attention/backward.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::f16, 64>(const AttentionBackwardParams& p) {
  attn::launch_backward<__half, 64>(p);
}

}  // namespace seqmix::cuda
