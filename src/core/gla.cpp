// Validation and dispatch of gated linear attention.
#include "seqmix/gla.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "cpu/gla.hpp"
#include "cuda/gla/params.hpp"  // plain C++: which head dimensions the kernels cover

#ifdef SEQMIX_CUDA_GLA
#include "cuda/common/device.hpp"
#endif

namespace seqmix {
namespace {

constexpr const char* kKeyLayout = "[B, T, H, K]";
constexpr const char* kValueLayout = "[B, T, H, V]";
constexpr const char* kStateLayout = "[N, H, K, V]";
constexpr const char* kChunkStatesLayout = "[N, H, C, K, V]";
constexpr const char* kChunkScoresLayout = "[N, H, C, 64, 64]";
// C of the chunk-state table: the chunks of the longest sequence.
int64_t max_chunks(const cpu::GlaProblem& p) {
  int64_t chunks = 0;
  for (const auto& sequence : p.sequences)
    chunks = std::max(chunks, (sequence.length + cuda::kGlaChunk - 1) / cuda::kGlaChunk);
  return chunks;
}

std::vector<int64_t> chunk_states_shape(const cpu::GlaProblem& p) {
  return {static_cast<int64_t>(p.sequences.size()), p.H, max_chunks(p), p.K, p.V};
}

std::vector<int64_t> chunk_scores_shape(const cpu::GlaProblem& p) {
  return {static_cast<int64_t>(p.sequences.size()), p.H, max_chunks(p), cuda::kGlaChunk, cuda::kGlaChunk};
}

// A per-chunk table (GlaOutputs::chunk_states or chunk_scores), when given: CUDA inputs only,
// the table's shape, q's dtype, contiguous.
void check_chunk_table(const core::Checker& check, const std::optional<Tensor>& t, const char* arg,
                       const std::vector<int64_t>& shape, const char* layout, const Tensor& q) {
  if (!t) return;
  if (!q.device.is_cuda())
    check.fail(arg, "none with CPU inputs (only the CUDA kernels keep chunk tables)", "a tensor");
  check.view(*t, arg, 5, layout, q.device);
  check.shape(*t, arg, shape, layout);
  check.same_dtype(*t, arg, q.dtype, "q");
  if (!t->is_contiguous()) check.fail(arg, "a contiguous tensor", "strides " + shape_str(t->strides));
}

// Both chunk tables of one direction: the scores only beside the states, and only for one key
// block (K <= 128: K = 256's two blocks would each need their own share of A).
void check_chunk_tables(const core::Checker& check, const std::optional<Tensor>& states,
                        const std::optional<Tensor>& scores, const cpu::GlaProblem& p, const Tensor& q) {
  check_chunk_table(check, states, "chunk_states", chunk_states_shape(p), kChunkStatesLayout, q);
  if (!scores) return;
  if (!states) check.fail("chunk_scores", "none (chunk_states is not given)", "a tensor");
  if (p.K > 128) check.fail("chunk_scores", "none with K = " + std::to_string(p.K) + " (only K <= 128 saves them)",
                            "a tensor");
  check_chunk_table(check, scores, "chunk_scores", chunk_scores_shape(p), kChunkScoresLayout, q);
}

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
  if (in.cu_seqlens && q.device.is_cuda()) check.same_device(*in.cu_seqlens, "cu_seqlens", q.device, "q");
  cpu::GlaProblem problem{B, T, H, K, V, core::make_sequences(check, B, T, in.cu_seqlens, options.stream),
                          options.scale};
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

#ifdef SEQMIX_CUDA_GLA
// A [B, T, H, D] operand the kernels can read with 16-byte vectors: contiguous last
// dimension, 16-byte aligned data and strides.
cuda::GlaTokens tokens(const core::Checker& check, const Tensor& t, const char* arg) {
  const bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.strides[0] % 8 == 0 &&
                       t.strides[1] % 8 == 0 && t.strides[2] % 8 == 0;
  if (!aligned)
    check.fail(arg, "16-byte aligned data and strides (multiples of 8 elements) on a CUDA device",
               "strides " + shape_str(t.strides));
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
}

// An [N, H, K, V] float32 state, contiguous, or nullptr.
template <class Pointer>
Pointer cuda_state(const core::Checker& check, const std::optional<Tensor>& t, const char* arg) {
  if (!t) return nullptr;
  check.dtype_in(*t, arg, {DType::f32});
  if (!t->is_contiguous()) check.fail(arg, "a contiguous tensor on a CUDA device", "strides " + shape_str(t->strides));
  return static_cast<Pointer>(t->data);
}

// What both directions need: the checks of the CUDA path and the inputs' description.
cuda::GlaParams cuda_params(const core::Checker& check, const cpu::GlaProblem& p, const GlaInputs& in,
                            const GlaOptions& options) {
  if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
  if (in.q.dtype != DType::bf16 && in.q.dtype != DType::f16)
    check.fail("q", "dtype bf16 or f16 on a CUDA device", dtype_name(in.q.dtype));
  if (!cuda::gla_cuda_supports(p.K, p.V))
    check.fail("q", "K in {64, 128, 256} and V a multiple of 64 on a CUDA device",
               "K = " + std::to_string(p.K) + ", V = " + std::to_string(p.V));
  if (p.sequences.size() > 65535 || p.H > 65535)
    check.fail("q", "at most 65535 sequences and heads on a CUDA device",
               std::to_string(p.sequences.size()) + " sequences, " + std::to_string(p.H) + " heads");
  cuda::GlaParams params;
  params.num_sequences = static_cast<int64_t>(p.sequences.size());
  params.T = p.T;
  params.max_chunks = max_chunks(p);
  params.cu_seqlens = in.cu_seqlens ? in.cu_seqlens->data : nullptr;
  params.cu_seqlens_int64 = in.cu_seqlens && in.cu_seqlens->dtype == DType::i64;
  params.H = p.H, params.K = p.K, params.V = p.V;
  params.scale = static_cast<float>(p.scale);
  params.q = tokens(check, in.q, "q");
  params.k = tokens(check, in.k, "k");
  params.v = tokens(check, in.v, "v");
  params.g = tokens(check, in.g, "g");
  params.initial_state = cuda_state<const float*>(check, in.initial_state, "initial_state");
  params.stream = options.stream;
  return params;
}

void cuda_forward(const core::Checker& check, const cpu::GlaProblem& p, const GlaInputs& in, const GlaOutputs& out,
                  const GlaOptions& options) {
  cuda::GlaParams params = cuda_params(check, p, in, options);
  params.o = tokens(check, out.o, "o");
  params.final_state = cuda_state<float*>(check, out.final_state, "final_state");
  params.saved_chunk_states = out.chunk_states ? out.chunk_states->data : nullptr;
  params.saved_chunk_scores = out.chunk_scores ? out.chunk_scores->data : nullptr;
  const cuda::DeviceGuard guard(in.q.device.index);
  if (in.q.dtype == DType::bf16) cuda::gla_forward<cuda::GlaDtype::bf16>(params);
  else cuda::gla_forward<cuda::GlaDtype::f16>(params);
}

void cuda_backward(const core::Checker& check, const cpu::GlaProblem& p, const GlaInputs& in, const Tensor& d_o,
                   const std::optional<Tensor>& d_final_state, const GlaGrads& grads, const GlaOptions& options) {
  cuda::GlaParams params = cuda_params(check, p, in, options);
  params.d_o = tokens(check, d_o, "do");
  params.dq = tokens(check, grads.dq, "dq");
  params.dk = tokens(check, grads.dk, "dk");
  params.dv = tokens(check, grads.dv, "dv");
  params.dg = tokens(check, grads.dg, "dg");
  params.d_final_state = cuda_state<const float*>(check, d_final_state, "d_final_state");
  params.d_initial_state = cuda_state<float*>(check, grads.d_initial_state, "d_initial_state");
  params.saved_chunk_states = in.chunk_states ? in.chunk_states->data : nullptr;
  params.saved_chunk_scores = in.chunk_scores ? in.chunk_scores->data : nullptr;
  const cuda::DeviceGuard guard(in.q.device.index);
  if (in.q.dtype == DType::bf16) cuda::gla_backward<cuda::GlaDtype::bf16>(params);
  else cuda::gla_backward<cuda::GlaDtype::f16>(params);
}
#else
[[noreturn]] void no_cuda(const core::Checker& check, const Tensor& q) {
  check.fail("q", "a CPU tensor (this build has no CUDA kernels for gla; see SEQMIX_CUDA_KERNELS)", q.device.str());
}
#endif

}  // namespace

void gla_forward(const GlaInputs& in, const GlaOutputs& out, const GlaOptions& options) {
  const core::Checker check("seqmix.chunk_gla");
  const auto problem = check_inputs(check, in, options);
  check_like_v(check, out.o, "o", in);
  check_state(check, out.final_state, "final_state", problem, in.q.device);
  if (in.chunk_states) check.fail("chunk_states", "none in the forward's inputs (it is an output there)", "a tensor");
  if (in.chunk_scores) check.fail("chunk_scores", "none in the forward's inputs (it is an output there)", "a tensor");
  check_chunk_tables(check, out.chunk_states, out.chunk_scores, problem, in.q);
  if (in.q.device.is_cuda()) {
#ifdef SEQMIX_CUDA_GLA
    cuda_forward(check, problem, in, out, options);
    return;
#else
    no_cuda(check, in.q);
#endif
  }
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::gla_forward(problem, in, out, impl);
}

std::vector<int64_t> gla_chunk_states_shape(const GlaInputs& in, const GlaOptions& options) {
  const core::Checker check("seqmix.gla_chunk_states_shape");
  return chunk_states_shape(check_inputs(check, in, options));
}

std::vector<int64_t> gla_chunk_scores_shape(const GlaInputs& in, const GlaOptions& options) {
  const core::Checker check("seqmix.gla_chunk_scores_shape");
  return chunk_scores_shape(check_inputs(check, in, options));
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
  check_chunk_tables(check, in.chunk_states, in.chunk_scores, problem, in.q);
  if (in.q.device.is_cuda()) {
#ifdef SEQMIX_CUDA_GLA
    cuda_backward(check, problem, in, d_o, d_final_state, grads, options);
    return;
#else
    no_cuda(check, in.q);
#endif
  }
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::gla_backward(problem, in, d_o, d_final_state, grads, impl);
}

}  // namespace seqmix
