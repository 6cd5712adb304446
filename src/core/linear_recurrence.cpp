// Validation and dispatch of the dense linear recurrence.
#include "seqmix/linear_recurrence.hpp"

#include "core/check.hpp"
#include "cpu/linear_recurrence.hpp"
#include "seqmix/error.hpp"

namespace seqmix {
namespace {

constexpr const char* kTransitions = "[G, T, n, n]";
constexpr const char* kSteps = "[G, T, n, m]";
constexpr const char* kState = "[G, n, m]";

cpu::LinearRecurrenceProblem check_inputs(const core::Checker& check, const LinearRecurrenceInputs& in,
                                          const LinearRecurrenceOptions& options) {
  const Device device = in.A.device;
  check.view(in.A, "A", 4, kTransitions, device);
  check.dtype_in(in.A, "A", {DType::bf16, DType::f16, DType::f32, DType::f64});
  const int64_t G = in.A.shape[0], T = in.A.shape[1], n = in.A.shape[2];
  if (in.A.shape[3] != n)
    check.fail("A", "square transitions " + std::string(kTransitions) + " (size 2 equal to size 3)",
               shape_str(in.A.shape));
  check.positive(G, "A", "groups G");
  check.positive(T, "A", "sequence length T");
  check.positive(n, "A", "state size n");

  check.view(in.b, "b", 4, kSteps, device);
  check.same_dtype(in.b, "b", in.A.dtype, "A");
  const int64_t m = in.b.shape[3];
  check.shape(in.b, "b", {G, T, n, m}, kSteps);
  check.positive(m, "b", "state columns m");

  if (in.initial_state) {
    check.view(*in.initial_state, "initial_state", 3, kState, device);
    check.shape(*in.initial_state, "initial_state", {G, n, m}, kState);
    check.same_dtype(*in.initial_state, "initial_state", in.A.dtype, "A");
  }
  if (options.chunk_size < 0)
    check.fail("chunk_size", "chunk_size >= 0 (0 picks one)", "chunk_size = " + std::to_string(options.chunk_size));
  return {G, T, n, m, options.method, options.chunk_size};
}

// An output or gradient shaped like b ([G, T, n, m]), like A, or like a state.
void check_like(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                const std::vector<int64_t>& shape, const char* layout, const LinearRecurrenceInputs& in) {
  if (!t) return;
  check.view(*t, arg, static_cast<int>(shape.size()), layout, in.A.device);
  check.shape(*t, arg, shape, layout);
  check.same_dtype(*t, arg, in.A.dtype, "A");
}

}  // namespace

const char* linear_recurrence_method_name(LinearRecurrenceMethod method) {
  switch (method) {
    case LinearRecurrenceMethod::automatic: return "automatic";
    case LinearRecurrenceMethod::sequential: return "sequential";
    case LinearRecurrenceMethod::chunked: return "chunked";
    case LinearRecurrenceMethod::scan: return "scan";
    case LinearRecurrenceMethod::cyclic_reduction: return "cyclic_reduction";
  }
  return "?";
}

LinearRecurrenceMethod parse_linear_recurrence_method(const std::string& name) {
  if (name == "auto") return LinearRecurrenceMethod::automatic;
  for (auto method : {LinearRecurrenceMethod::automatic, LinearRecurrenceMethod::sequential,
                      LinearRecurrenceMethod::chunked, LinearRecurrenceMethod::scan,
                      LinearRecurrenceMethod::cyclic_reduction})
    if (name == linear_recurrence_method_name(method)) return method;
  throw Error("seqmix.linear_recurrence: argument 'method': expected one of auto, sequential, chunked, scan, "
              "cyclic_reduction, got '" + name + "'");
}

void linear_recurrence_forward(const LinearRecurrenceInputs& in, const LinearRecurrenceOutputs& out,
                               const LinearRecurrenceOptions& options) {
  const core::Checker check("seqmix.linear_recurrence");
  const auto p = check_inputs(check, in, options);
  check_like(check, out.h, "h", {p.G, p.T, p.n, p.m}, kSteps, in);
  check_like(check, out.final_state, "final_state", {p.G, p.n, p.m}, kState, in);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.A);
  cpu::linear_recurrence_forward(p, in, out, impl);
}

void linear_recurrence_backward(const LinearRecurrenceInputs& in, const Tensor& dh,
                                const std::optional<Tensor>& d_final_state, const LinearRecurrenceGrads& grads,
                                const LinearRecurrenceOptions& options) {
  const core::Checker check("seqmix.linear_recurrence_backward");
  const auto p = check_inputs(check, in, options);
  check_like(check, dh, "dh", {p.G, p.T, p.n, p.m}, kSteps, in);
  check_like(check, d_final_state, "d_final_state", {p.G, p.n, p.m}, kState, in);
  check_like(check, grads.dA, "dA", {p.G, p.T, p.n, p.n}, kTransitions, in);
  check_like(check, grads.db, "db", {p.G, p.T, p.n, p.m}, kSteps, in);
  if (in.initial_state.has_value() != grads.d_initial_state.has_value())
    check.fail("d_initial_state", in.initial_state ? "a tensor (initial_state is given)" : "none (initial_state is not given)",
               grads.d_initial_state ? "a tensor" : "none");
  check_like(check, grads.d_initial_state, "d_initial_state", {p.G, p.n, p.m}, kState, in);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.A);
  cpu::linear_recurrence_backward(p, in, dh, d_final_state, grads, impl);
}

}  // namespace seqmix
