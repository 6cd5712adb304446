// Explicit instantiation: attention backward, f16, head dim 128.
#include "cuda/attention/backward.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::f16, 128>(const AttentionBackwardParams& p) {
  attn::launch_backward<__half, 128>(p);
}

}  // namespace seqmix::cuda
