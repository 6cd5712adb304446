// Validation and dispatch of the gated scan.
#include "seqmix/gated_scan.hpp"

#include "core/check.hpp"
#include "cpu/gated_scan.hpp"
#include "seqmix/error.hpp"

#include "cuda/gated_scan/params.hpp"  // plain C++: the tile length, also without CUDA

#ifdef SEQMIX_CUDA_GATED_SCAN
#include "cuda/common/device.hpp"
#endif

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
  if (in.cu_seqlens && device.is_cuda()) check.same_device(*in.cu_seqlens, "cu_seqlens", device, "b");
  auto sequences = core::make_sequences(check, B, T, in.cu_seqlens, options.stream);
  const int64_t N = static_cast<int64_t>(sequences.size());
  if (in.initial_state) {
    check.view(*in.initial_state, "initial_state", 2, "[N, D]", device);
    check.shape(*in.initial_state, "initial_state", {N, D}, "[N, D]");
    check.dtype_in(*in.initial_state, "initial_state", {DType::f32, DType::f64});
  }
  return {B, T, D, std::move(sequences), options.decay};
}

void check_state_out(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                     const cpu::GatedScanProblem& p, const Device& device) {
  if (!t) return;
  check.view(*t, arg, 2, "[N, D]", device);
  check.shape(*t, arg, {static_cast<int64_t>(p.sequences.size()), p.D}, "[N, D]");
  check.dtype_in(*t, arg, device.is_cuda() ? std::initializer_list<DType>{DType::f32}
                                           : std::initializer_list<DType>{DType::f32, DType::f64});
}

void check_like_b(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                  const GatedScanInputs& in) {
  if (!t) return;
  check.view(*t, arg, 3, kLayout, in.b.device);
  check.shape(*t, arg, in.b.shape, kLayout);
  check.same_dtype(*t, arg, in.b.dtype, "b");
}

#ifdef SEQMIX_CUDA_GATED_SCAN
cuda::BtdView btd(const std::optional<Tensor>& t) {
  if (!t) return {};
  return {t->data, t->strides[0], t->strides[1]};
}

cuda::StateView state(const std::optional<Tensor>& t) {
  if (!t) return {};
  return {static_cast<float*>(t->data), t->strides[0]};
}

// Pointers and row strides allow 16-byte vectors (and D fills whole vectors).
bool vector_aligned(std::initializer_list<std::optional<Tensor>> tensors) {
  for (const auto& t : tensors) {
    if (!t) continue;
    const int64_t vec = 16 / dtype_size(t->dtype);
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0 || t->shape[2] % vec != 0 || t->strides[0] % vec != 0 ||
        t->strides[1] % vec != 0)
      return false;
  }
  return true;
}

cuda::GatedScanParams cuda_params(const core::Checker& check, const GatedScanInputs& in,
                                  const cpu::GatedScanProblem& p, const GatedScanOptions& options) {
  if (in.initial_state) check.dtype_in(*in.initial_state, "initial_state", {DType::f32});
  if (in.b.dtype == DType::f64) check.fail("b", "dtype bf16, f16 or f32 on a CUDA device", "f64");
  if (p.sequences.size() > 65535)
    check.fail("cu_seqlens", "at most 65535 sequences on a CUDA device", std::to_string(p.sequences.size()));
  cuda::GatedScanParams params;
  int64_t max_length = 0;
  for (const auto& s : p.sequences) max_length = std::max(max_length, s.length);
  params.seq = {static_cast<int64_t>(p.sequences.size()), in.cu_seqlens ? max_length : p.T,
                in.cu_seqlens ? in.cu_seqlens->data : nullptr, in.cu_seqlens && in.cu_seqlens->dtype == DType::i64};
  params.D = p.D;
  params.tensor_batches = p.B;
  params.tensor_rows = p.T;
  params.tile_rows = cuda::tile_state_rows(p.B * p.T, params.seq.num_sequences);
  params.decay = static_cast<int>(p.decay);
  params.a = btd(in.a);
  params.b = btd(in.b);
  params.z = btd(in.z);
  params.initial_state = state(in.initial_state);
  params.stream = options.stream;
  return params;
}

// The workspace's data pointer after checking it (nullptr when absent and optional).
float* checked_workspace(const core::Checker& check, const std::optional<Tensor>& workspace,
                         const cpu::GatedScanProblem& p, const cuda::GatedScanParams& params, const Device& device,
                         bool required) {
  const int64_t needed = gated_scan_workspace_size(p.B, p.T, params.seq.num_sequences, params.D);
  if (!workspace) {
    if (required) check.fail("workspace", "an f32 tensor of " + std::to_string(needed) + " elements", "none");
    return nullptr;
  }
  check.view(*workspace, "workspace", 1, "[elements]", device);
  check.dtype_in(*workspace, "workspace", {DType::f32});
  if (workspace->shape[0] < needed)
    check.fail("workspace", "at least " + std::to_string(needed) + " elements", std::to_string(workspace->shape[0]));
  return static_cast<float*>(workspace->data);
}

// The tile_states' data pointer after checking it (nullptr when absent).
float* checked_tile_states(const core::Checker& check, const std::optional<Tensor>& states,
                           const cpu::GatedScanProblem& p, const cuda::GatedScanParams& params, const Device& device) {
  if (!states) return nullptr;
  const auto shape = gated_scan_tile_states_shape(p.B, p.T, params.seq.num_sequences, params.D);
  check.view(*states, "tile_states", 2, "[rows, D]", device);
  check.shape(*states, "tile_states", shape, "[rows, D]");
  check.dtype_in(*states, "tile_states", {DType::f32});
  if (!states->is_contiguous()) check.fail("tile_states", "a contiguous tensor", "strides " + shape_str(states->strides));
  return static_cast<float*>(states->data);
}

template <class Launch>
void launch_by_dtype(DType dtype, const Launch& launch) {
  switch (dtype) {
    case DType::bf16: launch(std::integral_constant<cuda::ScanDtype, cuda::ScanDtype::bf16>{}); break;
    case DType::f16: launch(std::integral_constant<cuda::ScanDtype, cuda::ScanDtype::f16>{}); break;
    default: launch(std::integral_constant<cuda::ScanDtype, cuda::ScanDtype::f32>{}); break;
  }
}
#endif

#ifndef SEQMIX_CUDA_GATED_SCAN
[[noreturn]] void no_cuda(const core::Checker& check, const Tensor& b) {
  check.fail("b", "a CPU tensor (this build has no CUDA kernels for the gated scan; see SEQMIX_CUDA_KERNELS)",
             b.device.str());
}
#endif

}  // namespace

Decay parse_decay(const std::string& name) {
  if (name == "direct") return Decay::direct;
  if (name == "log") return Decay::log;
  if (name == "logit") return Decay::logit;
  throw Error("seqmix.gated_scan: argument 'decay': expected one of direct, log, logit, got '" + name + "'");
}

int64_t gated_scan_workspace_size(int64_t B, int64_t T, int64_t N, int64_t D) {
  return std::max<int64_t>(1, cuda::gated_scan_workspace_floats(B * T, T, N, D));
}

std::vector<int64_t> gated_scan_tile_states_shape(int64_t B, int64_t T, int64_t N, int64_t D) {
  return {cuda::tile_state_rows(B * T, N), D};
}

void gated_scan_forward(const GatedScanInputs& in, const GatedScanOutputs& out,
                        const GatedScanOptions& options) {
  const core::Checker check("seqmix.gated_scan");
  const auto problem = check_inputs(check, in, options);
  check_like_b(check, out.y, "y", in);
  check_state_out(check, out.final_state, "final_state", problem, in.b.device);
  if (in.b.device.is_cuda()) {
#ifdef SEQMIX_CUDA_GATED_SCAN
    if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
    auto params = cuda_params(check, in, problem, options);
    params.y = btd(out.y);
    params.final_state = state(out.final_state);
    params.workspace = checked_workspace(check, out.workspace, problem, params, in.b.device, false);
    params.tile_states = checked_tile_states(check, out.tile_states, problem, params, in.b.device);
    params.vector_aligned = vector_aligned({in.a, in.b, in.z, out.y});
    const cuda::DeviceGuard guard(in.b.device.index);
    launch_by_dtype(in.b.dtype, [&](auto dtype) { cuda::gated_scan_forward<decltype(dtype)::value>(params); });
    return;
#else
    no_cuda(check, in.b);
#endif
  }
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
  if (in.b.device.is_cuda()) {
#ifdef SEQMIX_CUDA_GATED_SCAN
    if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
    auto params = cuda_params(check, in, problem, options);
    params.dy = btd(dy);
    params.d_final_state = state(d_final_state);
    params.da = btd(grads.da);
    params.db = btd(grads.db);
    params.dz = btd(grads.dz);
    params.d_initial_state = state(grads.d_initial_state);
    params.workspace = checked_workspace(check, grads.workspace, problem, params, in.b.device, true);
    params.tile_states = checked_tile_states(check, grads.tile_states, problem, params, in.b.device);
    params.vector_aligned = vector_aligned({in.a, in.b, in.z, dy, grads.da, grads.db, grads.dz});
    const cuda::DeviceGuard guard(in.b.device.index);
    launch_by_dtype(in.b.dtype, [&](auto dtype) { cuda::gated_scan_backward<decltype(dtype)::value>(params); });
    return;
#else
    no_cuda(check, in.b);
#endif
  }
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.b);
  cpu::gated_scan_backward(problem, in, dy, d_final_state, grads, impl);
}

}  // namespace seqmix
