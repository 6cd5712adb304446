// The gradient GEMMs of both chains: D = A·B with no fusion (alpha 1, no source), in the
// two operand layouts the backward needs (see gemm_sm90.cuh for the layout names):
//   nn: out [M, N] = a [M, K]·b [K, N]      dx = dz·W,  du = dy·W_out
//   tn: out [M, N] = aᵀ·b, a stored [K, M]   dW = dzᵀ·x, dW_out = dyᵀ·u
#pragma once

#include "cuda/chains/gemm_sm90.cuh"
#include "cuda/chains/params.hpp"

namespace seqmix::cuda::plain {

template <class Element>
using Identity = cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>;

template <class Element, class LayoutA>
void gemm(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream, const char* what) {
  using G = gemm::Sm90Gemm<Element, LayoutA, cutlass::layout::RowMajor, void, Identity<Element>>;
  typename G::FusionArguments identity;
  identity.alpha = 1.f;
  identity.beta = 0.f;
  G::run(G::arguments(M, N, K, a.data, a.stride, b.data, b.stride, nullptr, out.stride, out.data, out.stride,
                      identity),
         static_cast<cudaStream_t>(stream), what);
}

}  // namespace seqmix::cuda::plain
