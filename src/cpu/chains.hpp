// CPU backend of the projection and output chains, on problems already validated by
// src/core/chains.cpp. Two forms of each op:
//   reference: the float64 oracle, naive loops written from the definition;
//   fast:      float32, the blocked threaded GEMM of cpu/gemm.hpp with the activation (or
//              the store) fused into its per-tile epilogue, the form the GPU epilogue takes.
#pragma once

#include <optional>
#include <vector>

#include "seqmix/chains.hpp"

namespace seqmix::cpu {

struct ProjectionProblem {
  int64_t tokens, d, columns;              // x [tokens, d], weight [columns, d]
  std::vector<ProjectionSegment> segments;
  std::vector<int64_t> offsets;            // first column of each segment
};

struct OutputChainProblem {
  int64_t tokens, heads, dv, d_out;        // o, g as [tokens, heads, dv]; out_weight [d_out, heads·dv]
  double eps;
};

namespace reference {
void projection_chain_forward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                              const std::optional<Tensor>& bias, const std::vector<Tensor>& outputs);
void projection_chain_backward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                               const std::optional<Tensor>& bias, const std::vector<Tensor>& d_outputs,
                               const ProjectionChainGrads& grads);
void output_chain_forward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& y);
void output_chain_backward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& dy,
                           const OutputChainGrads& grads);
}  // namespace reference

namespace fast {
void projection_chain_forward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                              const std::optional<Tensor>& bias, const std::vector<Tensor>& outputs);
void projection_chain_backward(const ProjectionProblem& p, const Tensor& x, const Tensor& weight,
                               const std::optional<Tensor>& bias, const std::vector<Tensor>& d_outputs,
                               const ProjectionChainGrads& grads);
void output_chain_forward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& y);
void output_chain_backward(const OutputChainProblem& p, const OutputChainInputs& in, const Tensor& dy,
                           const OutputChainGrads& grads);
}  // namespace fast

}  // namespace seqmix::cpu
