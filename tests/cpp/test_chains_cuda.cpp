// The chains' CUDA path (src/cuda/chains through src/core/chains.cpp) against the float64
// oracle: the projection chain with every activation, bias on and off, token counts 1 and
// 1000 (not tile multiples), forward and backward; the output chain forward and backward.
// Cases named Small* are the ones the GPU check runs under compute-sanitizer. The
// ChainsCudaErrors tests need no GPU: the CUDA path refuses what it does not cover before
// touching the device.
#include <cstdlib>
#include <optional>

#include "cuda/chains/params.hpp"
#include "chains_cuda_util.hpp"

namespace seqmix::test {
namespace {

// One segment of every activation, widths that are not tile multiples, W_total = 240 (the
// CUDA path needs a multiple of 8); tau = 16 for the log-sigmoid gate as in fla's GLA.
const std::vector<ProjectionSegment> kSegments = {{64, Activation::identity, 1.0},
                                                  {48, Activation::silu, 1.0},
                                                  {40, Activation::sigmoid, 1.0},
                                                  {56, Activation::logsigmoid, 16.0},
                                                  {32, Activation::softplus, 1.0}};

struct ProjectionCase {
  const char* name;
  int64_t M, K;
  bool bias;
};
void PrintTo(const ProjectionCase& c, std::ostream* os) { *os << c.name; }

// x, weight, bias in bf16 on the host and the device; the weights scaled so that the
// pre-activations span several units and every branch of the activations is exercised.
struct ProjectionInputs {
  const ProjectionCase c;
  const int64_t N = width_of(kSegments);
  HostTensor x = uniform({c.M, c.K}, DType::bf16), weight = uniform({N, c.K}, DType::bf16, -0.2, 0.2);
  HostTensor bias = uniform({N}, DType::bf16);
  HostTensor x64 = as_f64(x), weight64 = as_f64(weight), bias64 = as_f64(bias);
  DeviceTensor d_x{x}, d_weight{weight}, d_bias{bias};
  ProjectionChainOptions reference;

  explicit ProjectionInputs(const ProjectionCase& c_) : c(c_) { reference.impl = Impl::reference; }
};

class ProjectionChainCuda : public ::testing::TestWithParam<ProjectionCase> {};

TEST_P(ProjectionChainCuda, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ProjectionInputs in(GetParam());
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : kSegments) {
    want.emplace_back(std::vector<int64_t>{in.c.M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  projection_chain_forward(in.x64, in.weight64, maybe(in.c.bias, in.bias64), kSegments, want_views, in.reference);

  HostTensor out = poisoned({in.c.M, in.N}, DType::bf16);
  DeviceTensor d_out(out);
  projection_chain_forward(in.d_x, in.d_weight, maybe(in.c.bias, in.d_bias), kSegments,
                           column_views(d_out.view, kSegments));
  const std::vector<double> got = d_out.values(out);

  expect_segments_match(got, want, kSegments, in.c.M, tolerance(DType::bf16));
}

TEST_P(ProjectionChainCuda, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ProjectionInputs in(GetParam());
  // Separate gradient tensors, as autograd hands them over; one in f32 (a consumer that
  // computed in f32), the others bf16.
  std::vector<HostTensor> d_outputs, d_outputs64;
  std::vector<std::unique_ptr<DeviceTensor>> device_d_outputs;
  std::vector<Tensor> host_views, device_views;
  for (size_t s = 0; s < kSegments.size(); ++s) {
    d_outputs.push_back(uniform({in.c.M, kSegments[s].width}, s == 2 ? DType::f32 : DType::bf16));
    d_outputs64.push_back(as_f64(d_outputs.back()));
    device_d_outputs.push_back(std::make_unique<DeviceTensor>(d_outputs.back()));
    host_views.push_back(d_outputs64.back().view);
    device_views.push_back(device_d_outputs.back()->view);
  }
  HostTensor dx64({in.c.M, in.c.K}, DType::f64), dw64({in.N, in.c.K}, DType::f64), db64({in.N}, DType::f64);
  projection_chain_backward(in.x64, in.weight64, maybe(in.c.bias, in.bias64), kSegments, host_views,
                            {dx64.view, dw64.view, maybe(in.c.bias, db64.view)}, in.reference);

  HostTensor dx = poisoned({in.c.M, in.c.K}, DType::bf16), dw = poisoned({in.N, in.c.K}, DType::bf16);
  HostTensor db = poisoned({in.N}, DType::bf16);
  DeviceTensor d_dx(dx), d_dw(dw), d_db(db);
  projection_chain_backward(in.d_x, in.d_weight, maybe(in.c.bias, in.d_bias), kSegments, device_views,
                            {d_dx.view, d_dw.view, maybe(in.c.bias, d_db.view)});
  EXPECT_LT(rel_err(d_dx.values(dx), dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(d_dw.values(dw), dw64.values()), tolerance(DType::bf16)) << "dweight";
  if (in.c.bias) EXPECT_LT(rel_err(d_db.values(db), db64.values()), tolerance(DType::bf16)) << "dbias";
}

INSTANTIATE_TEST_SUITE_P(Cases, ProjectionChainCuda,
                         ::testing::Values(ProjectionCase{"Small_M1_K64_nobias", 1, 64, false},
                                           ProjectionCase{"Small_M1_K64_bias", 1, 64, true},
                                           ProjectionCase{"Small_M1000_K136_bias", 1000, 136, true},
                                           ProjectionCase{"Small_M1000_K136_nobias", 1000, 136, false},
                                           ProjectionCase{"M2000_K512_bias", 2000, 512, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Narrow K (≤ 32: GLA's rank-16 gate): the forward takes the CUDA-core kernel
// (narrow_projection.cuh) instead of the GEMM. x is a column view of a wider buffer (row
// stride above K); the outputs are column views of one bf16 or f32 buffer. K = 16 goes
// through the public API; K = 13 (which the core's checks refuse: d a multiple of 8) and an
// odd x stride go to the launcher directly, to cover what the kernel itself accepts.
struct NarrowCase {
  const char* name;
  int64_t M, K, x_stride;
  bool bias, f32, through_launcher;
};
void PrintTo(const NarrowCase& c, std::ostream* os) { *os << c.name; }

// x as the last K columns of wider bf16 rows (row stride x_stride: strided, and unaligned
// for odd strides), weight and bias, their float64 copies for the oracle, and the device
// copies with x's view into the device buffer.
struct NarrowInputs {
  const NarrowCase c;
  const int64_t N = width_of(kSegments), x_column = c.x_stride - c.K;
  HostTensor x_buffer = uniform({c.M, c.x_stride}, DType::bf16), weight = uniform({N, c.K}, DType::bf16, -0.5, 0.5);
  HostTensor bias = uniform({N}, DType::bf16);
  Tensor x_view = columns_of(x_buffer.view);
  HostTensor x64{{c.M, c.K}, DType::f64};
  HostTensor weight64 = as_f64(weight), bias64 = as_f64(bias);
  DeviceTensor d_x{x_buffer}, d_weight{weight}, d_bias{bias};
  Tensor d_x_view = columns_of(d_x.view);

  explicit NarrowInputs(const NarrowCase& c_) : c(c_) { x64.set(core::to_dense<double>(x_view)); }

  // The [M, K] view of the last K columns of a [M, x_stride] buffer.
  Tensor columns_of(Tensor buffer) const {
    buffer.data = static_cast<char*>(buffer.data) + x_column * 2;
    buffer.shape = {c.M, c.K};
    return buffer;
  }

  // The launcher's problem for this case: every segment of kSegments, logsigmoid's 1/tau.
  cuda::ProjectionChainProblem launcher_problem() const {
    cuda::ProjectionChainProblem p;
    p.tokens = c.M, p.d = c.K, p.columns = N;
    p.x = {d_x_view.data, c.x_stride};
    p.weight = {d_weight.ptr, c.K};
    p.bias = c.bias ? d_bias.ptr : nullptr;
    int64_t first = 0;
    for (const auto& s : kSegments) {
      p.segments.push_back({first, s.width, static_cast<int>(s.activation),
                            s.activation == Activation::logsigmoid ? static_cast<float>(1.0 / s.tau) : 1.f});
      first += s.width;
    }
    return p;
  }
};

class ProjectionChainCudaNarrowK : public ::testing::TestWithParam<NarrowCase> {};

TEST_P(ProjectionChainCudaNarrowK, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const NarrowCase c = GetParam();
  NarrowInputs in(c);
  const int64_t N = in.N;
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : kSegments) {
    want.emplace_back(std::vector<int64_t>{c.M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  projection_chain_forward(in.x64, in.weight64, maybe(c.bias, in.bias64.view), kSegments, want_views, reference);

  const DType out_dtype = c.f32 ? DType::f32 : DType::bf16;
  HostTensor out = poisoned({c.M, N}, out_dtype);
  DeviceTensor d_out(out);
  if (c.through_launcher) {
    cuda::projection_chain_forward(in.launcher_problem(), {cuda::OutputRun{0, N, {d_out.ptr, N}, c.f32}});
  } else {
    projection_chain_forward(in.d_x_view, in.d_weight, maybe(c.bias, in.d_bias.view), kSegments,
                             column_views(d_out.view, kSegments));
  }
  // f32 outputs: only the operands' bf16 rounding is shared with the oracle.
  expect_segments_match(d_out.values(out), want, kSegments, c.M, c.f32 ? 1e-4 : tolerance(DType::bf16));
}

// The narrow backward (the derivative recompute and both gradient GEMMs on the tensor
// cores, narrow_backward.cuh) against the oracle: the same x views; the gradients of the
// segments separate tensors as autograd hands them over, the third in f32.
TEST_P(ProjectionChainCudaNarrowK, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const NarrowCase c = GetParam();
  NarrowInputs in(c);
  const int64_t N = in.N;
  std::vector<HostTensor> d_outputs, d_outputs64;
  std::vector<std::unique_ptr<DeviceTensor>> device_d_outputs;
  std::vector<Tensor> host_views, device_views;
  for (size_t s = 0; s < kSegments.size(); ++s) {
    d_outputs.push_back(uniform({c.M, kSegments[s].width}, s == 2 ? DType::f32 : DType::bf16));
    d_outputs64.push_back(as_f64(d_outputs.back()));
    device_d_outputs.push_back(std::make_unique<DeviceTensor>(d_outputs.back()));
    host_views.push_back(d_outputs64.back().view);
    device_views.push_back(device_d_outputs.back()->view);
  }
  HostTensor dx64({c.M, c.K}, DType::f64), dw64({N, c.K}, DType::f64), db64({N}, DType::f64);
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  projection_chain_backward(in.x64, in.weight64, maybe(c.bias, in.bias64.view), kSegments, host_views,
                            {dx64.view, dw64.view, maybe(c.bias, db64.view)}, reference);

  HostTensor dx = poisoned({c.M, c.K}, DType::bf16), dw = poisoned({N, c.K}, DType::bf16);
  HostTensor db = poisoned({N}, DType::bf16);
  DeviceTensor d_dx(dx), d_dw(dw), d_db(db);
  if (c.through_launcher) {
    cuda::ProjectionChainGradients g;
    for (size_t s = 0; s < kSegments.size(); ++s)
      g.d_outputs.push_back({device_d_outputs[s]->ptr, kSegments[s].width, s == 2});
    g.dx = {d_dx.ptr, c.K};
    g.dweight = {d_dw.ptr, c.K};
    g.dbias = c.bias ? d_db.ptr : nullptr;
    cuda::projection_chain_backward(in.launcher_problem(), g);
  } else {
    projection_chain_backward(in.d_x_view, in.d_weight.view, maybe(c.bias, in.d_bias.view), kSegments, device_views,
                              {d_dx.view, d_dw.view, maybe(c.bias, d_db.view)});
  }
  EXPECT_LT(rel_err(d_dx.values(dx), dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(d_dw.values(dw), dw64.values()), tolerance(DType::bf16)) << "dweight";
  if (c.bias) EXPECT_LT(rel_err(d_db.values(db), db64.values()), tolerance(DType::bf16)) << "dbias";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ProjectionChainCudaNarrowK,
    ::testing::Values(NarrowCase{"Small_K16_M1_bias_bf16", 1, 16, 40, true, false, false},
                      NarrowCase{"Small_K16_M1000_bias_bf16", 1000, 16, 40, true, false, false},
                      NarrowCase{"Small_K16_M1000_nobias_bf16", 1000, 16, 24, false, false, false},
                      NarrowCase{"Small_K16_M1_nobias_f32", 1, 16, 24, false, true, false},
                      NarrowCase{"Small_K16_M1000_bias_f32", 1000, 16, 40, true, true, false},
                      NarrowCase{"Small_K32_M1000_bias_bf16", 1000, 32, 48, true, false, false},
                      NarrowCase{"Small_K13_M1_bias_bf16_launcher", 1, 13, 21, true, false, true},
                      NarrowCase{"Small_K13_M1000_bias_bf16_launcher", 1000, 13, 21, true, false, true},
                      NarrowCase{"Small_K13_M1000_nobias_f32_launcher", 1000, 13, 21, false, true, true},
                      NarrowCase{"Small_K13_M1000_bias_f32_launcher", 1000, 13, 13, true, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

// A wide identity run with narrow gates and no bias (Gated DeltaNet's shape, scaled down):
// above 16384 tokens the forward splits it into plain GEMMs over the identity columns and
// an activation GEMM over the gates (widened to multiples of 8: the softplus segment starts
// at column 196). Not Small (16392 tokens): compute-sanitizer ran this path at 1000 tokens
// when the split had no token threshold.
TEST(ProjectionChainCuda, WideIdentityRunSplitsAroundItsGates) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<ProjectionSegment> segments = {{196, Activation::identity, 1.0},
                                                   {12, Activation::softplus, 1.0},
                                                   {8, Activation::sigmoid, 1.0},
                                                   {16, Activation::identity, 1.0}};
  const int64_t M = 16392, K = 40, N = 232;
  HostTensor x = uniform({M, K}, DType::bf16), weight = uniform({N, K}, DType::bf16, -0.5, 0.5);
  const HostTensor x64 = as_f64(x), weight64 = as_f64(weight);
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& seg : segments) {
    want.emplace_back(std::vector<int64_t>{M, seg.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  projection_chain_forward(x64, weight64, std::nullopt, segments, want_views, reference);

  HostTensor out = poisoned({M, N}, DType::bf16);
  DeviceTensor d_x(x), d_weight(weight), d_out(out);
  std::vector<Tensor> views;
  int64_t first = 0;
  for (const auto& seg : segments) {
    Tensor v = d_out.view;
    v.data = static_cast<char*>(d_out.view.data) + first * 2;
    v.shape = {M, seg.width};
    views.push_back(v);
    first += seg.width;
  }
  setenv("SEQMIX_CHAINS_GATES_IN_GEMM", "0", 1);  // the split, not the default gates-in-GEMM path
  projection_chain_forward(d_x.view, d_weight.view, std::nullopt, segments, views);
  unsetenv("SEQMIX_CHAINS_GATES_IN_GEMM");
  const std::vector<double> got = d_out.values(out);
  first = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    std::vector<double> columns;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < segments[s].width; ++j) columns.push_back(got[i * N + first + j]);
    EXPECT_LT(rel_err(columns, want[s].values()), tolerance(DType::bf16)) << "segment " << s;
    first += segments[s].width;
  }
}

// The first three segments bf16 views of one buffer, the last two (the gates) f32 views of
// another: two runs, the second written by the f32-output GEMM.
TEST(ProjectionChainCuda, SmallF32GateSegmentsAreASecondRun) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ProjectionInputs in({"mixed", 1000, 136, true});
  std::vector<HostTensor> want;
  std::vector<Tensor> want_views;
  for (const auto& s : kSegments) {
    want.emplace_back(std::vector<int64_t>{in.c.M, s.width}, DType::f64);
    want_views.push_back(want.back().view);
  }
  projection_chain_forward(in.x64, in.weight64, in.bias64.view, kSegments, want_views, in.reference);

  const int64_t bf16_width = 64 + 48 + 40, f32_width = 56 + 32;
  HostTensor low = poisoned({in.c.M, bf16_width}, DType::bf16), gates = poisoned({in.c.M, f32_width}, DType::f32);
  DeviceTensor d_low(low), d_gates(gates);
  std::vector<Tensor> views;
  int64_t first = 0;
  for (size_t s = 0; s < kSegments.size(); ++s) {
    const bool gate = s >= 3;
    Tensor v = gate ? d_gates.view : d_low.view;
    const int64_t column = gate ? first - bf16_width : first;
    v.data = static_cast<char*>(v.data) + column * dtype_size(v.dtype);
    v.shape = {in.c.M, kSegments[s].width};
    views.push_back(v);
    first += kSegments[s].width;
  }
  projection_chain_forward(in.d_x, in.d_weight, in.d_bias.view, kSegments, views);
  const std::vector<double> got_low = d_low.values(low), got_gates = d_gates.values(gates);
  first = 0;
  for (size_t s = 0; s < kSegments.size(); ++s) {
    const bool gate = s >= 3;
    const int64_t width = gate ? f32_width : bf16_width, column = gate ? first - bf16_width : first;
    std::vector<double> columns;
    for (int64_t i = 0; i < in.c.M; ++i)
      for (int64_t j = 0; j < kSegments[s].width; ++j)
        columns.push_back((gate ? got_gates : got_low)[i * width + column + j]);
    // f32 gates: only the operands' bf16 rounding is shared with the oracle, not the output's.
    EXPECT_LT(rel_err(columns, want[s].values()), gate ? 1e-4 : tolerance(DType::bf16)) << "segment " << s;
    first += kSegments[s].width;
  }
}

// Every segment identity and no bias: the forward is the bare GEMM (d = 40) or the narrow
// kernel with null column vectors (d = 16), and the backward skips the derivative GEMM.
class ProjectionChainCudaIdentity : public ::testing::TestWithParam<int64_t> {};

TEST_P(ProjectionChainCudaIdentity, SmallIdentityChainIsThePlainGemm) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t d = GetParam();
  const std::vector<ProjectionSegment> segments = {{16, Activation::identity, 1.0}, {24, Activation::identity, 1.0}};
  HostTensor x = uniform({37, d}, DType::bf16), w = uniform({40, d}, DType::bf16);
  HostTensor x64 = as_f64(x), w64 = as_f64(w), y64({37, 40}, DType::f64), dy = uniform({37, 40}, DType::bf16);
  HostTensor dy64 = as_f64(dy);
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  Tensor y_left = y64.view, y_right = y64.view;
  y_left.shape = {37, 16};
  y_right.shape = {37, 24};
  y_right.data = static_cast<double*>(y64.view.data) + 16;
  projection_chain_forward(x64, w64, std::nullopt, segments, {y_left, y_right}, reference);

  HostTensor y = poisoned({37, 40}, DType::bf16);
  DeviceTensor d_x(x), d_w(w), d_y(y), d_dy(dy);
  Tensor left = d_y.view, right = d_y.view;
  left.shape = {37, 16};
  right.shape = {37, 24};
  right.data = static_cast<char*>(d_y.ptr) + 16 * 2;
  projection_chain_forward(d_x, d_w, std::nullopt, segments, {left, right});
  EXPECT_LT(rel_err(d_y.values(y), y64.values()), tolerance(DType::bf16));

  Tensor dy_left = d_dy.view, dy_right = d_dy.view;  // views of one buffer work as gradients too
  dy_left.shape = {37, 16};
  dy_right.shape = {37, 24};
  dy_right.data = static_cast<char*>(d_dy.ptr) + 16 * 2;
  Tensor dy64_left = dy64.view, dy64_right = dy64.view;
  dy64_left.shape = {37, 16};
  dy64_right.shape = {37, 24};
  dy64_right.data = static_cast<double*>(dy64.view.data) + 16;
  HostTensor dx64({37, d}, DType::f64), dw64({40, d}, DType::f64);
  projection_chain_backward(x64, w64, std::nullopt, segments, {dy64_left, dy64_right}, {dx64.view, dw64.view},
                            reference);
  HostTensor dx = poisoned({37, d}, DType::bf16), dw = poisoned({40, d}, DType::bf16);
  DeviceTensor d_dx(dx), d_dw(dw);
  projection_chain_backward(d_x, d_w, std::nullopt, segments, {dy_left, dy_right}, {d_dx.view, d_dw.view});
  EXPECT_LT(rel_err(d_dx.values(dx), dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(d_dw.values(dw), dw64.values()), tolerance(DType::bf16)) << "dweight";
}

INSTANTIATE_TEST_SUITE_P(Depths, ProjectionChainCudaIdentity, ::testing::Values(int64_t{16}, int64_t{40}),
                         [](const auto& info) { return "d" + std::to_string(info.param); });

// ---- output chain ----

struct OutputCase {
  const char* name;
  std::vector<int64_t> o_shape;  // [tokens, H, Dv] or [B, T, H, Dv]
  int64_t d_out;
};
void PrintTo(const OutputCase& c, std::ostream* os) { *os << c.name; }

class OutputChainCuda : public ::testing::TestWithParam<OutputCase> {};

TEST_P(OutputChainCuda, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const OutputCase c = GetParam();
  const int rank = static_cast<int>(c.o_shape.size());
  const int64_t H = c.o_shape[rank - 2], Dv = c.o_shape[rank - 1];
  std::vector<int64_t> y_shape(c.o_shape.begin(), c.o_shape.end() - 2);
  y_shape.push_back(c.d_out);
  HostTensor o = uniform(c.o_shape, DType::bf16), g = uniform(c.o_shape, DType::bf16, -3.0, 3.0);
  HostTensor nw = uniform({Dv}, DType::bf16, 0.5, 1.5), ow = uniform({c.d_out, H * Dv}, DType::bf16, -0.2, 0.2);
  HostTensor dy = uniform(y_shape, DType::bf16);
  HostTensor o64 = as_f64(o), g64 = as_f64(g), nw64 = as_f64(nw), ow64 = as_f64(ow), dy64 = as_f64(dy);
  OutputChainOptions reference;
  reference.impl = Impl::reference;
  const OutputChainInputs in64{o64, g64, nw64, ow64};
  HostTensor y64(y_shape, DType::f64), do64(c.o_shape, DType::f64), dg64(c.o_shape, DType::f64);
  HostTensor dnw64({Dv}, DType::f64), dow64({c.d_out, H * Dv}, DType::f64);
  output_chain_forward(in64, y64, reference);
  output_chain_backward(in64, dy64, {do64, dg64, dnw64, dow64}, reference);

  DeviceTensor d_o(o), d_g(g), d_nw(nw), d_ow(ow), d_dy(dy);
  HostTensor y = poisoned(y_shape, DType::bf16), d_o_host = poisoned(c.o_shape, DType::bf16);
  HostTensor dg = poisoned(c.o_shape, DType::bf16), dnw = poisoned({Dv}, DType::bf16);
  HostTensor dow = poisoned({c.d_out, H * Dv}, DType::bf16);
  DeviceTensor d_y(y), d_do(d_o_host), d_dg(dg), d_dnw(dnw), d_dow(dow);
  const OutputChainInputs in{d_o, d_g, d_nw, d_ow};
  output_chain_forward(in, d_y);
  EXPECT_LT(rel_err(d_y.values(y), y64.values()), tolerance(DType::bf16)) << "y";
  output_chain_backward(in, d_dy, {d_do, d_dg, d_dnw, d_dow});
  EXPECT_LT(rel_err(d_do.values(d_o_host), do64.values()), tolerance(DType::bf16)) << "do";
  EXPECT_LT(rel_err(d_dg.values(dg), dg64.values()), tolerance(DType::bf16)) << "dg";
  EXPECT_LT(rel_err(d_dnw.values(dnw), dnw64.values()), tolerance(DType::bf16)) << "dnorm_weight";
  EXPECT_LT(rel_err(d_dow.values(dow), dow64.values()), tolerance(DType::bf16)) << "dout_weight";
}

INSTANTIATE_TEST_SUITE_P(Cases, OutputChainCuda,
                         ::testing::Values(OutputCase{"Small_T1_H2_Dv64", {1, 2, 64}, 96},
                                           OutputCase{"Small_T1000_H3_Dv40", {1000, 3, 40}, 64},
                                           // Dv not a multiple of 8: the norm-gate kernel's 2-byte path.
                                           OutputCase{"Small_T100_H2_Dv12", {100, 2, 12}, 64},
                                           // Dv over 256: two 16-byte vectors a lane, the second partly idle.
                                           OutputCase{"Small_T64_H2_Dv264", {64, 2, 264}, 64},
                                           // GLA's head width: two full vectors a lane.
                                           OutputCase{"Small_T300_H2_Dv512", {300, 2, 512}, 64},
                                           OutputCase{"Small_B2_T500_H2_Dv128", {2, 500, 2, 128}, 200},
                                           OutputCase{"T4000_H4_Dv128", {4000, 4, 128}, 512}),
                         [](const auto& info) { return std::string(info.param.name); });

// The backward's u written by the norm-gate backward (default) is the forward's u bit for
// bit: dout_weight = dyᵀ·u then equals, bit for bit, the one from the separate recompute pass
// (SEQMIX_CHAINS_OUTPUT_FUSED=0); the GEMM has no split-K, so it is deterministic.
TEST(OutputChainCuda, SmallFusedRecomputeOfUIsBitwiseTheForwards) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t T = 333, H = 3, Dv = 128, d_out = 72;
  const OutputChainData data(T, H, Dv, d_out);
  const OutputChainInputs in = data.inputs();
  std::vector<double> dow_values[2], do_values[2];
  for (int fused = 0; fused < 2; ++fused) {
    setenv("SEQMIX_CHAINS_OUTPUT_FUSED", fused ? "1" : "0", 1);
    HostTensor d_o_host = poisoned({T, H, Dv}, DType::bf16), dg = poisoned({T, H, Dv}, DType::bf16);
    HostTensor dnw = poisoned({Dv}, DType::bf16), dow = poisoned({d_out, H * Dv}, DType::bf16);
    DeviceTensor d_do(d_o_host), d_dg(dg), d_dnw(dnw), d_dow(dow);
    output_chain_backward(in, data.d_dy, {d_do, d_dg, d_dnw, d_dow});
    dow_values[fused] = d_dow.values(dow);
    do_values[fused] = d_do.values(d_o_host);
  }
  unsetenv("SEQMIX_CHAINS_OUTPUT_FUSED");
  EXPECT_EQ(dow_values[0], dow_values[1]) << "dout_weight";
  EXPECT_EQ(do_values[0], do_values[1]) << "d_o";
}

// ---- what the CUDA path refuses (no GPU needed: validation never touches the device) ----

Tensor on_cuda(const HostTensor& t) {
  Tensor v = t.view;
  v.device = Device::cuda(0);
  return v;
}

TEST(ChainsCudaErrors, ProjectionNamesWhatTheCudaPathLacks) {
  const std::vector<ProjectionSegment> segs = {{8, Activation::silu}, {8, Activation::identity}};
  HostTensor x = uniform({5, 8}, DType::bf16), w = uniform({16, 8}, DType::bf16), y({5, 16}, DType::bf16);
  HostTensor x32 = uniform({5, 8}, DType::f32), w32 = uniform({16, 8}, DType::f32);
  HostTensor y32({5, 8}, DType::f32);
  const Tensor buffer = on_cuda(y);
  Tensor left = buffer, right = buffer;
  left.shape = right.shape = {5, 8};
  right.data = static_cast<char*>(buffer.data) + 8 * 2;
  const std::string op = "seqmix.projection_chain: ";
  EXPECT_SEQMIX_ERROR(
      projection_chain_forward(on_cuda(x32), on_cuda(w32), std::nullopt, segs, {on_cuda(y32), on_cuda(y32)}),
      op + "argument 'x': expected dtype bf16 on a CUDA device, got f32");
  // Two buffers, rows 16 bytes apart or more, but the first run spans 4 bf16 columns.
  HostTensor y16({5, 8}, DType::f16), wide({5, 16}, DType::bf16);
  Tensor first4 = buffer, next12 = on_cuda(wide);
  first4.shape = {5, 4};
  next12.shape = {5, 12};
  EXPECT_SEQMIX_ERROR(projection_chain_forward(on_cuda(x), on_cuda(w), std::nullopt,
                                               {{4, Activation::silu}, {12, Activation::identity}}, {first4, next12}),
                      op + "argument 'outputs[0]': expected on a CUDA device, runs of outputs (column views of one "
                           "buffer) starting at a multiple of 8 columns and spanning a multiple of 8 columns (4 for "
                           "f32), got a run of columns [0, 4)");
  EXPECT_SEQMIX_ERROR(projection_chain_forward(on_cuda(x), on_cuda(w), std::nullopt, segs, {left, on_cuda(y16)}),
                      op + "argument 'outputs[1]': expected dtype bf16 or f32 on a CUDA device, got f16");
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  EXPECT_SEQMIX_ERROR(projection_chain_forward(on_cuda(x), on_cuda(w), std::nullopt, segs, {left, right}, reference),
                      op + "argument 'impl': expected fast or automatic on a CUDA device, got reference");
  HostTensor w12 = uniform({12, 8}, DType::bf16);
  Tensor narrow = right;
  narrow.shape = {5, 4};
  EXPECT_SEQMIX_ERROR(projection_chain_forward(on_cuda(x), on_cuda(w12), std::nullopt,
                                               {{8, Activation::silu}, {4, Activation::identity}}, {left, narrow}),
                      op + "argument 'weight': expected W_total a multiple of 8 on a CUDA device, got W_total = 12");
  const std::vector<ProjectionSegment> many(40, {8, Activation::identity});
  HostTensor w_many = uniform({320, 8}, DType::bf16), y_many({5, 320}, DType::bf16);
  std::vector<Tensor> many_views;
  for (int s = 0; s < 40; ++s) {
    Tensor v = on_cuda(y_many);
    v.shape = {5, 8};
    v.data = static_cast<char*>(v.data) + s * 8 * 2;
    many_views.push_back(v);
  }
  EXPECT_SEQMIX_ERROR(projection_chain_forward(on_cuda(x), on_cuda(w_many), std::nullopt, many, many_views),
                      op + "argument 'segments': expected at most 32 segments on a CUDA device, got 40 segments");

  HostTensor d64({5, 8}, DType::f64), dx({5, 8}, DType::bf16), dw({16, 8}, DType::bf16);
  EXPECT_SEQMIX_ERROR(projection_chain_backward(on_cuda(x), on_cuda(w), std::nullopt, segs, {on_cuda(d64), left},
                                                {on_cuda(dx), on_cuda(dw), std::nullopt}),
                      "seqmix.projection_chain_backward: argument 'd_outputs[0]': expected dtype bf16 or f32 on a "
                      "CUDA device, got f64");
}

TEST(ChainsCudaErrors, OutputChainNamesWhatTheCudaPathLacks) {
  HostTensor o = uniform({5, 2, 4}, DType::bf16), g = uniform({5, 2, 4}, DType::bf16);
  HostTensor nw = uniform({4}, DType::bf16), ow = uniform({6, 8}, DType::bf16), y({5, 6}, DType::bf16);
  const std::string op = "seqmix.output_chain: ";
  EXPECT_SEQMIX_ERROR(output_chain_forward({on_cuda(o), on_cuda(g), on_cuda(nw), on_cuda(ow)}, on_cuda(y)),
                      op + "argument 'out_weight': expected d_out a multiple of 8 on a CUDA device, got d_out = 6");
  HostTensor ow8 = uniform({8, 8}, DType::bf16), y8({5, 8}, DType::bf16), g_wide({5, 2, 8}, DType::bf16);
  Tensor g_strided = on_cuda(g_wide);  // heads 8 elements apart for Dv = 4: not packed
  g_strided.shape = {5, 2, 4};
  EXPECT_SEQMIX_ERROR(output_chain_forward({on_cuda(o), g_strided, on_cuda(nw), on_cuda(ow8)}, on_cuda(y8)),
                      op + "argument 'g': expected on a CUDA device, each token's heads side by side (stride of H = "
                           "Dv) and B, T collapsible, got strides [16, 8, 1]");
}

}  // namespace
}  // namespace seqmix::test
