// A GEMM mainloop whose A operand lies in pieces: separate matrices side by side along K
// (dx = Σ_s dz_s·W_s over the segments' gradients) or along M (dW's rows, each segment's
// dz_sᵀ·x), so the backward reads every segment's gradient where autograd left it instead
// of gathering them into one dz first (NOTES.md, "The backward without the gather").
//
// It is CUTLASS's sm90 TMA warp-specialized mainloop (the one its CollectiveBuilder
// builds: same shared-memory layouts, pipeline and consumer side) with one TMA descriptor
// per piece: the producer picks, for each k tile (along K) or for each output tile (along
// M), the piece the tile falls in, and reads it at the tile's coordinate inside that
// piece. Every piece starts on a tile boundary of the split dimension; a piece may end
// inside a tile: TMA fills the rest of the box with zeros, so those k indices add nothing
// (along K), or those rows are outside the piece and the output (along M, the last piece).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

#include <climits>
#include <cstdint>

#include "cuda/chains/params.hpp"

namespace seqmix::cuda::gemm {

enum class Split { along_m, along_k };

// The stride of a matrix whose leading (non-unit) dimension is `ld` elements, batch 0, in
// CUTLASS's Stride form: (ld, 1, 0) for a row-major-stored operand of its role, (1, ld, 0)
// for a transposed one.
template <class Stride>
Stride with_leading_dimension(int64_t ld) {
  Stride s{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>) cute::get<1>(s) = ld;
  else cute::get<0>(s) = ld;
  return s;
}

template <class Base, Split kSplit>
struct PiecesMainloop : Base {
  using typename Base::GmemTiledCopyA;
  using typename Base::InternalElementA;
  using typename Base::MainloopPipeline;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::StrideA;
  using typename Base::TensorStorage;
  using typename Base::TileShape;
  using TmaA = typename Base::Params::TMA_A;
  using ClusterShape = typename Base::DispatchPolicy::ClusterShape;

  // The tile of the split dimension: a piece starts at a multiple of it.
  static constexpr int kSplitTile = kSplit == Split::along_m ? cute::size<0>(TileShape{}) : cute::size<2>(TileShape{});

  struct Arguments : Base::Arguments {
    RowPieces pieces;  // piece p: the split dimension's [first[p], first[p + 1])
  };

  struct Params : Base::Params {
    TmaA piece_tma[kMaxPieces];
    int32_t extent[kMaxPieces];              // the piece's extent along the split dimension
    int32_t first_tile[kMaxPieces + 1];      // its first tile there; first_tile[count] = INT_MAX
    int32_t rows = 0, depth = 0;             // the problem's M and K
  };

  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
    Params params;
    static_cast<typename Base::Params&>(params) = Base::to_underlying_arguments(problem_shape, args, workspace);
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    params.rows = M;
    params.depth = K;
    for (int p = 0; p < kMaxPieces + 1; ++p) params.first_tile[p] = INT_MAX;
    for (int p = 0; p < args.pieces.count; ++p) {
      const auto extent = static_cast<int32_t>(args.pieces.first[p + 1] - args.pieces.first[p]);
      const auto shape = kSplit == Split::along_m ? cute::make_shape(extent, int32_t(K), int32_t(L))
                                                  : cute::make_shape(int32_t(M), extent, int32_t(L));
      const Rows& rows = args.pieces.piece[p];
      const auto piece = cute::make_tensor(reinterpret_cast<InternalElementA const*>(rows.data),
                                           cute::make_layout(shape, with_leading_dimension<StrideA>(rows.stride)));
      params.piece_tma[p] = cute::make_tma_copy_A_sm90(GmemTiledCopyA{}, piece, SmemLayoutA{}(cute::_, cute::_, cute::Int<0>{}),
                                                       TileShape{}, ClusterShape{});
      params.extent[p] = extent;
      params.first_tile[p] = static_cast<int32_t>(args.pieces.first[p] / kSplitTile);
    }
    return params;
  }

  // The base's alignment checks, and pieces that tile the split dimension from tile
  // boundaries with 16-byte bases and rows.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
    auto [M, N, K, L] = cute::append<4>(problem_shape, 1);
    const RowPieces& pieces = args.pieces;
    if (!Base::can_implement(problem_shape, args) || pieces.count < 1 || pieces.count > kMaxPieces) return false;
    if (pieces.first[0] != 0 || pieces.first[pieces.count] != (kSplit == Split::along_m ? M : K)) return false;
    constexpr int kAlign = 16 / sizeof(InternalElementA);
    for (int p = 0; p < pieces.count; ++p)
      if (pieces.first[p] % kSplitTile != 0 || pieces.first[p + 1] <= pieces.first[p] ||
          pieces.piece[p].stride % kAlign != 0 || reinterpret_cast<uintptr_t>(pieces.piece[p].data) % 16 != 0)
        return false;
    return true;
  }

  // B's and the pieces' descriptors (the base's A descriptor is never read).
  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& params) {
    cute::prefetch_tma_descriptor(params.tma_load_b.get_tma_descriptor());
    for (int p = 0; p < kMaxPieces && params.first_tile[p] != INT_MAX; ++p)
      cute::prefetch_tma_descriptor(params.piece_tma[p].get_tma_descriptor());
  }

  // The producer: the base's load, with A read from the piece each tile falls in.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, MainloopPipeline pipeline, PipelineState smem_pipe_write,
                           cute::tuple<TensorA, TensorB> const& load_inputs, BlockCoord const& blk_coord,
                           KTileIterator k_tile_iter, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, TensorStorage& shared_tensors) {
    using namespace cute;
    if (!elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    constexpr uint32_t cluster_m = size<0>(ClusterShape{});
    const uint32_t in_cluster_m = block_rank_in_cluster % cluster_m, in_cluster_n = block_rank_in_cluster / cluster_m;
    const int m_coord = get<0>(blk_coord), n_coord = get<1>(blk_coord), l_coord = get<3>(blk_coord);

    auto block_tma_b = params.tma_load_b.get_slice(in_cluster_m);
    Tensor tBgB = block_tma_b.partition_S(get<1>(load_inputs)(_, _, n_coord, _, l_coord));  // (TMA, TMA_N, TMA_K, k)
    Tensor tBsB = block_tma_b.partition_D(sB);
    Tensor tAsA = params.piece_tma[0].get_slice(in_cluster_n).partition_D(sA);

    // A's tiles in piece p, by k tile (local to the piece along K; the whole K along M).
    auto piece_tiles = [&](int p) {
      const int32_t extent = params.extent[p];
      const auto shape = kSplit == Split::along_m ? make_shape(extent, params.depth, 1) : make_shape(params.rows, extent, 1);
      const int m_tile = kSplit == Split::along_m ? m_coord - params.first_tile[p] : m_coord;
      Tensor tiles = local_tile(params.piece_tma[p].get_tma_tensor(shape), TileShape{}, make_coord(_, _, _),
                                Step<_1, Underscore, _1>{});  // (BLK_M, BLK_K, m, k, l)
      return params.piece_tma[p].get_slice(in_cluster_n).partition_S(tiles(_, _, m_tile, _, 0));
    };

    // Multicast masks as the base sets them: A to the cluster's CTAs along N, B along M.
    uint16_t mcast_a = 0, mcast_b = 0;
    auto cluster_layout = Layout<ClusterShape>{};
    if constexpr (is_same_v<GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>)
      for (int n = 0; n < size<1>(cluster_layout); ++n) mcast_a |= uint16_t(1) << cluster_layout(in_cluster_m, n, Int<0>{});
    if constexpr (is_same_v<typename Base::GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>)
      for (int m = 0; m < size<0>(cluster_layout); ++m) mcast_b |= uint16_t(1) << cluster_layout(m, in_cluster_n, Int<0>{});

    // The piece of the first tile: along M the output tile's, along K the first k tile's.
    const int split_tile = kSplit == Split::along_m ? m_coord : int(*k_tile_iter);
    int p = 0;
    while (params.first_tile[p + 1] <= split_tile) ++p;
    auto tAgA = piece_tiles(p);  // (TMA, TMA_M, TMA_K, k)

    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count) {
      int k_tile = *k_tile_iter;
      if constexpr (kSplit == Split::along_k) {
        if (k_tile >= params.first_tile[p + 1]) {
          while (params.first_tile[p + 1] <= k_tile) ++p;
          tAgA = piece_tiles(p);
        }
      }
      pipeline.producer_acquire(smem_pipe_write);
      auto* barrier = pipeline.producer_get_barrier(smem_pipe_write);
      const int stage = smem_pipe_write.index();
      const int a_tile = kSplit == Split::along_k ? k_tile - params.first_tile[p] : k_tile;
      copy(params.piece_tma[p].with(*barrier, mcast_a), tAgA(_, _, _, a_tile), tAsA(_, _, _, stage));
      copy(params.tma_load_b.with(*barrier, mcast_b), tBgB(_, _, _, k_tile), tBsB(_, _, _, stage));
      ++k_tile_iter;
      ++smem_pipe_write;
    }
  }
};

}  // namespace seqmix::cuda::gemm
