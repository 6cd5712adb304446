// Explicit instantiation: attention backward, bf16, head dim 128. The Hopper kernel of
// backward_sm90.cuh; for `deterministic` its dQ adds in order, or the kernels of
// backward.cuh (params.hpp).
#include "cuda/attention/backward_sm90.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::bf16, 128>(const AttentionBackwardParams& p) {
  attn::launch_attention_backward<__nv_bfloat16, 128>(p);
}

}  // namespace seqmix::cuda
