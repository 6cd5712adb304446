// Validation and dispatch of the projection chain and the output chain.
#include "seqmix/chains.hpp"

#include <cmath>
#include <cstdio>

#include "core/check.hpp"
#include "cpu/chains.hpp"
#include "seqmix/error.hpp"

#ifdef SEQMIX_CUDA_CHAINS
#include "cuda/chains/params.hpp"
#include "cuda/common/device.hpp"
#endif

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

std::string indexed(const char* name, size_t i) { return std::string(name) + "[" + std::to_string(i) + "]"; }

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


// ---- CUDA dispatch ----

#ifdef SEQMIX_CUDA_CHAINS
// What the TMA of the GEMMs reads or writes: rows of `dtype` with unit column stride, a
// 16-byte aligned base and a row stride of a multiple of 16 bytes.
cuda::Rows gemm_rows(const core::Checker& check, const Tensor& t, const char* arg, DType dtype = DType::bf16) {
  if (t.dtype != dtype) check.fail(arg, std::string("dtype ") + dtype_name(dtype) + " on a CUDA device", dtype_name(t.dtype));
  const int64_t align = 16 / dtype_size(dtype);
  // One row: its stride is never used, any multiple of 16 bytes serves the TMA descriptor.
  const int64_t row_stride = t.shape[0] == 1 ? (t.shape[1] + align - 1) / align * align : t.strides[0];
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0 || row_stride % align != 0 || row_stride < t.shape[1])
    check.fail(arg,
               "16-byte aligned data and a row stride that is a multiple of 16 bytes, rows not overlapping, on a "
               "CUDA device",
               "strides " + shape_str(t.strides));
  return {t.data, row_stride};
}
cuda::MutableRows gemm_rows_out(const core::Checker& check, const Tensor& t, const char* arg,
                                DType dtype = DType::bf16) {
  const cuda::Rows rows = gemm_rows(check, t, arg, dtype);
  return {t.data, rows.stride};
}

void multiple_of_8(const core::Checker& check, int64_t n, const char* arg, const char* what) {
  if (n % 8 != 0)
    check.fail(arg, std::string(what) + " a multiple of 8 on a CUDA device", std::string(what) + " = " + std::to_string(n));
}

// A contiguous bf16 vector (bias, norm weight, their gradients).
void bf16_vector(const core::Checker& check, const Tensor& t, const char* arg) {
  if (t.dtype != DType::bf16) check.fail(arg, "dtype bf16 on a CUDA device", dtype_name(t.dtype));
}

cuda::ProjectionChainProblem cuda_projection(const core::Checker& check, const cpu::ProjectionProblem& p,
                                             const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                                             const CommonOptions& options) {
  if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
  if (p.segments.size() > cuda::kMaxSegments)
    check.fail("segments", "at most " + std::to_string(cuda::kMaxSegments) + " segments on a CUDA device",
               std::to_string(p.segments.size()) + " segments");
  multiple_of_8(check, p.d, "x", "model width d");
  multiple_of_8(check, p.columns, "weight", "W_total");
  cuda::ProjectionChainProblem q;
  q.tokens = p.tokens, q.d = p.d, q.columns = p.columns;
  q.x = gemm_rows(check, x, "x");
  q.weight = gemm_rows(check, weight, "weight");
  if (bias) {
    bf16_vector(check, *bias, "bias");
    q.bias = bias->data;
  }
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const ProjectionSegment& seg = p.segments[s];
    q.segments.push_back({p.offsets[s], seg.width, static_cast<int>(seg.activation),
                          static_cast<float>(seg.activation == Activation::logsigmoid ? 1.0 / seg.tau : 1.0)});
  }
  q.stream = options.stream;
  return q;
}

// The forward writes the outputs run by run, one GEMM each: a run is consecutive segments
// of one dtype (bf16, or f32 for a consumer that wants it) whose outputs are column views of
// one buffer (each segment's data right after the previous one's columns, one row stride).
// All bf16 views of one [tokens, W_total] buffer make one run: one GEMM for the whole chain.
// TMA needs each run to start at a column that is a multiple of 8 and to span a multiple of
// 16 bytes.
std::vector<cuda::OutputRun> output_runs(const core::Checker& check, const cpu::ProjectionProblem& p,
                                         const std::vector<Tensor>& outputs) {
  std::vector<cuda::OutputRun> runs;
  std::vector<size_t> starts;  // the segment that opens each run
  for (size_t s = 0; s < outputs.size(); ++s) {
    const Tensor& t = outputs[s];
    const std::string arg = indexed("outputs", s);
    if (t.dtype != DType::bf16 && t.dtype != DType::f32)
      check.fail(arg, "dtype bf16 or f32 on a CUDA device", dtype_name(t.dtype));
    const bool f32 = t.dtype == DType::f32;
    if (!runs.empty()) {
      cuda::OutputRun& run = runs.back();
      const bool continues = run.f32 == f32 &&
                             t.data == static_cast<char*>(run.out.data) + run.width * dtype_size(t.dtype) &&
                             (p.tokens == 1 || t.strides[0] == run.out.stride);
      if (continues) {
        run.width += p.segments[s].width;
        continue;
      }
    }
    runs.push_back({p.offsets[s], p.segments[s].width, gemm_rows_out(check, t, arg.c_str(), t.dtype), f32});
    starts.push_back(s);
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    cuda::OutputRun& run = runs[r];
    const int64_t align = run.f32 ? 4 : 8;
    if (run.first % 8 != 0 || run.width % align != 0)
      check.fail(indexed("outputs", starts[r]),
                 "on a CUDA device, runs of outputs (column views of one buffer) starting at a multiple of 8 "
                 "columns and spanning a multiple of 8 columns (4 for f32)",
                 "a run of columns [" + std::to_string(run.first) + ", " + std::to_string(run.first + run.width) + ")");
    if (p.tokens == 1) run.out.stride = (run.width + align - 1) / align * align;  // one row spanning the run
  }
  return runs;
}

void cuda_projection_forward(const core::Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                             const Tensor& weight, const std::optional<Tensor>& bias,
                             const std::vector<Tensor>& outputs, const ProjectionChainOptions& options) {
  const auto problem = cuda_projection(check, p, x, weight, bias, options);
  const auto runs = output_runs(check, p, outputs);
  const cuda::DeviceGuard guard(x.device.index);
  cuda::projection_chain_forward(problem, runs);
}

void cuda_projection_backward(const core::Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                              const Tensor& weight, const std::optional<Tensor>& bias,
                              const std::vector<Tensor>& d_outputs, const ProjectionChainGrads& grads,
                              const ProjectionChainOptions& options) {
  const auto problem = cuda_projection(check, p, x, weight, bias, options);
  cuda::ProjectionChainGradients g;
  for (size_t s = 0; s < d_outputs.size(); ++s) {
    const Tensor& t = d_outputs[s];
    if (t.dtype != DType::bf16 && t.dtype != DType::f32)
      check.fail(indexed("d_outputs", s), "dtype bf16 or f32 on a CUDA device", dtype_name(t.dtype));
    g.d_outputs.push_back({t.data, t.strides[0], t.dtype == DType::f32});
  }
  g.dx = gemm_rows_out(check, grads.dx, "dx");
  g.dweight = gemm_rows_out(check, grads.dweight, "dweight");
  if (grads.dbias) {
    bf16_vector(check, *grads.dbias, "dbias");
    g.dbias = grads.dbias->data;
  }
  const cuda::DeviceGuard guard(x.device.index);
  cuda::projection_chain_backward(problem, g);
}

// The one stride of the leading `dims` dimensions (tokens, or B and T) when they collapse
// into one: `fallback` when every one has extent 1, -1 when they do not collapse.
int64_t token_stride(const Tensor& t, int dims, int64_t fallback) {
  int64_t stride = -1, next = -1;
  for (int i = dims - 1; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (stride < 0) stride = t.strides[i];
    else if (t.strides[i] != next) return -1;
    next = t.strides[i] * t.shape[i];
  }
  return stride < 0 ? fallback : stride;
}

// o or g (or their gradients) as [tokens, H·Dv] rows: each token's heads packed, the token
// dimensions collapsible into one stride.
cuda::Rows head_rows(const core::Checker& check, const Tensor& t, const char* arg) {
  if (t.dtype != DType::bf16) check.fail(arg, "dtype bf16 on a CUDA device", dtype_name(t.dtype));
  const int r = t.rank();
  const int64_t H = t.shape[r - 2], Dv = t.shape[r - 1];
  const int64_t stride = token_stride(t, r - 2, H * Dv);
  if ((H > 1 && t.strides[r - 2] != Dv) || stride < 0)
    check.fail(arg, "on a CUDA device, each token's heads side by side (stride of H = Dv) and B, T collapsible",
               "strides " + shape_str(t.strides));
  return {t.data, stride};
}
cuda::MutableRows head_rows_out(const core::Checker& check, const Tensor& t, const char* arg) {
  const cuda::Rows rows = head_rows(check, t, arg);
  return {t.data, rows.stride};
}

// y or dy as a [tokens, d_out] matrix for the GEMMs (B and T collapsed).
Tensor token_matrix(const core::Checker& check, const Tensor& t, int64_t tokens, const char* arg) {
  const int64_t stride = token_stride(t, t.rank() - 1, t.shape.back());
  if (stride < 0) check.fail(arg, "B and T collapsible into tokens on a CUDA device", "strides " + shape_str(t.strides));
  Tensor m = t;
  m.shape = {tokens, t.shape.back()};
  m.strides = {stride, t.strides.back()};
  return m;
}

cuda::OutputChainProblem cuda_output(const core::Checker& check, const cpu::OutputChainProblem& p,
                                     const OutputChainInputs& in, const CommonOptions& options) {
  if (options.impl == Impl::reference) check.fail("impl", "fast or automatic on a CUDA device", "reference");
  multiple_of_8(check, p.heads * p.dv, "o", "H·Dv");
  multiple_of_8(check, p.d_out, "out_weight", "d_out");
  cuda::OutputChainProblem q;
  q.tokens = p.tokens, q.heads = p.heads, q.dv = p.dv, q.d_out = p.d_out, q.eps = static_cast<float>(p.eps);
  q.o = head_rows(check, in.o, "o");
  q.g = head_rows(check, in.g, "g");
  bf16_vector(check, in.norm_weight, "norm_weight");
  q.norm_weight = in.norm_weight.data;
  q.out_weight = gemm_rows(check, in.out_weight, "out_weight");
  q.stream = options.stream;
  return q;
}

#else
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
    cuda_projection_forward(check, p, x, weight, bias, outputs, options);
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
    cuda_projection_backward(check, p, x, weight, bias, d_outputs, grads, options);
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

void output_chain_forward(const OutputChainInputs& in, const Tensor& y, const OutputChainOptions& options) {
  const core::Checker check("seqmix.output_chain");
  const auto layout = check_output_chain(check, in, options);
  check_like(check, y, "y", layout.y_shape, layout.y_layout, in.o, "o");
  if (in.o.device.is_cuda()) {
#ifdef SEQMIX_CUDA_CHAINS
    const auto problem = cuda_output(check, layout.problem, in, options);
    const auto out = gemm_rows_out(check, token_matrix(check, y, layout.problem.tokens, "y"), "y");
    const cuda::DeviceGuard guard(in.o.device.index);
    cuda::output_chain_forward(problem, out);
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
    const auto problem = cuda_output(check, layout.problem, in, options);
    cuda::OutputChainGradients g;
    g.dy = gemm_rows(check, token_matrix(check, dy, layout.problem.tokens, "dy"), "dy");
    g.d_o = head_rows_out(check, grads.d_o, "d_o");
    g.dg = head_rows_out(check, grads.dg, "dg");
    bf16_vector(check, grads.dnorm_weight, "dnorm_weight");
    g.dnorm_weight = grads.dnorm_weight.data;
    g.dout_weight = gemm_rows_out(check, grads.dout_weight, "dout_weight");
    const cuda::DeviceGuard guard(in.o.device.index);
    cuda::output_chain_backward(problem, g);
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
