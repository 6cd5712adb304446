// Validation and dispatch of the projection chain and the output chain.
#include "seqmix/chains.hpp"

#include <cmath>
#include <cstdio>

#include "core/chains_cuda.hpp"
#include "core/check.hpp"
#include "cpu/chains.hpp"
#include "seqmix/error.hpp"

namespace seqmix {
namespace {

constexpr std::initializer_list<DType> kFloating = {DType::bf16, DType::f16, DType::f32, DType::f64};

// Shortest round-trip-ish form ("%g"); no iostreams, whose locale state is not safe to
// share with every host process that loads the extension.
std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

using core::indexed;

bool is_activation(Activation a) {
  switch (a) {
    case Activation::identity:
    case Activation::silu:
    case Activation::sigmoid:
    case Activation::logsigmoid:
    case Activation::softplus: return true;
  }
  return false;
}

// ---- projection chain ----

void check_segment(const core::Checker& check, const ProjectionSegment& seg, size_t s) {
  const std::string arg = indexed("segments", s);
  if (!is_activation(seg.activation))
    check.fail(arg, "an Activation", "value " + std::to_string(static_cast<int>(seg.activation)));
  if (seg.width < 1) check.fail(arg, "width >= 1", "width = " + std::to_string(seg.width));
  if (!(seg.tau > 0) || !std::isfinite(seg.tau)) check.fail(arg, "tau > 0", "tau = " + number(seg.tau));
  if (seg.activation != Activation::logsigmoid && seg.tau != 1.0)
    check.fail(arg, "tau = 1 (tau divides logsigmoid only)",
               "tau = " + number(seg.tau) + " with activation " + activation_name(seg.activation));
}

cpu::ProjectionProblem check_projection(const core::Checker& check, const Tensor& x, const Tensor& weight,
                                        const std::optional<Tensor>& bias,
                                        const std::vector<ProjectionSegment>& segments) {
  const Device device = x.device;
  check.view(x, "x", 2, "[tokens, d]", device);
  check.dtype_in(x, "x", kFloating);
  const int64_t tokens = x.shape[0], d = x.shape[1];
  check.positive(tokens, "x", "tokens");
  check.positive(d, "x", "model width d");
  check.view(weight, "weight", 2, "[W_total, d]", device);
  check.same_dtype(weight, "weight", x.dtype, "x");
  if (segments.empty()) check.fail("segments", "at least one segment", "none");
  cpu::ProjectionProblem p{tokens, d, 0, segments, {}};
  for (size_t s = 0; s < segments.size(); ++s) {
    check_segment(check, segments[s], s);
    p.offsets.push_back(p.columns);
    p.columns += segments[s].width;
  }
  if (p.columns != weight.shape[0])
    check.fail("segments", "widths summing to W_total = " + std::to_string(weight.shape[0]) + " (the rows of weight)",
               "widths summing to " + std::to_string(p.columns));
  check.shape(weight, "weight", {p.columns, d}, "[W_total, d]");
  if (bias) {
    check.view(*bias, "bias", 1, "[W_total]", device);
    check.shape(*bias, "bias", {p.columns}, "[W_total]");
    check.same_dtype(*bias, "bias", x.dtype, "x");
  }
  return p;
}

// One [tokens, width] tensor per segment, any floating dtype (outputs or their gradients).
void check_per_segment(const core::Checker& check, const std::vector<Tensor>& tensors, const char* name,
                       const cpu::ProjectionProblem& p, const Device& device) {
  if (tensors.size() != p.segments.size())
    check.fail(name, std::to_string(p.segments.size()) + " tensors (one per segment)",
               std::to_string(tensors.size()) + " tensors");
  for (size_t s = 0; s < tensors.size(); ++s) {
    const std::string arg = indexed(name, s);
    check.view(tensors[s], arg.c_str(), 2, "[tokens, width]", device);
    check.shape(tensors[s], arg.c_str(), {p.tokens, p.segments[s].width}, "[tokens, width]");
    check.dtype_in(tensors[s], arg.c_str(), kFloating);
  }
}

// A tensor of the given shape and the dtype of `like`.
void check_like(const core::Checker& check, const Tensor& t, const char* arg, const std::vector<int64_t>& shape,
                const char* layout, const Tensor& like, const char* like_name) {
  check.view(t, arg, static_cast<int>(shape.size()), layout, like.device);
  check.shape(t, arg, shape, layout);
  check.same_dtype(t, arg, like.dtype, like_name);
}

// ---- the chain with its low-rank gate ----

// The gate's own one-segment chain (x = the code u, logsigmoid / tau over its width), after
// checking the gate against the chain and its outputs.
cpu::ProjectionProblem check_low_rank_gate(const core::Checker& check, const cpu::ProjectionProblem& p,
                                           const Tensor& x, const LowRankGate& gate,
                                           const std::vector<Tensor>& outputs, const Tensor& gate_out) {
  const size_t count = p.segments.size();
  if (gate.segment >= count)
    check.fail("gate.segment", "the index of a segment (below " + std::to_string(count) + ")",
               std::to_string(gate.segment));
  const ProjectionSegment& code = p.segments[gate.segment];
  if (code.activation != Activation::identity)
    check.fail("gate.segment", "an identity segment (the gate's code)",
               "segment " + std::to_string(gate.segment) + " with activation " + activation_name(code.activation));
  const std::string code_arg = indexed("outputs", gate.segment);
  check.same_dtype(outputs[gate.segment], code_arg.c_str(), x.dtype, "x (the gate reads it)");
  check.view(gate.weight, "gate.weight", 2, "[width, r]", x.device);
  check.same_dtype(gate.weight, "gate.weight", x.dtype, "x");
  const int64_t width = gate.weight.shape[0];
  check.positive(width, "gate.weight", "gate width");
  check.shape(gate.weight, "gate.weight", {width, code.width}, "[width, r] (r: the code segment's width)");
  if (gate.bias) {
    check.view(*gate.bias, "gate.bias", 1, "[width]", x.device);
    check.shape(*gate.bias, "gate.bias", {width}, "[width]");
    check.same_dtype(*gate.bias, "gate.bias", x.dtype, "x");
  }
  if (!(gate.tau > 0) || !std::isfinite(gate.tau)) check.fail("gate.tau", "tau > 0", "tau = " + number(gate.tau));
  check.view(gate_out, "gate_out", 2, "[tokens, width]", x.device);
  check.shape(gate_out, "gate_out", {p.tokens, width}, "[tokens, width]");
  check.dtype_in(gate_out, "gate_out", kFloating);
  return {p.tokens, code.width, width, {{width, Activation::logsigmoid, gate.tau}}, {0}};
}

// ---- output chain ----

struct OutputChainLayout {
  cpu::OutputChainProblem problem;
  std::vector<int64_t> y_shape;  // the leading dims of o, then d_out
  const char* o_layout;
  const char* y_layout;
};

OutputChainLayout check_output_chain(const core::Checker& check, const OutputChainInputs& in,
                                     const OutputChainOptions& options) {
  const Device device = in.o.device;
  const bool batched = in.o.rank() == 4;
  const char* o_layout = batched ? "[B, T, H, Dv]" : "[tokens, H, Dv]";
  check.view(in.o, "o", batched ? 4 : 3, batched ? o_layout : "[tokens, H, Dv] (or 4 dimensions [B, T, H, Dv])",
             device);
  check.dtype_in(in.o, "o", kFloating);
  const int rank = in.o.rank();
  const int64_t H = in.o.shape[rank - 2], Dv = in.o.shape[rank - 1];
  int64_t tokens = 1;
  for (int i = 0; i < rank - 2; ++i) tokens *= in.o.shape[i];
  check.positive(tokens, "o", batched ? "tokens B·T" : "tokens");
  check.positive(H, "o", "heads H");
  check.positive(Dv, "o", "head dim Dv");
  check_like(check, in.g, "g", in.o.shape, o_layout, in.o, "o");
  check_like(check, in.norm_weight, "norm_weight", {Dv}, "[Dv]", in.o, "o");
  check.view(in.out_weight, "out_weight", 2, "[d_out, H·Dv]", device);
  const int64_t d_out = in.out_weight.shape[0];
  check.positive(d_out, "out_weight", "output width d_out");
  check_like(check, in.out_weight, "out_weight", {d_out, H * Dv}, "[d_out, H·Dv]", in.o, "o");
  if (!(options.eps > 0) || !std::isfinite(options.eps)) check.fail("eps", "eps > 0", "eps = " + number(options.eps));
  std::vector<int64_t> y_shape(in.o.shape.begin(), in.o.shape.end() - 2);
  y_shape.push_back(d_out);
  return {{tokens, H, Dv, d_out, options.eps}, y_shape, o_layout, batched ? "[B, T, d_out]" : "[tokens, d_out]"};
}

#ifndef SEQMIX_CUDA_CHAINS
[[noreturn]] void no_cuda(const core::Checker& check, const char* arg, const Tensor& t) {
  check.fail(arg, "a CPU tensor (this build has no CUDA kernels for the chains; see SEQMIX_CUDA_KERNELS)",
             t.device.str());
}
#endif

}  // namespace

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::identity: return "identity";
    case Activation::silu: return "silu";
    case Activation::sigmoid: return "sigmoid";
    case Activation::logsigmoid: return "logsigmoid";
    case Activation::softplus: return "softplus";
  }
  return "unknown";
}

Activation parse_activation(const std::string& name) {
  for (Activation a : {Activation::identity, Activation::silu, Activation::sigmoid, Activation::logsigmoid,
                       Activation::softplus})
    if (name == activation_name(a)) return a;
  throw Error("seqmix: activation: expected identity, silu, sigmoid, logsigmoid or softplus, got '" + name + "'");
}

void projection_chain_forward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                              const std::vector<ProjectionSegment>& segments, const std::vector<Tensor>& outputs,
                              const ProjectionChainOptions& options) {
  const core::Checker check("seqmix.projection_chain");
  const auto p = check_projection(check, x, weight, bias, segments);
  check_per_segment(check, outputs, "outputs", p, x.device);
  if (x.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    core::cuda_projection_forward(check, p, x, weight, bias, outputs, options);
    return;
#else
    no_cuda(check, "x", x);
#endif
  }
  if (core::resolve_cpu_impl(check, options.impl, x) == Impl::reference)
    cpu::reference::projection_chain_forward(p, x, weight, bias, outputs);
  else
    cpu::fast::projection_chain_forward(p, x, weight, bias, outputs);
}

void projection_chain_backward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                               const std::vector<ProjectionSegment>& segments,
                               const std::vector<Tensor>& d_outputs, const ProjectionChainGrads& grads,
                               const ProjectionChainOptions& options) {
  const core::Checker check("seqmix.projection_chain_backward");
  const auto p = check_projection(check, x, weight, bias, segments);
  check_per_segment(check, d_outputs, "d_outputs", p, x.device);
  check_like(check, grads.dx, "dx", x.shape, "[tokens, d]", x, "x");
  check_like(check, grads.dweight, "dweight", weight.shape, "[W_total, d]", x, "x");
  if (bias.has_value() != grads.dbias.has_value())
    check.fail("dbias", bias ? "a tensor (bias is given)" : "none (bias is not given)", grads.dbias ? "a tensor" : "none");
  if (grads.dbias) check_like(check, *grads.dbias, "dbias", {p.columns}, "[W_total]", x, "x");
  if (x.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    core::cuda_projection_backward(check, p, x, weight, bias, d_outputs, grads, options);
    return;
#else
    no_cuda(check, "x", x);
#endif
  }
  if (core::resolve_cpu_impl(check, options.impl, x) == Impl::reference)
    cpu::reference::projection_chain_backward(p, x, weight, bias, d_outputs, grads);
  else
    cpu::fast::projection_chain_backward(p, x, weight, bias, d_outputs, grads);
}

void projection_chain_with_gate_forward(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                                        const std::vector<ProjectionSegment>& segments, const LowRankGate& gate,
                                        const std::vector<Tensor>& outputs, const Tensor& gate_out,
                                        const ProjectionChainOptions& options) {
  const core::Checker check("seqmix.projection_chain_with_gate");
  const auto p = check_projection(check, x, weight, bias, segments);
  check_per_segment(check, outputs, "outputs", p, x.device);
  const auto gate_problem = check_low_rank_gate(check, p, x, gate, outputs, gate_out);
  if (x.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    core::cuda_projection_with_gate_forward(check, p, x, weight, bias, outputs, gate_problem, gate, gate_out, options);
    return;
#else
    no_cuda(check, "x", x);
#endif
  }
  // The two calls' composition: the chain, then the gate's chain on the code it wrote.
  const Tensor& code = outputs[gate.segment];
  if (core::resolve_cpu_impl(check, options.impl, x) == Impl::reference) {
    cpu::reference::projection_chain_forward(p, x, weight, bias, outputs);
    cpu::reference::projection_chain_forward(gate_problem, code, gate.weight, gate.bias, {gate_out});
  } else {
    cpu::fast::projection_chain_forward(p, x, weight, bias, outputs);
    cpu::fast::projection_chain_forward(gate_problem, code, gate.weight, gate.bias, {gate_out});
  }
}

void output_chain_forward(const OutputChainInputs& in, const Tensor& y, const OutputChainOptions& options) {
  const core::Checker check("seqmix.output_chain");
  const auto layout = check_output_chain(check, in, options);
  check_like(check, y, "y", layout.y_shape, layout.y_layout, in.o, "o");
  if (in.o.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    core::cuda_output_forward(check, layout.problem, in, y, options);
    return;
#else
    no_cuda(check, "o", in.o);
#endif
  }
  if (core::resolve_cpu_impl(check, options.impl, in.o) == Impl::reference)
    cpu::reference::output_chain_forward(layout.problem, in, y);
  else
    cpu::fast::output_chain_forward(layout.problem, in, y);
}

void output_chain_backward(const OutputChainInputs& in, const Tensor& dy, const OutputChainGrads& grads,
                           const OutputChainOptions& options) {
  const core::Checker check("seqmix.output_chain_backward");
  const auto layout = check_output_chain(check, in, options);
  check_like(check, dy, "dy", layout.y_shape, layout.y_layout, in.o, "o");
  check_like(check, grads.d_o, "d_o", in.o.shape, layout.o_layout, in.o, "o");
  check_like(check, grads.dg, "dg", in.o.shape, layout.o_layout, in.o, "o");
  check_like(check, grads.dnorm_weight, "dnorm_weight", in.norm_weight.shape, "[Dv]", in.o, "o");
  check_like(check, grads.dout_weight, "dout_weight", in.out_weight.shape, "[d_out, H·Dv]", in.o, "o");
  if (in.o.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    core::cuda_output_backward(check, layout.problem, in, dy, grads, options);
    return;
#else
    no_cuda(check, "o", in.o);
#endif
  }
  if (core::resolve_cpu_impl(check, options.impl, in.o) == Impl::reference)
    cpu::reference::output_chain_backward(layout.problem, in, dy, grads);
  else
    cpu::fast::output_chain_backward(layout.problem, in, dy, grads);
}

}  // namespace seqmix
