// Explicit instantiation: attention backward, bf16, head dim 128.
#include "cuda/attention/backward.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::bf16, 128>(const AttentionBackwardParams& p) {
  attn::launch_backward<__nv_bfloat16, 128>(p);
}

}  // namespace seqmix::cuda
