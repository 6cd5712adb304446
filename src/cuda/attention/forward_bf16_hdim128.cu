// Explicit instantiation: attention forward, bf16, head dim 128.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::bf16, 128>(const AttentionParams& p) {
  attn::launch_forward<__nv_bfloat16, 128>(p);
}

}  // namespace seqmix::cuda
