// Explicit instantiation: attention backward, f16, head dim 128. The Hopper kernel of
// backward_sm90.cuh (either schedule; dQ summed in float, out of order) unless the caller
// asks for determinism.
#include "cuda/attention/backward_sm90.cuh"

namespace seqmix::cuda {

template <>
void attention_backward<AttentionDtype::f16, 128>(const AttentionBackwardParams& p) {
  if (p.deterministic)
    attn::launch_backward<__half, 128>(p);
  else
    attn::sm90::launch_backward<__half, 128>(p);
}

}  // namespace seqmix::cuda
