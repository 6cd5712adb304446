// Explicit instantiation: attention forward, bf16, head dim 256.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::bf16, 256>(const AttentionParams& p) {
  attn::launch_forward<__nv_bfloat16, 256>(p);
}

}  // namespace seqmix::cuda
