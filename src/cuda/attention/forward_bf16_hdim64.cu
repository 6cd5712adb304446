// Explicit instantiation: attention forward, bf16, head dim 64.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::bf16, 64>(const AttentionParams& p) {
  attn::launch_forward<__nv_bfloat16, 64>(p);
}

}  // namespace seqmix::cuda
