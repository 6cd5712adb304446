// Validation and dispatch of the dense linear recurrence.
#include "seqmix/linear_recurrence.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/check.hpp"
#include "cpu/linear_recurrence.hpp"
#include "seqmix/error.hpp"

#include "cuda/linear_recurrence/params.hpp"  // plain C++: the method rule and workspace sizes

#ifdef SEQMIX_CUDA_LINEAR_RECURRENCE
#include "cuda/common/device.hpp"
#endif

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

// The element type the kernels read: bf16 as itself, f32 (the only other CUDA dtype) as f32.
cuda::RecurrenceDtype recurrence_dtype(DType dtype) {
  return dtype == DType::bf16 ? cuda::RecurrenceDtype::bf16 : cuda::RecurrenceDtype::f32;
}

cuda::RecurrenceMethod cuda_method(LinearRecurrenceMethod method, int64_t G, int64_t T, int64_t n, int64_t m,
                                   DType dtype) {
  switch (method) {
    case LinearRecurrenceMethod::sequential: return cuda::RecurrenceMethod::sequential;
    case LinearRecurrenceMethod::chunked: return cuda::RecurrenceMethod::chunked;
    case LinearRecurrenceMethod::scan: return cuda::RecurrenceMethod::scan;
    case LinearRecurrenceMethod::cyclic_reduction: return cuda::RecurrenceMethod::cyclic_reduction;
    case LinearRecurrenceMethod::automatic: break;
  }
  return cuda::choose_cuda_method(G, T, n, m, recurrence_dtype(dtype));
}

#ifdef SEQMIX_CUDA_LINEAR_RECURRENCE
// What the kernels take beyond the general checks: bf16 or f32, n a multiple of 8 up to
// 128 (rows are copied in 16-byte pieces), contiguous tensors, a grid within limits.
cuda::LinearRecurrenceParams cuda_params(const core::Checker& check, const LinearRecurrenceInputs& in,
                                         const cpu::LinearRecurrenceProblem& p, const LinearRecurrenceOptions& o,
                                         std::initializer_list<std::pair<const char*, std::optional<Tensor>>> tensors) {
  if (o.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
  check.dtype_in(in.A, "A", {DType::bf16, DType::f32});
  if (p.n % cuda::kRecurrenceStateGranule != 0 || p.n > cuda::kMaxRecurrenceState)
    check.fail("A", "a state size n that is a multiple of 8 and at most 128 on a CUDA device",
               "n = " + std::to_string(p.n));
  if (p.G > 65535) check.fail("A", "at most 65535 groups G on a CUDA device", "G = " + std::to_string(p.G));
  for (const auto& [arg, t] : tensors)
    if (t && !t->is_contiguous())
      check.fail(arg, "a contiguous tensor on a CUDA device", "strides " + shape_str(t->strides));
  if (reinterpret_cast<uintptr_t>(in.A.data) % 16 != 0)  // transitions are copied in 16-byte pieces
    check.fail("A", "a data pointer aligned to 16 bytes on a CUDA device", "an unaligned pointer");
  cuda::LinearRecurrenceParams params;
  params.G = p.G, params.T = p.T, params.n = p.n, params.m = p.m;
  params.method = cuda_method(o.method, p.G, p.T, p.n, p.m, in.A.dtype);
  params.chunk_size = o.chunk_size;
  params.A = in.A.data;
  params.b = in.b.data;
  params.initial_state = in.initial_state ? in.initial_state->data : nullptr;
  params.stream = o.stream;
  return params;
}

float* checked_workspace(const core::Checker& check, const std::optional<Tensor>& workspace,
                         const cuda::LinearRecurrenceParams& params, cuda::RecurrenceDtype dtype, bool backward,
                         const Device& device) {
  if (!workspace) return nullptr;
  const int64_t needed = cuda::linear_recurrence_workspace_floats(params.G, params.T, params.n, params.m, dtype,
                                                                  params.method, params.chunk_size, backward);
  check.view(*workspace, "workspace", 1, "[elements]", device);
  check.dtype_in(*workspace, "workspace", {DType::f32});
  if (workspace->shape[0] < needed)
    check.fail("workspace", "at least " + std::to_string(needed) + " elements", std::to_string(workspace->shape[0]));
  return static_cast<float*>(workspace->data);
}

template <class Launch>
void launch_by_dtype(DType dtype, const Launch& launch) {
  if (dtype == DType::bf16) launch(std::integral_constant<cuda::RecurrenceDtype, cuda::RecurrenceDtype::bf16>{});
  else launch(std::integral_constant<cuda::RecurrenceDtype, cuda::RecurrenceDtype::f32>{});
}
#endif

}  // namespace

LinearRecurrenceMethod linear_recurrence_cuda_method(int64_t G, int64_t T, int64_t n, int64_t m, DType dtype) {
  switch (cuda::choose_cuda_method(G, T, n, m, recurrence_dtype(dtype))) {
    case cuda::RecurrenceMethod::sequential: return LinearRecurrenceMethod::sequential;
    case cuda::RecurrenceMethod::chunked: return LinearRecurrenceMethod::chunked;
    case cuda::RecurrenceMethod::scan: return LinearRecurrenceMethod::scan;
    case cuda::RecurrenceMethod::cyclic_reduction: return LinearRecurrenceMethod::cyclic_reduction;
  }
  return LinearRecurrenceMethod::sequential;
}

int64_t linear_recurrence_workspace_size(int64_t G, int64_t T, int64_t n, int64_t m, DType dtype, bool backward,
                                         const LinearRecurrenceOptions& options) {
  const auto method = cuda_method(options.method, G, T, n, m, dtype);
  return std::max<int64_t>(1, cuda::linear_recurrence_workspace_floats(G, T, n, m, recurrence_dtype(dtype), method,
                                                                       options.chunk_size, backward));
}

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
  if (in.A.device.is_cuda()) {
#ifdef SEQMIX_CUDA_LINEAR_RECURRENCE
    auto params = cuda_params(check, in, p, options,
                              {{"A", in.A}, {"b", in.b}, {"initial_state", in.initial_state}, {"h", out.h},
                               {"final_state", out.final_state}});
    params.h = out.h.data;
    params.final_state = out.final_state ? out.final_state->data : nullptr;
    params.workspace = checked_workspace(check, out.workspace, params, recurrence_dtype(in.A.dtype), false, in.A.device);
    const cuda::DeviceGuard guard(in.A.device.index);
    launch_by_dtype(in.A.dtype, [&](auto dtype) { cuda::linear_recurrence_forward<decltype(dtype)::value>(params); });
    return;
#endif
    // Without the kernels in this build, resolve_cpu_impl refuses CUDA tensors.
  }
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.A);
  cpu::linear_recurrence_forward(p, in, out, impl);
}

void linear_recurrence_backward(const LinearRecurrenceInputs& in, const Tensor& dh,
                                const std::optional<Tensor>& d_final_state, const LinearRecurrenceGrads& grads,
                                const LinearRecurrenceOptions& options, const std::optional<Tensor>& states) {
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
  check_like(check, states, "states", {p.G, p.T, p.n, p.m}, kSteps, in);
  if (in.A.device.is_cuda()) {
#ifdef SEQMIX_CUDA_LINEAR_RECURRENCE
    auto params = cuda_params(check, in, p, options,
                              {{"A", in.A}, {"b", in.b}, {"initial_state", in.initial_state}, {"dh", dh},
                               {"d_final_state", d_final_state}, {"dA", grads.dA}, {"db", grads.db},
                               {"d_initial_state", grads.d_initial_state}, {"states", states}});
    params.dh = dh.data;
    params.states = states ? states->data : nullptr;
    params.d_final_state = d_final_state ? d_final_state->data : nullptr;
    params.dA = grads.dA.data;
    params.db = grads.db.data;
    params.d_initial_state = grads.d_initial_state ? grads.d_initial_state->data : nullptr;
    params.workspace = checked_workspace(check, grads.workspace, params, recurrence_dtype(in.A.dtype), true, in.A.device);
    const cuda::DeviceGuard guard(in.A.device.index);
    launch_by_dtype(in.A.dtype, [&](auto dtype) { cuda::linear_recurrence_backward<decltype(dtype)::value>(params); });
    return;
#endif
    // Without the kernels in this build, resolve_cpu_impl refuses CUDA tensors.
  }
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.A);
  cpu::linear_recurrence_backward(p, in, dh, d_final_state, grads, impl);
}

}  // namespace seqmix
