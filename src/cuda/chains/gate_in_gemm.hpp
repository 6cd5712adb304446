// GLA's projection chain and its low-rank gate as one GEMM (NOTES.md, "The gate in the
// epilogue producer warp"): the chain's plain GEMM over all its columns, the code u last, its
// code tiles first (code_tile_scheduler.cuh), and each CTA's idle epilogue load warp writing a
// share of logsigmoid(u·W_gateᵀ + b)/τ while the consumers run the GEMM (gate_epilogue.cuh).
// Host declarations only (no CUDA or CUTLASS types).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/chains/params.hpp"

namespace seqmix::cuda {

// The gate's second GEMM: out [tokens, width] = logsigmoid(u·weightᵀ + bias)·scale with
// u [tokens, rank] the chain's code segment; weight [width, rank], bias [width] (or null),
// all bf16; out bf16 or f32.
struct LowRankGateProblem {
  int64_t width = 0, rank = 0;
  Rows weight;
  const void* bias = nullptr;
  float scale = 1.f;  // 1 / tau
  MutableRows out;
  bool f32 = false;
};

// Runs the chain and its gate in one GEMM when the shapes allow it: one bf16 run of identity
// columns without bias, the code segment last (rank ≤ 16) and starting on a 128-column tile
// boundary, a bf16 gate of a multiple of 32 columns with 16-byte aligned rows and bias, d a
// multiple of 8; and SEQMIX_CHAINS_GATE_EPILOGUE=1 (off by default: measured slower than the
// two calls on the H100, NOTES.md). Returns false, having launched nothing, otherwise.
// `code` is the code segment's index in p.segments.
bool projection_chain_with_gate_in_gemm(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs,
                                        size_t code, const LowRankGateProblem& gate);

}  // namespace seqmix::cuda
