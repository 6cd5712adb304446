// The projection chain's two fused GEMMs: the forward, whose epilogue visitor tree applies
// each column's activation in registers, out = act(acc + bias)·scale, and the backward's
// derivative GEMM, which recomputes z = acc + bias and writes dz = dy ⊙ act'(z)·scale with
// dy read as the epilogue's source C. Per-column vectors (bias, code, scale) instead of
// per-segment branches: tile boundaries need not match segment boundaries, and one kernel
// serves every layer. The switch on the code is uniform within a segment, so it diverges
// only in warps that straddle two segments.
#pragma once

#include "cuda/chains/activation.cuh"
#include "cuda/chains/gemm_sm90.cuh"
#include "cuda/chains/params.hpp"

namespace seqmix::cuda::proj {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// An f32 vector over the columns, broadcast down the rows; nullptr gives `null_default`.
using ColumnVector = fusion::Sm90RowBroadcast<0, gemm::TileShape, float, float, Stride<_0, _1, int64_t>>;
using PreActivation = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,  // z = acc + bias
                                      fusion::Sm90AccFetch, ColumnVector>;

template <class ElementD>
using ActivationTree = fusion::Sm90EVT<fusion::Sm90Compute<SegmentActivation, ElementD, float, kRound>,
                                       PreActivation, ColumnVector /* code */, ColumnVector /* scale */>;
template <class Element>
using DerivativeTree = fusion::Sm90EVT<fusion::Sm90Compute<SegmentDerivative, Element, float, kRound>,
                                       fusion::Sm90SrcFetch<Element> /* dy */, PreActivation,
                                       ColumnVector /* code */, ColumnVector /* scale */>;

template <class Element, class ElementD>
using ActivationGemm = gemm::Sm90Gemm<Element, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, void,
                                      ActivationTree<ElementD>, ElementD>;
template <class Element>
using DerivativeGemm = gemm::Sm90Gemm<Element, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, Element,
                                      DerivativeTree<Element>>;

// Each node's arguments: its children's, then its own (empty for compute nodes).
inline auto pre_activation_arguments(const ColumnEpilogue& c) {
  return typename PreActivation::Arguments{{}, {c.bias, 0.f, {}}, {}};
}

// ElementD: the segments' dtype (Element, or float for segments a consumer wants in f32).
template <class Element, class ElementD>
void activation_gemm(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue c,
                     void* stream) {
  using G = ActivationGemm<Element, ElementD>;
  const typename G::FusionArguments tree{
      pre_activation_arguments(c), {c.code, 0.f, {}}, {c.scale, 1.f, {}}, {}};
  G::run(G::arguments(M, N, K, x.data, x.stride, weight.data, weight.stride, nullptr, out.stride, out.data,
                      out.stride, tree),
         static_cast<cudaStream_t>(stream), "projection chain GEMM");
}

template <class Element>
void derivative_gemm(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy, MutableRows dz,
                     ColumnEpilogue c, void* stream) {
  using G = DerivativeGemm<Element>;
  const typename G::FusionArguments tree{
      {}, pre_activation_arguments(c), {c.code, 0.f, {}}, {c.scale, 1.f, {}}, {}};
  G::run(G::arguments(M, N, K, x.data, x.stride, weight.data, weight.stride, dy.data, dy.stride, dz.data, dz.stride,
                      tree),
         static_cast<cudaStream_t>(stream), "projection chain derivative GEMM");
}

}  // namespace seqmix::cuda::proj
