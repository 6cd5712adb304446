// Explicit instantiation: attention backward, f16, head dim 256. The Hopper kernel of
// backward_sm90.cuh with the head dim split between the consumer warpgroups; for
// `deterministic` its dQ adds in order.
#include "cuda/attention/backward_sm90.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::f16, 256>(const AttentionBackwardParams& p) {
  attn::launch_attention_backward<__half, 256>(p);
}

}  // namespace seqmix::cuda
