// The chains' GEMMs with no fusion: D = A·B (alpha 1, no source), in the three operand
// layouts they need (see gemm_sm90.cuh for the layout names):
//   nt: out [M, N] = a [M, K]·bᵀ, b [N, K]   a projection with no activation and no bias,
//                                            the output chain's y = u·W_outᵀ
//   nn: out [M, N] = a [M, K]·b [K, N]      dx = dz·W,  du = dy·W_out
//   tn: out [M, N] = aᵀ·b, a stored [K, M]   dW = dzᵀ·x, dW_out = dyᵀ·u
#pragma once

#include "cuda/chains/gemm_sm90.cuh"
#include "cuda/chains/params.hpp"

namespace seqmix::cuda::plain {

template <class Element>
using Identity = cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>;

// The arguments of an Identity epilogue: D = 1·A·B, no source.
template <class G>
typename G::FusionArguments identity_arguments() {
  typename G::FusionArguments identity;
  identity.alpha = 1.f;
  identity.beta = 0.f;
  return identity;
}

template <class Element, class LayoutA, class LayoutB = cutlass::layout::RowMajor,
          GemmTile kTile = gemm::kDefaultTile>
void gemm(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream, const char* what,
          GemmSchedule schedule = {}) {
  using G = gemm::Sm90Gemm<kTile, Element, LayoutA, LayoutB, void, Identity<Element>>;
  G::run(G::arguments(M, N, K, a.data, a.stride, b.data, b.stride, nullptr, out.stride, out.data, out.stride,
                      identity_arguments<G>(), schedule),
         static_cast<cudaStream_t>(stream), what, schedule.programmatic);
}

// The same with A in pieces (pieces_mainloop.cuh) split along M or K.
template <gemm::Split kSplit>
struct Pieces {
  template <class Built>
  using Mainloop = gemm::PiecesMainloop<Built, kSplit>;
};

template <class LayoutA, gemm::Split kSplit, GemmTile kTile = gemm::kDefaultTile>
void gemm_pieces(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out, void* stream,
                 const char* what, GemmSchedule schedule = {}) {
  using Element = cutlass::bfloat16_t;
  using G = gemm::Sm90Gemm<kTile, Element, LayoutA, cutlass::layout::RowMajor, void, Identity<Element>, Element,
                           Pieces<kSplit>::template Mainloop>;
  // The builder's own A descriptor is made but never read: piece 0's base, and a leading
  // dimension that covers the split extent so that the descriptor is a valid one.
  const int64_t split_extent = kSplit == gemm::Split::along_m ? M : K;
  auto args = G::arguments(M, N, K, a.piece[0].data, (split_extent + 7) / 8 * 8, b.data, b.stride, nullptr,
                           out.stride, out.data, out.stride, identity_arguments<G>(), schedule);
  args.mainloop.pieces = a;
  G::run(args, static_cast<cudaStream_t>(stream), what, schedule.programmatic);
}

}  // namespace seqmix::cuda::plain

namespace seqmix::cuda {

// The forward's nt GEMM in one tile: each gemm_nt_bf16*.cu instantiates one.
template <GemmTile kTile>
void gemm_nt_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, GemmSchedule schedule,
                        void* stream) {
  plain::gemm<cutlass::bfloat16_t, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, kTile>(
      M, N, K, a, b, out, stream, "chain GEMM (nt)", schedule);
}

// The backward's tn GEMM (dW = dzᵀ·x, dW_out = dyᵀ·u) in one tile: each gemm_tn_bf16*.cu
// instantiates one.
template <GemmTile kTile>
void gemm_tn_bf16_tiled(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, GemmSchedule schedule,
                        void* stream) {
  plain::gemm<cutlass::bfloat16_t, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, kTile>(
      M, N, K, a, b, out, stream, "chain gradient GEMM (tn)", schedule);
}

// The backward's tn GEMM with dz in pieces along M, in one tile: each
// gemm_tn_bf16_pieces*.cu instantiates one.
template <GemmTile kTile>
void gemm_tn_bf16_pieces_tiled(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                               GemmSchedule schedule, void* stream) {
  plain::gemm_pieces<cutlass::layout::ColumnMajor, gemm::Split::along_m, kTile>(
      M, N, K, a, b, out, stream, "chain gradient GEMM (tn, pieces)", schedule);
}

}  // namespace seqmix::cuda
