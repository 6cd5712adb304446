// Validation and dispatch of attention: every argument is checked here, before the
// backend reads a byte, in both the padded and the variable-length form.
#include "seqmix/attention.hpp"

#include <cmath>
#include <string>

#include "core/check.hpp"
#include "cpu/attention.hpp"
#include "cuda/attention/params.hpp"  // plain C++: the supported head dims, also without CUDA

#if defined(SEQMIX_CUDA_ATTENTION) && defined(SEQMIX_HAS_CUTLASS)
#define SEQMIX_ATTENTION_KERNELS 1
#include "cuda/common/device.hpp"
#endif

namespace seqmix {
namespace {

// The layouts named in error messages, one set per form.
struct Layouts {
  int rank;
  const char *q, *k, *v, *out, *lse;
};
constexpr Layouts kPadded{4, "[B, Sq, Hq, D]", "[B, Sk, Hkv, D]", "[B, Sk, Hkv, Dv]", "[B, Sq, Hq, Dv]",
                          "[B, Hq, Sq]"};
constexpr Layouts kVarlen{3, "[total_q, Hq, D]", "[total_k, Hkv, D]", "[total_k, Hkv, Dv]", "[total_q, Hq, Dv]",
                          "[Hq, total_q]"};

std::string str(int64_t v) { return std::to_string(v); }

// The offsets of a cu_seqlens tensor, checked: rank 1, int32/int64 on the CPU (or, for
// CUDA inputs, contiguous on their device: then read through a host copy), at least one
// sequence, starting at 0, strictly increasing (no empty sequence), ending at `total`.
std::vector<int64_t> read_offsets(const core::Checker& check, const Tensor& cu, const char* arg, int64_t total,
                                  const char* total_name, const Device& device, void* stream) {
  check.rank(cu, arg, 1, "[N + 1]");
  check.dtype_in(cu, arg, {DType::i32, DType::i64});
  if (device.is_cuda()) {
    check.same_device(cu, arg, device, "q");
  } else if (!cu.device.is_cpu()) {
    check.fail(arg, "a CPU tensor (its values are read on the host)", cu.device.str());
  }
  if (cu.shape[0] < 2) check.fail(arg, "at least 2 offsets (one sequence)", str(cu.shape[0]));
  check.not_null(cu, arg);
  std::vector<int64_t> offsets(cu.shape[0]);
  std::vector<char> bytes;
  const char* base = static_cast<const char*>(cu.data);
  if (cu.device.is_cuda()) {
#ifdef SEQMIX_ATTENTION_KERNELS
    if (cu.strides[0] != 1) check.fail(arg, "a contiguous tensor", "stride " + str(cu.strides[0]));
    bytes.resize(static_cast<size_t>(cu.shape[0]) * dtype_size(cu.dtype));
    const cuda::DeviceGuard guard(cu.device.index);
    cuda::copy_to_host(bytes.data(), cu.data, bytes.size(), stream);
    base = bytes.data();
#else
    (void)stream;
#endif
  }
  const int64_t stride = cu.device.is_cuda() ? 1 : cu.strides[0];
  for (int64_t i = 0; i < cu.shape[0]; ++i) {
    const char* at = base + i * stride * dtype_size(cu.dtype);
    offsets[i] = cu.dtype == DType::i32 ? *reinterpret_cast<const int32_t*>(at) : *reinterpret_cast<const int64_t*>(at);
  }
  if (offsets[0] != 0) check.fail(arg, std::string(arg) + "[0] == 0", str(offsets[0]));
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] < offsets[i - 1])
      check.fail(arg, "non-decreasing offsets",
                 std::string(arg) + "[" + str(i) + "] = " + str(offsets[i]) + " < " + str(offsets[i - 1]));
    if (offsets[i] == offsets[i - 1]) check.fail(arg, "no empty sequence", "sequence " + str(i - 1) + " of length 0");
  }
  if (offsets.back() != total)
    check.fail(arg, std::string("last offset equal to ") + total_name + " = " + str(total), str(offsets.back()));
  return offsets;
}

// The sequences of the varlen form; also checks the max_seqlen bounds.
void varlen_sequences(const core::Checker& check, const AttentionInputs& in, cpu::AttentionProblem& p,
                      void* stream) {
  const auto cq = read_offsets(check, *in.cu_seqlens_q, "cu_seqlens_q", p.rows_q, "total_q", in.q.device, stream);
  const auto ck = read_offsets(check, *in.cu_seqlens_k, "cu_seqlens_k", p.rows_k, "total_k", in.q.device, stream);
  if (ck.size() != cq.size())
    check.fail("cu_seqlens_k", str(cq.size()) + " offsets (as many sequences as cu_seqlens_q)", str(ck.size()));
  int64_t longest_q = 0, longest_k = 0;
  for (size_t n = 0; n + 1 < cq.size(); ++n) {
    p.sequences.push_back({cq[n], cq[n + 1] - cq[n], ck[n], ck[n + 1] - ck[n], cq[n]});
    longest_q = std::max(longest_q, cq[n + 1] - cq[n]);
    longest_k = std::max(longest_k, ck[n + 1] - ck[n]);
  }
  if (in.max_seqlen_q < longest_q)
    check.fail("max_seqlen_q", ">= " + str(longest_q) + " (the longest query sequence)", str(in.max_seqlen_q));
  if (in.max_seqlen_k < longest_k)
    check.fail("max_seqlen_k", ">= " + str(longest_k) + " (the longest key sequence)", str(in.max_seqlen_k));
  p.lse_head_stride = p.rows_q;
}

void padded_sequences(const core::Checker& check, const AttentionInputs& in, cpu::AttentionProblem& p) {
  const int64_t B = in.q.shape[0], Sq = in.q.shape[1], Sk = in.k.shape[1];
  check.positive(B, "q", "batch size B");
  if (in.k.shape[0] != B) check.fail("k", "batch size " + str(B) + " (the batch size of q)", str(in.k.shape[0]));
  check.positive(Sq, "q", "sequence length Sq");
  check.positive(Sk, "k", "sequence length Sk");
  for (int64_t b = 0; b < B; ++b) p.sequences.push_back({b * Sq, Sq, b * Sk, Sk, b * p.Hq * Sq});
  p.rows_q = B * Sq;
  p.rows_k = B * Sk;
  p.lse_head_stride = Sq;
}

const Layouts& layouts(const AttentionInputs& in) { return in.cu_seqlens_q ? kVarlen : kPadded; }

cpu::AttentionProblem check_inputs(const core::Checker& check, const AttentionInputs& in,
                                   const AttentionOptions& options) {
  if (in.cu_seqlens_q.has_value() != in.cu_seqlens_k.has_value())
    check.fail(in.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q",
               "a tensor (variable length needs both cu_seqlens_q and cu_seqlens_k)", "none");
  const Layouts& L = layouts(in);
  const Device device = in.q.device;
  check.view(in.q, "q", L.rank, L.q, device);
  check.dtype_in(in.q, "q", {DType::bf16, DType::f16, DType::f32, DType::f64});
  check.view(in.k, "k", L.rank, L.k, device);
  check.same_dtype(in.k, "k", in.q.dtype, "q");
  check.view(in.v, "v", L.rank, L.v, device);
  check.same_dtype(in.v, "v", in.q.dtype, "q");

  cpu::AttentionProblem p{};
  p.Hq = in.q.size(-2);
  p.D = in.q.size(-1);
  p.Hkv = in.k.size(-2);
  p.Dv = in.v.size(-1);
  check.positive(p.Hq, "q", "query heads Hq");
  check.positive(p.D, "q", "head dim D");
  check.positive(p.Hkv, "k", "kv heads Hkv");
  check.positive(p.Dv, "v", "value head dim Dv");
  if (in.k.size(-1) != p.D) check.fail("k", "head dim " + str(p.D) + " (the head dim of q)", str(in.k.size(-1)));
  if (p.Hq % p.Hkv != 0)
    check.fail("k", "kv heads Hkv dividing the " + str(p.Hq) + " query heads (integral GQA ratio Hq / Hkv)",
               "Hkv = " + str(p.Hkv));
  std::vector<int64_t> v_shape = in.k.shape;
  v_shape.back() = p.Dv;
  check.shape(in.v, "v", v_shape, L.v);

  if (in.cu_seqlens_q) {
    p.rows_q = in.q.shape[0];
    p.rows_k = in.k.shape[0];
    check.positive(p.rows_q, "q", "total_q");
    check.positive(p.rows_k, "k", "total_k");
    varlen_sequences(check, in, p, options.stream);
  } else {
    padded_sequences(check, in, p);
  }
  if (!std::isfinite(options.scale)) check.fail("scale", "a finite softmax scale", std::to_string(options.scale));
  p.scale = options.scale == 0.0 ? 1.0 / std::sqrt(static_cast<double>(p.D)) : options.scale;
  p.causal = options.causal;
  return p;
}

// out-like tensors ([.., Hq, Dv] in q's dtype) and lse-like ones ([B, Hq, Sq] or [Hq, total_q], f32/f64).
void check_like_out(const core::Checker& check, const Tensor& t, const char* arg, const AttentionInputs& in,
                    const cpu::AttentionProblem& p) {
  const Layouts& L = layouts(in);
  check.view(t, arg, L.rank, L.out, in.q.device);
  std::vector<int64_t> shape = in.q.shape;
  shape.back() = p.Dv;
  check.shape(t, arg, shape, L.out);
  check.same_dtype(t, arg, in.q.dtype, "q");
}

void check_like_lse(const core::Checker& check, const Tensor& t, const char* arg, const AttentionInputs& in,
                    const cpu::AttentionProblem& p) {
  const Layouts& L = layouts(in);
  check.view(t, arg, L.rank - 1, L.lse, in.q.device);
  const std::vector<int64_t> shape = in.cu_seqlens_q ? std::vector<int64_t>{p.Hq, p.rows_q}
                                                     : std::vector<int64_t>{in.q.shape[0], p.Hq, in.q.shape[1]};
  check.shape(t, arg, shape, L.lse);
  check.dtype_in(t, arg, {DType::f32, DType::f64});
}

void check_like_input(const core::Checker& check, const Tensor& t, const char* arg, const Tensor& like,
                      const char* like_name, const char* layout) {
  check.view(t, arg, like.rank(), layout, like.device);
  check.shape(t, arg, like.shape, layout);
  check.same_dtype(t, arg, like.dtype, like_name);
}

#ifdef SEQMIX_ATTENTION_KERNELS
// [B, S, H, D] (or [total, H, D]) as the kernels' view.
cuda::AttentionView attention_view(const Tensor& t) {
  if (t.rank() == 4) return {t.data, t.strides[0], t.strides[1], t.strides[2]};
  return {t.data, 0, t.strides[0], t.strides[1]};
}

// The copy engine reads q, k, v in 16-byte units and the epilogue writes out in pairs.
void check_cuda_alignment(const core::Checker& check, const Tensor& t, const char* arg) {
  const int64_t vec = 16 / dtype_size(t.dtype);
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  for (int d = 0; d + 1 < t.rank(); ++d) aligned = aligned && t.strides[d] % vec == 0;
  if (!aligned)
    check.fail(arg, "a 16-byte aligned pointer and strides that are multiples of " + str(vec) +
                        " elements on a CUDA device", "strides " + shape_str(t.strides));
}

cuda::AttentionParams cuda_forward_params(const core::Checker& check, const AttentionInputs& in,
                                          const AttentionOutputs& out, const cpu::AttentionProblem& p,
                                          const AttentionOptions& options) {
  if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
  if (in.q.dtype != DType::bf16 && in.q.dtype != DType::f16)
    check.fail("q", std::string("a CPU tensor (this op has no CUDA kernel for dtype ") + dtype_name(in.q.dtype) +
                        "; CUDA takes bf16 and f16)", in.q.device.str());
  if (!cuda::attention_head_dim_supported(p.D) || p.Dv != p.D)
    check.fail("q", "a CPU tensor (this op has no CUDA kernel for head dims D = " + str(p.D) + ", Dv = " +
                        str(p.Dv) + "; CUDA takes D = Dv in {64, 128, 256})", in.q.device.str());
  if (out.lse.dtype != DType::f32) check.fail("lse", "dtype f32 on a CUDA device", dtype_name(out.lse.dtype));
  check_cuda_alignment(check, in.q, "q");
  check_cuda_alignment(check, in.k, "k");
  check_cuda_alignment(check, in.v, "v");
  check_cuda_alignment(check, out.out, "out");
  constexpr int64_t kMaxRows = int64_t{1} << 30;
  if (p.rows_q >= kMaxRows || p.rows_k >= kMaxRows)
    check.fail("q", "fewer than 2^30 rows per batch entry on a CUDA device", str(std::max(p.rows_q, p.rows_k)));
  if (p.sequences.size() > 65535)
    check.fail("cu_seqlens_q", "at most 65535 sequences on a CUDA device", str(p.sequences.size()));
  if (p.Hq > 65535) check.fail("q", "at most 65535 query heads on a CUDA device", str(p.Hq));

  cuda::AttentionParams params;
  params.q = attention_view(in.q);
  params.k = attention_view(in.k);
  params.v = attention_view(in.v);
  params.out = attention_view(out.out);
  params.lse = static_cast<float*>(out.lse.data);
  const bool varlen = in.cu_seqlens_q.has_value();
  if (varlen) {
    params.lse_stride_head = out.lse.strides[0];
    params.lse_stride_row = out.lse.strides[1];
    params.rows_q = p.rows_q;
    params.rows_k = p.rows_k;
    params.max_seqlen_q = in.max_seqlen_q;
    params.max_seqlen_k = in.max_seqlen_k;
    params.cu_seqlens_q = in.cu_seqlens_q->data;
    params.cu_seqlens_k = in.cu_seqlens_k->data;
    params.cu_seqlens_q_int64 = in.cu_seqlens_q->dtype == DType::i64;
    params.cu_seqlens_k_int64 = in.cu_seqlens_k->dtype == DType::i64;
  } else {
    params.lse_stride_batch = out.lse.strides[0];
    params.lse_stride_head = out.lse.strides[1];
    params.lse_stride_row = out.lse.strides[2];
    params.rows_q = params.max_seqlen_q = in.q.shape[1];
    params.rows_k = params.max_seqlen_k = in.k.shape[1];
  }
  params.num_sequences = static_cast<int64_t>(p.sequences.size());
  params.Hq = p.Hq;
  params.Hkv = p.Hkv;
  params.D = p.D;
  params.scale = static_cast<float>(p.scale);
  params.causal = p.causal;
  params.stream = options.stream;
  return params;
}

// The forward's params plus the gradients' views; the backward kernels take D ∈ {64, 128, 256},
// deterministic or not.
cuda::AttentionBackwardParams cuda_backward_params(const core::Checker& check, const AttentionInputs& in,
                                                   const AttentionOutputs& forward, const Tensor& dout,
                                                   const std::optional<Tensor>& d_lse, const AttentionGrads& grads,
                                                   const cpu::AttentionProblem& p, const AttentionOptions& options) {
  cuda::AttentionBackwardParams bp;
  bp.fwd = cuda_forward_params(check, in, forward, p, options);
  if (!cuda::attention_backward_head_dim_supported(p.D))
    check.fail("q", "a CPU tensor (this op has no CUDA kernel for the attention backward with head dim " + str(p.D) +
                        "; CUDA takes D = Dv in {64, 128, 256})", in.q.device.str());
  check_cuda_alignment(check, dout, "dout");
  check_cuda_alignment(check, grads.dq, "dq");
  check_cuda_alignment(check, grads.dk, "dk");
  check_cuda_alignment(check, grads.dv, "dv");
  bp.dout = attention_view(dout);
  bp.dq = attention_view(grads.dq);
  bp.dk = attention_view(grads.dk);
  bp.dv = attention_view(grads.dv);
  bp.deterministic = options.deterministic;
  if (d_lse) {
    if (d_lse->dtype != DType::f32) check.fail("d_lse", "dtype f32 on a CUDA device", dtype_name(d_lse->dtype));
    bp.d_lse = static_cast<const float*>(d_lse->data);
    if (in.cu_seqlens_q) {
      bp.d_lse_stride_head = d_lse->strides[0];
      bp.d_lse_stride_row = d_lse->strides[1];
    } else {
      bp.d_lse_stride_batch = d_lse->strides[0];
      bp.d_lse_stride_head = d_lse->strides[1];
      bp.d_lse_stride_row = d_lse->strides[2];
    }
  }
  return bp;
}

template <cuda::AttentionDtype dtype>
void launch_backward_by_head_dim(const cuda::AttentionBackwardParams& params) {
  switch (params.fwd.D) {
    case 64: cuda::attention_backward<dtype, 64>(params); break;
    case 128: cuda::attention_backward<dtype, 128>(params); break;
    default: cuda::attention_backward<dtype, 256>(params); break;
  }
}

template <cuda::AttentionDtype dtype>
void launch_forward_by_head_dim(const cuda::AttentionParams& params) {
  switch (params.D) {
    case 64: cuda::attention_forward<dtype, 64>(params); break;
    case 128: cuda::attention_forward<dtype, 128>(params); break;
    default: cuda::attention_forward<dtype, 256>(params); break;
  }
}
#endif

}  // namespace

void attention_forward(const AttentionInputs& in, const AttentionOutputs& out, const AttentionOptions& options) {
  const core::Checker check("seqmix.attention");
  const auto problem = check_inputs(check, in, options);
  check_like_out(check, out.out, "out", in, problem);
  check_like_lse(check, out.lse, "lse", in, problem);
#ifdef SEQMIX_ATTENTION_KERNELS
  if (in.q.device.is_cuda()) {
    const auto params = cuda_forward_params(check, in, out, problem, options);
    const cuda::DeviceGuard guard(in.q.device.index);
    if (in.q.dtype == DType::bf16)
      launch_forward_by_head_dim<cuda::AttentionDtype::bf16>(params);
    else
      launch_forward_by_head_dim<cuda::AttentionDtype::f16>(params);
    return;
  }
#endif
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::attention_forward(problem, in, out, impl);
}

void attention_backward(const AttentionInputs& in, const AttentionOutputs& forward, const Tensor& dout,
                        const std::optional<Tensor>& d_lse, const AttentionGrads& grads,
                        const AttentionOptions& options) {
  const core::Checker check("seqmix.attention_backward");
  const auto problem = check_inputs(check, in, options);
  check_like_out(check, forward.out, "out", in, problem);
  check_like_lse(check, forward.lse, "lse", in, problem);
  check_like_out(check, dout, "dout", in, problem);
  if (d_lse) check_like_lse(check, *d_lse, "d_lse", in, problem);
  const Layouts& L = layouts(in);
  check_like_input(check, grads.dq, "dq", in.q, "q", L.q);
  check_like_input(check, grads.dk, "dk", in.k, "k", L.k);
  check_like_input(check, grads.dv, "dv", in.v, "v", L.v);
#ifdef SEQMIX_ATTENTION_KERNELS
  if (in.q.device.is_cuda()) {  // deterministic: the two-kernel path without atomics; otherwise dQ by atomics
    const auto params = cuda_backward_params(check, in, forward, dout, d_lse, grads, problem, options);
    const cuda::DeviceGuard guard(in.q.device.index);
    if (in.q.dtype == DType::bf16)
      launch_backward_by_head_dim<cuda::AttentionDtype::bf16>(params);
    else
      launch_backward_by_head_dim<cuda::AttentionDtype::f16>(params);
    return;
  }
#endif
  const Impl impl = core::resolve_cpu_impl(check, options.impl, in.q);
  cpu::attention_backward(problem, in, forward, dout, d_lse, grads, impl);
}

}  // namespace seqmix
