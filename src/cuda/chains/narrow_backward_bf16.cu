// The narrow-K backward GEMMs (dx, dW) of the projection chain, bf16 (narrow_backward.cuh).
#include "cuda/chains/narrow_backward.cuh"

namespace seqmix::cuda {

void narrow_gradients_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dz, MutableRows dx,
                           MutableRows dweight, void* stream) {
  narrow::gradients(M, N, K, x, weight, dz, dx, dweight, stream);
}

}  // namespace seqmix::cuda
