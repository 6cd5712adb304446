// Validation and dispatch of the gated scan.
#include "seqmix/gated_scan.hpp"

#include "core/check.hpp"
#include "cpu/gated_scan.hpp"

namespace seqmix {
namespace {

constexpr const char* kLayout = "[B, T, D]";

cpu::GatedScanProblem check_inputs(const core::Checker& check, const GatedScanInputs& in,
                                   const GatedScanOptions& options) {
  const Device device = in.b.device;
  check.view(in.b, "b", 3, kLayout, device);
  check.dtype_in(in.b, "b", {DType::bf16, DType::f16, DType::f32, DType::f64});
  const int64_t B = in.b.shape[0], T = in.b.shape[1], D = in.b.shape[2];
  check.positive(D, "b", "channels D");
  auto same_as_b = [&](const Tensor& t, const char* arg) {
    check.view(t, arg, 3, kLayout, device);
    check.shape(t, arg, in.b.shape, kLayout);
    check.same_dtype(t, arg, in.b.dtype, "b");
  };
  same_as_b(in.a, "a");
  if (in.z) same_as_b(*in.z, "z");
  auto sequences = core::make_sequences(check, B, T, in.cu_seqlens);
  const int64_t N = static_cast<int64_t>(sequences.size());
  if (in.initial_state) {
    check.view(*in.initial_state, "initial_state", 2, "[N, D]", device);
    check.shape(*in.initial_state, "initial_state", {N, D}, "[N, D]");
    check.dtype_in(*in.initial_state, "initial_state", {DType::f32, DType::f64});
  }
  return {B, T, D, std::move(sequences), options.log_decay};
}

void check_state_out(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                     const cpu::GatedScanProblem& p, const Device& device) {
  if (!t) return;
  check.view(*t, arg, 2, "[N, D]", device);
  check.shape(*t, arg, {static_cast<int64_t>(p.sequences.size()), p.D}, "[N, D]");
  check.dtype_in(*t, arg, {DType::f32, DType::f64});
}

void check_like_b(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                  const GatedScanInputs& in) {
  if (!t) return;
  check.view(*t, arg, 3, kLayout, in.b.device);
  check.shape(*t, arg, in.b.shape, kLayout);
  check.same_dtype(*t, arg, in.b.dtype, "b");
}

}  // namespace

void gated_scan_forward(const GatedScanInputs& in, const GatedScanOutputs& out,
                        const GatedScanOptions& options) {
  const core::Checker check("seqmix.gated_scan");
  const auto problem = check_inputs(check, in, options);
  check_like_b(check, out.y, "y", in);
  check_state_out(check, out.final_state, "final_state", problem, in.b.device);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.b);
  cpu::gated_scan_forward(problem, in, out, impl);
}

void gated_scan_backward(const GatedScanInputs& in, const Tensor& dy,
                         const std::optional<Tensor>& d_final_state, const GatedScanGrads& grads,
                         const GatedScanOptions& options) {
  const core::Checker check("seqmix.gated_scan_backward");
  const auto problem = check_inputs(check, in, options);
  check_like_b(check, dy, "dy", in);
  check_state_out(check, d_final_state, "d_final_state", problem, in.b.device);
  check_like_b(check, grads.da, "da", in);
  check_like_b(check, grads.db, "db", in);
  if (in.z.has_value() != grads.dz.has_value())
    check.fail("dz", in.z ? "a tensor (z is given)" : "none (z is not given)", grads.dz ? "a tensor" : "none");
  check_like_b(check, grads.dz, "dz", in);
  if (in.initial_state.has_value() != grads.d_initial_state.has_value())
    check.fail("d_initial_state", in.initial_state ? "a tensor (initial_state is given)" : "none",
               grads.d_initial_state ? "a tensor" : "none");
  check_state_out(check, grads.d_initial_state, "d_initial_state", problem, in.b.device);
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.b);
  cpu::gated_scan_backward(problem, in, dy, d_final_state, grads, impl);
}

}  // namespace seqmix
