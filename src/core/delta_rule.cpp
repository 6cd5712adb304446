// Validation and dispatch of the gated delta rule.
#include "seqmix/delta_rule.hpp"

#include <cmath>
#include <string>

#include "core/check.hpp"
#include "cpu/delta_rule.hpp"

namespace seqmix {
namespace {

constexpr const char* kQK = "[B, T, H, K]";
constexpr const char* kV = "[B, T, H, V]";
constexpr const char* kGate = "[B, T, H]";
constexpr const char* kState = "[N, H, K, V]";

// A tensor of the inputs' dtype and device with exactly `shape`.
void check_like(const core::Checker& check, const Tensor& t, const char* arg, const std::vector<int64_t>& shape,
                const char* layout, const Tensor& q) {
  check.view(t, arg, static_cast<int>(shape.size()), layout, q.device);
  check.shape(t, arg, shape, layout);
  check.same_dtype(t, arg, q.dtype, "q");
}

// States are f32; f64 inputs may also carry f64 states (the oracle end to end).
void check_state(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                 const cpu::DeltaRuleProblem& p, const Tensor& q) {
  if (!t) return;
  check.view(*t, arg, 4, kState, q.device);
  check.shape(*t, arg, {static_cast<int64_t>(p.sequences.size()), p.H, p.K, p.V}, kState);
  if (q.dtype == DType::f64) check.dtype_in(*t, arg, {DType::f32, DType::f64});
  else check.dtype_in(*t, arg, {DType::f32});
}

cpu::DeltaRuleProblem check_inputs(const core::Checker& check, const DeltaRuleInputs& in,
                                   const DeltaRuleOptions& options) {
  const Tensor& q = in.q;
  check.view(q, "q", 4, kQK, q.device);
  check.dtype_in(q, "q", {DType::bf16, DType::f16, DType::f32, DType::f64});
  const int64_t B = q.shape[0], T = q.shape[1], H = q.shape[2], K = q.shape[3];
  check.positive(H, "q", "heads H");
  check.positive(K, "q", "key dimension K");
  check_like(check, in.k, "k", q.shape, kQK, q);
  check.view(in.v, "v", 4, kV, q.device);
  const int64_t V = in.v.shape[3];
  check.positive(V, "v", "value dimension V");
  check_like(check, in.v, "v", {B, T, H, V}, kV, q);
  check_like(check, in.g, "g", {B, T, H}, kGate, q);
  check_like(check, in.beta, "beta", {B, T, H}, kGate, q);
  if (!std::isfinite(options.scale)) check.fail("scale", "a finite number", std::to_string(options.scale));
  auto sequences = core::make_sequences(check, B, T, in.cu_seqlens);
  const double scale = options.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(K)) : options.scale;
  cpu::DeltaRuleProblem p{B, T, H, K, V, std::move(sequences), scale, options.use_qk_l2norm};
  check_state(check, in.initial_state, "initial_state", p, q);
  return p;
}

}  // namespace

void delta_rule_forward(const DeltaRuleInputs& in, const DeltaRuleOutputs& out, const DeltaRuleOptions& options) {
  const core::Checker check("seqmix.delta_rule");
  const auto p = check_inputs(check, in, options);
  check_like(check, out.o, "o", {p.B, p.T, p.H, p.V}, kV, in.q);
  check_state(check, out.final_state, "final_state", p, in.q);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::delta_rule_forward(p, in, out, impl);
}

void delta_rule_backward(const DeltaRuleInputs& in, const Tensor& d_o, const std::optional<Tensor>& d_final_state,
                         const DeltaRuleGrads& grads, const DeltaRuleOptions& options) {
  const core::Checker check("seqmix.delta_rule_backward");
  const auto p = check_inputs(check, in, options);
  check_like(check, d_o, "do", {p.B, p.T, p.H, p.V}, kV, in.q);
  check_state(check, d_final_state, "d_final_state", p, in.q);
  check_like(check, grads.dq, "dq", in.q.shape, kQK, in.q);
  check_like(check, grads.dk, "dk", in.q.shape, kQK, in.q);
  check_like(check, grads.dv, "dv", {p.B, p.T, p.H, p.V}, kV, in.q);
  check_like(check, grads.dg, "dg", {p.B, p.T, p.H}, kGate, in.q);
  check_like(check, grads.dbeta, "dbeta", {p.B, p.T, p.H}, kGate, in.q);
  if (in.initial_state.has_value() != grads.d_initial_state.has_value())
    check.fail("d_initial_state", in.initial_state ? "a tensor (initial_state is given)" : "none (initial_state is not given)",
               grads.d_initial_state ? "a tensor" : "none");
  check_state(check, grads.d_initial_state, "d_initial_state", p, in.q);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::delta_rule_backward(p, in, d_o, d_final_state, grads, impl);
}

}  // namespace seqmix
