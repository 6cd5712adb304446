// The fused chains around a sequence mixer (DESIGN.md §1 "projection chain", "output chain").
//
// Projection chain: one GEMM whose epilogue activates and scatters column segments,
//   z = x·weightᵀ + bias                       x [tokens, d], weight [W_total, d], bias [W_total]
//   outputs[s] = act_s(z[:, c_s : c_s + width_s])   outputs[s] [tokens, width_s]
// where the segments {width, activation, tau} tile the W_total columns in order. Each
// output has its own dtype (any floating dtype), so q/k/v can stay in the input dtype while
// a log-decay gate is written in f32. A consumer that wants [B, T, H, D] views an output of
// [B·T, H·D] that way; an output may also be a column slice of a wider buffer (any row
// stride, unit column stride).
//
// The low-rank gate of GLA (fla's gk_proj: d → r = 16 → H·K, then logsigmoid(·)/τ) is two
// projection chain calls: the first GEMM emits the rank-r code as an identity segment of
// the big chain, the second is a chain with a single logsigmoid segment of width H·K:
//   projection_chain_forward(u [tokens, r], weight [H·K, r], bias [H·K],
//                            {{H·K, Activation::logsigmoid, tau}}, {gk [tokens, H·K]}).
//
// Output chain: per head an RMSNorm, a SiLU output gate, then o_proj,
//   n = o / sqrt(mean over Dv of o² + eps) · norm_weight          o, g [tokens, H, Dv]
//   y = (n · SiLU(g)).reshape(tokens, H·Dv) · out_weightᵀ        y [tokens, d_out]
// o and g may also be [B, T, H, Dv] (then y is [B, T, d_out]).
//
// Dtypes: the inputs of one call (x, weight, bias; o, g, norm_weight, out_weight) share one
// dtype (bf16, f16, f32 or f64); gradients of inputs have that dtype too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

// The activation a segment's epilogue applies to its pre-activation z.
//   identity:   z
//   silu:       z·sigmoid(z)
//   sigmoid:    1 / (1 + exp(−z))
//   logsigmoid: log(sigmoid(z)) / tau   (≤ 0: a log decay, fla's GLA gate with
//               gate_logit_normalizer = tau)
//   softplus:   log(1 + exp(z))
enum class Activation { identity, silu, sigmoid, logsigmoid, softplus };

// "identity", "silu", "sigmoid", "logsigmoid", "softplus"; parse_activation throws
// seqmix::Error on any other name.
const char* activation_name(Activation activation);
Activation parse_activation(const std::string& name);

// One run of consecutive output columns. tau (> 0) divides logsigmoid; other activations
// take tau = 1.
struct ProjectionSegment {
  int64_t width = 0;
  Activation activation = Activation::identity;
  double tau = 1.0;
};

struct ProjectionChainOptions : CommonOptions {};

// Forward. Writes outputs[s] = act_s(x·weightᵀ + bias)[:, segment s] for every segment;
// outputs has one tensor per segment, [tokens, width_s], any floating dtype each.
void projection_chain_forward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                              const std::vector<ProjectionSegment>& segments, const std::vector<Tensor>& outputs,
                              const ProjectionChainOptions& options = {});

struct ProjectionChainGrads {
  Tensor dx;                   // [tokens, d], dtype of x
  Tensor dweight;              // [W_total, d]
  std::optional<Tensor> dbias; // [W_total], required exactly when bias is given
};

// Backward: from the gradient of each segment output (d_outputs[s] [tokens, width_s], any
// floating dtype) to dx, dweight and dbias. The pre-activation z is recomputed from
// x·weightᵀ + bias (nothing is stored by the forward); the activation derivative at z
// scales each segment's gradient: dz = d_outputs[s] ⊙ act_s'(z), then
// dx = dz·weight, dweight = dzᵀ·x, dbias = Σ_tokens dz.
void projection_chain_backward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                               const std::vector<ProjectionSegment>& segments,
                               const std::vector<Tensor>& d_outputs, const ProjectionChainGrads& grads,
                               const ProjectionChainOptions& options = {});

// GLA's low-rank gate taken from one segment of the chain (the "code" u, width r):
//   gate = logsigmoid(u·weightᵀ + bias) / tau          weight [width, r], bias [width]
// the second projection chain call of the two-call form above, here part of the same call.
struct LowRankGate {
  size_t segment = 0;           // the code segment's index in segments: identity, width r
  Tensor weight;                // [width, r], dtype of x
  std::optional<Tensor> bias;   // [width], dtype of x
  double tau = 16.0;            // > 0
};

// Forward of the chain and its low-rank gate in one call: writes outputs as
// projection_chain_forward does (the code segment's output included: the gate's backward
// reads it) and gate_out [tokens, width] (any floating dtype) = logsigmoid(u·weightᵀ +
// bias)/tau with u = outputs[gate.segment], which must have the dtype of x. Results are those
// of the two calls; on CUDA the gate may run on a few SMs beside the main GEMM (then u is
// summed in another order than the GEMM's). The backward is the two calls' backwards:
// projection_chain_backward of the gate (x = u, one logsigmoid segment), its du added to
// the code segment's gradient, then projection_chain_backward of the chain.
void projection_chain_with_gate_forward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                                        const std::vector<ProjectionSegment>& segments, const LowRankGate& gate,
                                        const std::vector<Tensor>& outputs, const Tensor& gate_out,
                                        const ProjectionChainOptions& options = {});

struct OutputChainOptions : CommonOptions {
  double eps = 1e-5;  // added to the mean square inside the RMSNorm, > 0
};

struct OutputChainInputs {
  Tensor o;            // [tokens, H, Dv] or [B, T, H, Dv]: the mixer's output
  Tensor g;            // same shape as o: the output gate (SiLU applied here)
  Tensor norm_weight;  // [Dv]: RMSNorm scale, shared by the heads
  Tensor out_weight;   // [d_out, H·Dv]: o_proj (nn.Linear convention, no bias)
};

// Forward. Writes y [tokens, d_out] ([B, T, d_out] for rank-4 o), dtype of o.
void output_chain_forward(const OutputChainInputs& in, const Tensor& y, const OutputChainOptions& options = {});

struct OutputChainGrads {
  Tensor d_o;           // like o
  Tensor dg;            // like g
  Tensor dnorm_weight;  // [Dv]
  Tensor dout_weight;   // [d_out, H·Dv]
};

// Backward: from dy (like y, dtype of o) to the gradient of every input. The normalised,
// gated activations are recomputed from o and g.
void output_chain_backward(const OutputChainInputs& in, const Tensor& dy, const OutputChainGrads& grads,
                           const OutputChainOptions& options = {});

}  // namespace seqmix
