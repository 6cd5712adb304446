// Explicit instantiation: attention backward, bf16, head dim 256. The Hopper kernel of
// backward_sm90.cuh with the head dim split between the consumer warpgroups; there is no
// deterministic kernel at this head dim (src/core refuses deterministic = true).
#include "cuda/attention/backward_sm90.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::bf16, 256>(const AttentionBackwardParams& p) {
  attn::sm90::launch_backward<__nv_bfloat16, 256>(p);
}

}  // namespace seqmix::cuda
