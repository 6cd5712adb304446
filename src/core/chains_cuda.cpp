// The chains' CUDA dispatch: what the CUDA path covers (bf16 operands, TMA-aligned rows,
// outputs in runs of column views), checked after src/core/chains.cpp's device-independent
// checks, then the launchers of src/cuda/chains. Empty when the build has no chains kernels.
#include "core/chains_cuda.hpp"

#ifdef SEQMIX_CUDA_CHAINS
#include <cstdint>

#include "cuda/chains/gate_in_gemm.hpp"
#include "cuda/chains/params.hpp"
#include "cuda/common/device.hpp"

namespace seqmix::core {
namespace {

// What the TMA of the GEMMs reads or writes: rows of `dtype` with unit column stride, a
// 16-byte aligned base and a row stride of a multiple of 16 bytes.
cuda::Rows gemm_rows(const Checker& check, const Tensor& t, const char* arg, DType dtype = DType::bf16) {
  if (t.dtype != dtype)
    check.fail(arg, std::string("dtype ") + dtype_name(dtype) + " on a CUDA device", dtype_name(t.dtype));
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
cuda::MutableRows gemm_rows_out(const Checker& check, const Tensor& t, const char* arg,
                                DType dtype = DType::bf16) {
  const cuda::Rows rows = gemm_rows(check, t, arg, dtype);
  return {t.data, rows.stride};
}

void multiple_of_8(const Checker& check, int64_t n, const char* arg, const char* what) {
  if (n % 8 != 0)
    check.fail(arg, std::string(what) + " a multiple of 8 on a CUDA device",
               std::string(what) + " = " + std::to_string(n));
}

// A contiguous bf16 vector (bias, norm weight, their gradients).
void bf16_vector(const Checker& check, const Tensor& t, const char* arg) {
  if (t.dtype != DType::bf16) check.fail(arg, "dtype bf16 on a CUDA device", dtype_name(t.dtype));
}

cuda::ProjectionChainProblem cuda_projection(const Checker& check, const cpu::ProjectionProblem& p,
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
std::vector<cuda::OutputRun> output_runs(const Checker& check, const cpu::ProjectionProblem& p,
                                         const std::vector<Tensor>& outputs, const char* name = "outputs") {
  std::vector<cuda::OutputRun> runs;
  std::vector<size_t> starts;  // the segment that opens each run
  for (size_t s = 0; s < outputs.size(); ++s) {
    const Tensor& t = outputs[s];
    const std::string arg = indexed(name, s);
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
      check.fail(indexed(name, starts[r]),
                 "on a CUDA device, runs of outputs (column views of one buffer) starting at a multiple of 8 "
                 "columns and spanning a multiple of 8 columns (4 for f32)",
                 "a run of columns [" + std::to_string(run.first) + ", " + std::to_string(run.first + run.width) + ")");
    if (p.tokens == 1) run.out.stride = (run.width + align - 1) / align * align;  // one row spanning the run
  }
  return runs;
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
cuda::Rows head_rows(const Checker& check, const Tensor& t, const char* arg) {
  if (t.dtype != DType::bf16) check.fail(arg, "dtype bf16 on a CUDA device", dtype_name(t.dtype));
  const int r = t.rank();
  const int64_t H = t.shape[r - 2], Dv = t.shape[r - 1];
  const int64_t stride = token_stride(t, r - 2, H * Dv);
  if ((H > 1 && t.strides[r - 2] != Dv) || stride < 0)
    check.fail(arg, "on a CUDA device, each token's heads side by side (stride of H = Dv) and B, T collapsible",
               "strides " + shape_str(t.strides));
  return {t.data, stride};
}
cuda::MutableRows head_rows_out(const Checker& check, const Tensor& t, const char* arg) {
  const cuda::Rows rows = head_rows(check, t, arg);
  return {t.data, rows.stride};
}

// y or dy as a [tokens, d_out] matrix for the GEMMs (B and T collapsed).
Tensor token_matrix(const Checker& check, const Tensor& t, int64_t tokens, const char* arg) {
  const int64_t stride = token_stride(t, t.rank() - 1, t.shape.back());
  if (stride < 0)
    check.fail(arg, "B and T collapsible into tokens on a CUDA device", "strides " + shape_str(t.strides));
  Tensor m = t;
  m.shape = {tokens, t.shape.back()};
  m.strides = {stride, t.strides.back()};
  return m;
}

cuda::OutputChainProblem cuda_output(const Checker& check, const cpu::OutputChainProblem& p,
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

}  // namespace

void cuda_projection_forward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                             const Tensor& weight, const std::optional<Tensor>& bias,
                             const std::vector<Tensor>& outputs, const CommonOptions& options) {
  const auto problem = cuda_projection(check, p, x, weight, bias, options);
  const auto runs = output_runs(check, p, outputs);
  const cuda::DeviceGuard guard(x.device.index);
  cuda::projection_chain_forward(problem, runs);
}

void cuda_projection_backward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                              const Tensor& weight, const std::optional<Tensor>& bias,
                              const std::vector<Tensor>& d_outputs, const ProjectionChainGrads& grads,
                              const CommonOptions& options) {
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

// The gate's second GEMM reads the code segment's output as its x: the same conditions as the
// two-call form's projection_chain call on it, named after this call's arguments.
void cuda_projection_with_gate_forward(const Checker& check, const cpu::ProjectionProblem& p, const Tensor& x,
                                       const Tensor& weight, const std::optional<Tensor>& bias,
                                       const std::vector<Tensor>& outputs, const cpu::ProjectionProblem& gate_problem,
                                       const LowRankGate& gate, const Tensor& gate_out, const CommonOptions& options) {
  const auto problem = cuda_projection(check, p, x, weight, bias, options);
  const auto runs = output_runs(check, p, outputs);
  const std::string code_arg = indexed("outputs", gate.segment);
  cuda::ProjectionChainProblem gq;
  gq.tokens = gate_problem.tokens, gq.d = gate_problem.d, gq.columns = gate_problem.columns;
  multiple_of_8(check, gq.columns, "gate.weight", "gate width");
  gq.x = gemm_rows(check, outputs[gate.segment], code_arg.c_str());
  gq.weight = gemm_rows(check, gate.weight, "gate.weight");
  if (gate.bias) {
    bf16_vector(check, *gate.bias, "gate.bias");
    gq.bias = gate.bias->data;
  }
  const float scale = static_cast<float>(1.0 / gate.tau);
  gq.segments.push_back({0, gq.columns, static_cast<int>(Activation::logsigmoid), scale});
  gq.stream = options.stream;
  gq.after_chain_gemm = true;  // projection_chain_forward(problem, ...) just before
  const auto gate_runs = output_runs(check, gate_problem, {gate_out}, "gate_out");
  const cuda::LowRankGateProblem in_epilogue{gq.columns, gq.d,  gq.weight, gq.bias, scale, gate_runs[0].out,
                                             gate_runs[0].f32};
  const cuda::DeviceGuard guard(x.device.index);
  if (cuda::projection_chain_with_gate_in_gemm(problem, runs, gate.segment, in_epilogue)) return;
  cuda::projection_chain_forward(problem, runs);
  cuda::projection_chain_forward(gq, gate_runs);
}

void cuda_output_forward(const Checker& check, const cpu::OutputChainProblem& p, const OutputChainInputs& in,
                         const Tensor& y, const CommonOptions& options) {
  const auto problem = cuda_output(check, p, in, options);
  const auto out = gemm_rows_out(check, token_matrix(check, y, p.tokens, "y"), "y");
  const cuda::DeviceGuard guard(in.o.device.index);
  cuda::output_chain_forward(problem, out);
}

void cuda_output_backward(const Checker& check, const cpu::OutputChainProblem& p, const OutputChainInputs& in,
                          const Tensor& dy, const OutputChainGrads& grads, const CommonOptions& options) {
  const auto problem = cuda_output(check, p, in, options);
  cuda::OutputChainGradients g;
  g.dy = gemm_rows(check, token_matrix(check, dy, p.tokens, "dy"), "dy");
  g.d_o = head_rows_out(check, grads.d_o, "d_o");
  g.dg = head_rows_out(check, grads.dg, "dg");
  bf16_vector(check, grads.dnorm_weight, "dnorm_weight");
  g.dnorm_weight = grads.dnorm_weight.data;
  g.dout_weight = gemm_rows_out(check, grads.dout_weight, "dout_weight");
  const cuda::DeviceGuard guard(in.o.device.index);
  cuda::output_chain_backward(problem, g);
}

}  // namespace seqmix::core
#endif
