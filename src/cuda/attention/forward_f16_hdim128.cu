// Explicit instantiation: attention forward, f16, head dim 128.
#include "cuda/attention/launch.cuh"

namespace seqmix::cuda {

template <>
void attention_forward<AttentionDtype::f16, 128>(const AttentionParams& p) {
  attn::launch_forward<__half, 128>(p);
}

}  // namespace seqmix::cuda
