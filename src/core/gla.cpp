// Validation and dispatch of gated linear attention.
#include "seqmix/gla.hpp"

#include <cmath>

#include "core/check.hpp"
#include "cpu/gla.hpp"

namespace seqmix {
namespace {

constexpr const char* kKeyLayout = "[B, T, H, K]";
constexpr const char* kValueLayout = "[B, T, H, V]";
constexpr const char* kStateLayout = "[N, H, K, V]";

// A [B, T, H, K] tensor shaped and typed like q.
void check_like_q(const core::Checker& check, const Tensor& t, const char* arg, const Tensor& q) {
  check.view(t, arg, 4, kKeyLayout, q.device);
  check.shape(t, arg, q.shape, kKeyLayout);
  check.same_dtype(t, arg, q.dtype, "q");
}

// A [B, T, H, V] tensor shaped like v and typed like q.
void check_like_v(const core::Checker& check, const Tensor& t, const char* arg, const GlaInputs& in) {
  check.view(t, arg, 4, kValueLayout, in.q.device);
  check.shape(t, arg, in.v.shape, kValueLayout);
  check.same_dtype(t, arg, in.q.dtype, "q");
}

void check_state(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                 const cpu::GlaProblem& p, const Device& device) {
  if (!t) return;
  check.view(*t, arg, 4, kStateLayout, device);
  check.shape(*t, arg, {static_cast<int64_t>(p.sequences.size()), p.H, p.K, p.V}, kStateLayout);
  check.dtype_in(*t, arg, {DType::f32, DType::f64});
}

cpu::GlaProblem check_inputs(const core::Checker& check, const GlaInputs& in, const GlaOptions& options) {
  const Tensor& q = in.q;
  check.view(q, "q", 4, kKeyLayout, q.device);
  check.dtype_in(q, "q", {DType::bf16, DType::f16, DType::f32, DType::f64});
  const int64_t B = q.shape[0], T = q.shape[1], H = q.shape[2], K = q.shape[3];
  check.positive(H, "q", "heads H");
  check.positive(K, "q", "key dimension K");
  check_like_q(check, in.k, "k", q);
  check_like_q(check, in.g, "g", q);
  check.view(in.v, "v", 4, kValueLayout, q.device);
  const int64_t V = in.v.shape[3];
  check.shape(in.v, "v", {B, T, H, V}, kValueLayout);
  check.same_dtype(in.v, "v", q.dtype, "q");
  check.positive(V, "v", "value dimension V");
  if (!std::isfinite(options.scale)) check.fail("scale", "a finite number", std::to_string(options.scale));
  cpu::GlaProblem problem{B, T, H, K, V, core::make_sequences(check, B, T, in.cu_seqlens), options.scale};
  check_state(check, in.initial_state, "initial_state", problem, q.device);
  return problem;
}

// An optional gradient is given exactly when its input is.
void check_presence(const core::Checker& check, const std::optional<Tensor>& grad, const char* arg,
                    const std::optional<Tensor>& input, const char* input_name) {
  if (grad.has_value() == input.has_value()) return;
  check.fail(arg, input ? std::string("a tensor (") + input_name + " is given)"
                        : std::string("none (") + input_name + " is not given)",
             grad ? "a tensor" : "none");
}

}  // namespace

void gla_forward(const GlaInputs& in, const GlaOutputs& out, const GlaOptions& options) {
  const core::Checker check("seqmix.chunk_gla");
  const auto problem = check_inputs(check, in, options);
  check_like_v(check, out.o, "o", in);
  check_state(check, out.final_state, "final_state", problem, in.q.device);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::gla_forward(problem, in, out, impl);
}

void gla_backward(const GlaInputs& in, const Tensor& d_o, const std::optional<Tensor>& d_final_state,
                  const GlaGrads& grads, const GlaOptions& options) {
  const core::Checker check("seqmix.chunk_gla_backward");
  const auto problem = check_inputs(check, in, options);
  check_like_v(check, d_o, "do", in);
  check_state(check, d_final_state, "d_final_state", problem, in.q.device);
  check_like_q(check, grads.dq, "dq", in.q);
  check_like_q(check, grads.dk, "dk", in.q);
  check_like_v(check, grads.dv, "dv", in);
  check_like_q(check, grads.dg, "dg", in.q);
  check_presence(check, grads.d_initial_state, "d_initial_state", in.initial_state, "initial_state");
  check_state(check, grads.d_initial_state, "d_initial_state", problem, in.q.device);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::gla_backward(problem, in, d_o, d_final_state, grads, impl);
}

}  // namespace seqmix
