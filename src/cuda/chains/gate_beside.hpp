// GLA's projection chain and its low-rank gate in one call (NOTES.md, "The low-rank gate
// beside the GEMM"): the main GEMM over the chain's wide identity columns runs persistent on
// all but a few SMs while, on a stream forked from the caller's, one side kernel on those
// few SMs computes the rank-r code columns u = x·W_codeᵀ and then the gate
// logsigmoid(u·W_gateᵀ + b)/τ. Host declarations only (no CUDA or CUTLASS types).
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/chains/gemm_tiles.hpp"
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

// Runs the chain and its gate with the gate beside the GEMM when the shapes allow it (one
// bf16 run of identity columns without bias, the code segment its last columns, rank ≤ 16,
// gate width ≤ 1024, d a multiple of 8 up to 3072, and no more rounds of 256 × 128 tiles on
// the fewer SMs than the whole width takes on all of them in its own schedule) and
// SEQMIX_CHAINS_GATE_BESIDE=1 (off by default: measured slower than the two calls on the
// H100, NOTES.md); returns false, having launched nothing, otherwise.
// `code` is the code segment's index in p.segments.
bool projection_chain_with_gate_beside(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs,
                                       size_t code, const LowRankGateProblem& gate);

// The side kernel alone, one block a SM on `sms` SMs, on `stream`: u into the code
// segment's columns of chain_out ([tokens, p.columns]), and the gate. Called by the above on
// the forked stream; for timing it alone. Throws on a shape it does not take.
void gate_side_kernel(const ProjectionChainProblem& p, MutableRows chain_out, size_t code,
                      const LowRankGateProblem& gate, int sms, void* stream);

// The SMs the side kernel takes: SEQMIX_CHAINS_GATE_SMS (default 4).
int gate_beside_sms();

// out [M, N] = a·bᵀ as gemm_nt_bf16 in the tile cooperative 256 × 128, clusters 2 × 1, with
// the persistent grid on `sms` SMs (a multiple of 2); the rest of the device stays free.
void gemm_nt_bf16_on_sms(int sms, GemmSchedule schedule, int64_t M, int64_t N, int64_t K, Rows a, Rows b,
                         MutableRows out, void* stream);

}  // namespace seqmix::cuda
