// The chains' CUDA dispatch (src/core/chains_cuda.cpp), called by src/core/chains.cpp after
// the device-independent checks, only in builds with the chains' CUDA kernels
// (SEQMIX_CUDA_CHAINS). Each function checks what the CUDA path covers (a seqmix::Error
// naming the argument otherwise), then launches on options.stream.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/check.hpp"
#include "cpu/chains.hpp"

namespace seqmix::core {

// "name[i]", the argument name of one element of a list argument.
inline std::string indexed(const char* name, size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

void cuda_projection_forward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                             const Tensor& weight, const std::optional<Tensor>& bias,
                             const std::vector<Tensor>& outputs, const CommonOptions& options);
void cuda_projection_backward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                              const Tensor& weight, const std::optional<Tensor>& bias,
                              const std::vector<Tensor>& d_outputs, const ProjectionChainGrads& grads,
                              const CommonOptions& options);
void cuda_projection_with_gate_forward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                                       const Tensor& weight, const std::optional<Tensor>& bias,
                                       const std::vector<Tensor>& outputs, const cpu::ProjectionProblem& gate_problem,
                                       const LowRankGate& gate, const Tensor& gate_out, const CommonOptions& options);
void cuda_output_forward(const Checker& check, const cpu::OutputChainProblem& p, const OutputChainInputs& in,
                         const Tensor& y, const CommonOptions& options);
void cuda_output_backward(const Checker& check, const cpu::OutputChainProblem& p, const OutputChainInputs& in,
                          const Tensor& dy, const OutputChainGrads& grads, const CommonOptions& options);

}  // namespace seqmix::core
