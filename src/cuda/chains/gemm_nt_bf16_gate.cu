// Explicit instantiation: out = a·bᵀ (a [M, K], b [N, K] row-major), bf16, no fusion, in the
// tile cooperative_256x128_cluster2x1, with GLA's low-rank gate in the epilogue of the last
// column tile and the code tiles ordered onto the clusters with a spare round
// (gate_in_gemm.hpp); and the host's choice of that path.
#include <cstdint>

#include "cuda/chains/code_tile_scheduler.cuh"
#include "cuda/chains/gate_epilogue.cuh"
#include "cuda/chains/gate_in_gemm.hpp"
#include "cuda/chains/plain_gemm.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {

namespace {

constexpr GemmTile kTile = GemmTile::cooperative_256x128_cluster2x1;
constexpr int64_t kTileColumns = tile_geometry(kTile).columns;

void gemm_nt_bf16_gate(GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out,
                       const gemm::GateInEpilogue& gate, void* stream) {
  using Element = cutlass::bfloat16_t;
  using G = gemm::Sm90Gemm<kTile, Element, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, void,
                           plain::Identity<Element>, Element, gemm::AsBuilt, gemm::GateEpilogue,
                           gemm::CodeTilesLastTag>;
  auto args = G::arguments(M, N, K, a.data, a.stride, b.data, b.stride, nullptr, out.stride, out.data, out.stride,
                           plain::identity_arguments<G>(), schedule);
  args.epilogue.gate = gate;
  G::run(args, static_cast<cudaStream_t>(stream), "chain GEMM (nt) with the low-rank gate", schedule.programmatic);
}

}  // namespace

bool projection_chain_with_gate_in_gemm(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs,
                                        size_t code, const LowRankGateProblem& gate) {
  // Off by default: measured slower than the two calls on the H100 (NOTES.md).
  if (!flag_from_environment("SEQMIX_CHAINS_GATE_EPILOGUE", false)) return false;
  if (p.tokens < 1 || runs.size() != 1 || runs[0].f32 || runs[0].first != 0 || runs[0].width != p.columns || p.bias)
    return false;
  for (const SegmentColumns& s : p.segments)
    if (s.code != 0) return false;
  const int64_t rank = p.segments[code].width, code_start = p.columns - rank;
  if (code + 1 != p.segments.size() || rank > 16 || gate.rank != rank || code_start < kTileColumns ||
      code_start % kTileColumns != 0 || p.d % 8 != 0)
    return false;
  if (gate.f32 || gate.width % 32 != 0 || gate.out.stride % 8 != 0 ||
      reinterpret_cast<uintptr_t>(gate.out.data) % 16 != 0 || reinterpret_cast<uintptr_t>(gate.bias) % 16 != 0)
    return false;
  // The forward's schedule where it is this tile; the tall tile along N otherwise (above 16k
  // tokens the dispatch may take 128 × 256). No swizzle: the code tiles are the last column.
  GemmSchedule schedule = forward_schedule(p.tokens, p.columns, p.d);
  if (schedule.tile != kTile) schedule = {kTile, Raster::along_n, 1};
  schedule.swizzle = 1;
  gemm::GateInEpilogue g;
  g.weight = static_cast<const narrow::bf16*>(gate.weight.data);
  g.weight_stride = gate.weight.stride;
  g.rank = static_cast<int>(rank);
  g.width = static_cast<int>(gate.width);
  g.bias = static_cast<const narrow::bf16*>(gate.bias);
  g.scale = gate.scale;
  g.out = static_cast<narrow::bf16*>(gate.out.data);
  g.out_stride = gate.out.stride;
  g.code_tile = static_cast<int>(code_start / kTileColumns);
  gemm_nt_bf16_gate(schedule, p.tokens, p.columns, p.d, p.x, p.weight, runs[0].out, g, p.stream);
  return true;
}

}  // namespace seqmix::cuda
