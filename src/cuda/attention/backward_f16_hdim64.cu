// Explicit instantiation: attention backward, f16, head dim 64. The Hopper kernel of
// backward_sm90.cuh; for `deterministic` its dQ adds in order, or the kernels of
// backward.cuh (params.hpp).
#include "cuda/attention/backward_sm90.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::f16, 64>(const AttentionBackwardParams& p) {
  attn::launch_attention_backward<__half, 64>(p);
}

}  // namespace seqmix::cuda
