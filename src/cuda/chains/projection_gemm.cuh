// The projection chain's two fused GEMMs: the forward, whose epilogue visitor tree applies
// each column's activation in registers, out = act(acc + bias)·scale, and the backward's
// derivative GEMM, which recomputes z = acc + bias and writes dz = dy ⊙ act'(z)·scale with
// dy read as the epilogue's source C. Per-column vectors (bias, code, scale) instead of
// per-segment branches: tile boundaries need not match segment boundaries, and one kernel
// serves every layer. The switch on the code is uniform within a segment, so it diverges
// only in warps that straddle two segments.
#pragma once

#include "cuda/chains/gemm_sm90.cuh"  // first: it turns CUTLASS's grid dependency control on
#include "cuda/chains/activation.cuh"
#include "cuda/chains/params.hpp"

namespace seqmix::cuda::proj {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// An f32 vector over the columns, broadcast down the rows; nullptr gives `null_default`.
// The trees depend on the CTA tile (the broadcast stages a tile's columns).
template <class TileShape>
using ColumnVector = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;
template <class TileShape>
using PreActivation = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, float, float, kRound>,  // z = acc + bias
                                      fusion::Sm90AccFetch, ColumnVector<TileShape>>;

template <class TileShape, class ElementD>
using ActivationTree = fusion::Sm90EVT<fusion::Sm90Compute<SegmentActivation, ElementD, float, kRound>,
                                       PreActivation<TileShape>, ColumnVector<TileShape> /* code */,
                                       ColumnVector<TileShape> /* scale */>;
template <class TileShape, class Element>
using DerivativeTree = fusion::Sm90EVT<fusion::Sm90Compute<SegmentDerivative, Element, float, kRound>,
                                       fusion::Sm90SrcFetch<Element> /* dy */, PreActivation<TileShape>,
                                       ColumnVector<TileShape> /* code */, ColumnVector<TileShape> /* scale */>;

template <GemmTile kTile, class Element, class ElementD>
using ActivationGemm =
    gemm::Sm90Gemm<kTile, Element, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, void,
                   ActivationTree<typename gemm::TileConfig<kTile>::TileShape, ElementD>, ElementD>;
template <class Element>
using DerivativeGemm =
    gemm::Sm90Gemm<gemm::kDefaultTile, Element, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, Element,
                   DerivativeTree<typename gemm::TileConfig<gemm::kDefaultTile>::TileShape, Element>>;

// Each node's arguments: its children's, then its own (empty for compute nodes).
template <class TileShape>
auto pre_activation_arguments(const ColumnEpilogue& c) {
  return typename PreActivation<TileShape>::Arguments{{}, {c.bias, 0.f, {}}, {}};
}

// ElementD: the segments' dtype (Element, or float for segments a consumer wants in f32).
template <class Element, class ElementD, GemmTile kTile = gemm::kDefaultTile>
void activation_gemm(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out, ColumnEpilogue c,
                     void* stream, GemmSchedule schedule = {}) {
  using G = ActivationGemm<kTile, Element, ElementD>;
  const typename G::FusionArguments tree{
      pre_activation_arguments<typename G::TileShape>(c), {c.code, 0.f, {}}, {c.scale, 1.f, {}}, {}};
  G::run(G::arguments(M, N, K, x.data, x.stride, weight.data, weight.stride, nullptr, out.stride, out.data,
                      out.stride, tree, schedule),
         static_cast<cudaStream_t>(stream), "projection chain GEMM", schedule.programmatic);
}

template <class Element>
void derivative_gemm(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy, MutableRows dz,
                     ColumnEpilogue c, void* stream) {
  using G = DerivativeGemm<Element>;
  const typename G::FusionArguments tree{
      {}, pre_activation_arguments<typename G::TileShape>(c), {c.code, 0.f, {}}, {c.scale, 1.f, {}}, {}};
  G::run(G::arguments(M, N, K, x.data, x.stride, weight.data, weight.stride, dy.data, dy.stride, dz.data, dz.stride,
                      tree),
         static_cast<cudaStream_t>(stream), "projection chain derivative GEMM");
}

}  // namespace seqmix::cuda::proj

namespace seqmix::cuda {

// The forward's bf16 activation GEMM in one tile: each projection_gemm_bf16*.cu with a
// bf16 output instantiates one.
template <GemmTile kTile>
void activation_gemm_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                                ColumnEpilogue columns, GemmSchedule schedule, void* stream) {
  proj::activation_gemm<cutlass::bfloat16_t, cutlass::bfloat16_t, kTile>(M, N, K, x, weight, out, columns, stream,
                                                                         schedule);
}

}  // namespace seqmix::cuda
