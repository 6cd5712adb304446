// Explicit instantiation: out = a·bᵀ (a [M, K], b [N, K] row-major), bf16, no fusion, in the
// tile cooperative_256x128_cluster2x1, the code tiles first and GLA's low-rank gate computed
// by each CTA's epilogue load warp (gate_epilogue.cuh, gate_in_gemm.hpp); and the host's
// choice of that path.
#include <cstdint>

#include "cuda/chains/code_tile_scheduler.cuh"
#include "cuda/chains/gate_epilogue.cuh"
#include "cuda/chains/gate_in_gemm.hpp"
#include "cuda/chains/plain_gemm.cuh"
#include "cuda/chains/scratch.cuh"
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
                           gemm::CodeTilesFirstTag>;
  auto args = G::arguments(M, N, K, a.data, a.stride, b.data, b.stride, nullptr, out.stride, out.data, out.stride,
                           plain::identity_arguments<G>(), schedule);
  args.epilogue.gate = gate;
  G::run(args, static_cast<cudaStream_t>(stream), "chain GEMM (nt) with the low-rank gate", schedule.programmatic);
}

}  // namespace

bool projection_chain_with_gate_in_gemm(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs,
                                        size_t code, const LowRankGateProblem& gate) {
  // Off by default: measured slower than the two calls on the H100 (NOTES.md, "The gate in
  // the epilogue producer warp").
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
  // The forward's raster where its tile is this one, along N otherwise. The code tiles'
  // scheduler has no swizzle.
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
  // u and its bands' counts per call (a graph replays its parameters, and calls on other
  // streams may run at the same time), the counts zeroed before the GEMM.
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const int64_t bands = (p.tokens + gemm::kBandRows - 1) / gemm::kBandRows;
  const chains::Scratch<narrow::bf16> u(p.tokens * 16, stream);
  const chains::Scratch<int> published(bands, stream);
  check(cudaMemsetAsync(published.get(), 0, bands * sizeof(int), stream), "chain GEMM with the gate: counts");
  g.u = u.get();
  g.published = published.get();
  g.rows = static_cast<int>(p.tokens);
  gemm_nt_bf16_gate(schedule, p.tokens, p.columns, p.d, p.x, p.weight, runs[0].out, g, p.stream);
  return true;
}

}  // namespace seqmix::cuda
