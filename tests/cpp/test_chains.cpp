#include "seqmix/chains.hpp"

#include "test_util.hpp"

namespace seqmix::test {
namespace {

// ---------------------------------------------------------------- projection chain

// Every activation, widths that straddle the 64-column GEMM tiles (W_total = 120).
std::vector<ProjectionSegment> all_activations() {
  return {{5, Activation::identity},
          {70, Activation::silu},
          {3, Activation::sigmoid},
          {33, Activation::logsigmoid, 16.0},
          {9, Activation::softplus}};
}

int64_t total_width(const std::vector<ProjectionSegment>& segments) {
  int64_t total = 0;
  for (const auto& s : segments) total += s.width;
  return total;
}

struct ProjectionCase {
  int64_t tokens, d;
  DType dtype;
  bool with_bias;
  std::vector<DType> out_dtypes;  // one per segment of all_activations()
};

struct ProjectionData {
  std::vector<ProjectionSegment> segments;
  HostTensor x, weight, bias;
  bool with_bias;
  std::optional<Tensor> bias_view() const { return with_bias ? std::optional<Tensor>(bias.view) : std::nullopt; }
};

ProjectionData make_projection(int64_t tokens, int64_t d, DType dtype, bool with_bias,
                               std::vector<ProjectionSegment> segments) {
  const int64_t W = total_width(segments);
  return {segments, uniform({tokens, d}, dtype), uniform({W, d}, dtype, -0.5, 0.5), uniform({W}, dtype), with_bias};
}

std::vector<HostTensor> poisoned_per_segment(const ProjectionData& data, int64_t tokens,
                                             const std::vector<DType>& dtypes) {
  std::vector<HostTensor> out;
  for (size_t s = 0; s < data.segments.size(); ++s) out.push_back(poisoned({tokens, data.segments[s].width}, dtypes[s]));
  return out;
}

std::vector<Tensor> views(const std::vector<HostTensor>& tensors) {
  std::vector<Tensor> v;
  for (const auto& t : tensors) v.push_back(t.view);
  return v;
}

std::vector<HostTensor> run_projection(const ProjectionData& data, int64_t tokens, const std::vector<DType>& dtypes,
                                       Impl impl) {
  auto outputs = poisoned_per_segment(data, tokens, dtypes);
  ProjectionChainOptions options;
  options.impl = impl;
  projection_chain_forward(data.x, data.weight, data.bias_view(), data.segments, views(outputs), options);
  return outputs;
}

TEST(ProjectionChain, OracleMatchesHandComputedActivations) {
  // x = [1, −2]; rows of weight pick z = [1, −2, −1, 2, −1] (+ bias 0.5 on the last).
  HostTensor x({1, 2}, DType::f64), weight({5, 2}, DType::f64), bias({5}, DType::f64);
  x.set({1, -2});
  weight.set({1, 0, 0, 1, 1, 1, 1, 0, 0, 0.5});
  bias.set({0, 0, 0, 1, -0.5});
  const std::vector<ProjectionSegment> segments = {{1, Activation::identity}, {1, Activation::silu},
                                                   {1, Activation::sigmoid}, {1, Activation::logsigmoid, 4.0},
                                                   {1, Activation::softplus}};
  std::vector<HostTensor> out;
  for (int s = 0; s < 5; ++s) out.push_back(poisoned({1, 1}, DType::f64));
  projection_chain_forward(x, weight, bias.view, segments, views(out));
  EXPECT_DOUBLE_EQ(out[0].values()[0], 1.0);
  EXPECT_NEAR(out[1].values()[0], -2.0 / (1.0 + std::exp(2.0)), 1e-15);
  EXPECT_NEAR(out[2].values()[0], 1.0 / (1.0 + std::exp(1.0)), 1e-15);
  EXPECT_NEAR(out[3].values()[0], std::log(1.0 / (1.0 + std::exp(-2.0))) / 4.0, 1e-15);
  EXPECT_NEAR(out[4].values()[0], std::log(1.0 + std::exp(-1.5)), 1e-15);
}

TEST(ProjectionChain, ActivationsStayFiniteForLargePreActivations) {
  HostTensor x({1, 1}, DType::f32), weight({4, 1}, DType::f32);
  x.set({1});
  weight.set({200, -200, 200, -200});
  const std::vector<ProjectionSegment> segments = {{2, Activation::logsigmoid, 2.0}, {2, Activation::softplus}};
  for (Impl impl : {Impl::reference, Impl::fast}) {
    std::vector<HostTensor> out;
    for (int s = 0; s < 2; ++s) out.push_back(poisoned({1, 2}, DType::f32));
    ProjectionChainOptions options;
    options.impl = impl;
    projection_chain_forward(x, weight, std::nullopt, segments, views(out), options);
    EXPECT_NEAR(out[0].values()[0], 0.0, 1e-30);
    EXPECT_NEAR(out[0].values()[1], -100.0, 1e-4);
    EXPECT_NEAR(out[1].values()[0], 200.0, 1e-4);
    EXPECT_NEAR(out[1].values()[1], 0.0, 1e-30);
  }
}

class ProjectionChainCases : public ::testing::TestWithParam<ProjectionCase> {};

TEST_P(ProjectionChainCases, FastForwardMatchesOracle) {
  const ProjectionCase c = GetParam();
  const auto data = make_projection(c.tokens, c.d, c.dtype, c.with_bias, all_activations());
  auto fast = run_projection(data, c.tokens, c.out_dtypes, Impl::fast);
  auto ref = run_projection(data, c.tokens, c.out_dtypes, Impl::reference);
  for (size_t s = 0; s < fast.size(); ++s)
    EXPECT_LT(rel_err(fast[s], ref[s]), tolerance(c.out_dtypes[s])) << "segment " << s;
}

TEST_P(ProjectionChainCases, FastBackwardMatchesOracle) {
  const ProjectionCase c = GetParam();
  const auto data = make_projection(c.tokens, c.d, c.dtype, c.with_bias, all_activations());
  std::vector<HostTensor> dy;
  for (size_t s = 0; s < data.segments.size(); ++s) dy.push_back(uniform({c.tokens, data.segments[s].width}, c.out_dtypes[s]));
  const int64_t W = total_width(data.segments);
  auto run = [&](Impl impl) {
    std::vector<HostTensor> g;
    g.push_back(poisoned({c.tokens, c.d}, c.dtype));
    g.push_back(poisoned({W, c.d}, c.dtype));
    g.push_back(poisoned({W}, c.dtype));
    ProjectionChainGrads grads{g[0].view, g[1].view};
    if (c.with_bias) grads.dbias = g[2].view;
    ProjectionChainOptions options;
    options.impl = impl;
    projection_chain_backward(data.x, data.weight, data.bias_view(), data.segments, views(dy), grads, options);
    return g;
  };
  auto fast = run(Impl::fast), ref = run(Impl::reference);
  EXPECT_LT(rel_err(fast[0], ref[0]), tolerance(c.dtype)) << "dx";
  EXPECT_LT(rel_err(fast[1], ref[1]), tolerance(c.dtype)) << "dweight";
  if (c.with_bias) EXPECT_LT(rel_err(fast[2], ref[2]), tolerance(c.dtype)) << "dbias";
}

const std::vector<DType> kAllF32(5, DType::f32);
const std::vector<DType> kMixed = {DType::bf16, DType::f32, DType::bf16, DType::f32, DType::bf16};
const std::vector<DType> kAllBf16(5, DType::bf16);

INSTANTIATE_TEST_SUITE_P(Cases, ProjectionChainCases,
                         ::testing::Values(ProjectionCase{1, 37, DType::f32, true, kAllF32},
                                           ProjectionCase{7, 37, DType::f32, false, kMixed},
                                           ProjectionCase{100, 37, DType::f32, true, kAllF32},
                                           ProjectionCase{1, 16, DType::bf16, false, kAllBf16},
                                           ProjectionCase{7, 37, DType::bf16, true, kMixed},
                                           ProjectionCase{100, 130, DType::bf16, true, kAllF32}));

TEST(ProjectionChain, WritesIntoColumnSlicesOfAWiderBuffer) {
  // Two segments written into the two halves of one [tokens, 2·width] buffer in swapped order.
  const int64_t tokens = 9, d = 11, width = 40;
  const auto data = make_projection(tokens, d, DType::f32, true,
                                    {{width, Activation::silu}, {width, Activation::logsigmoid, 8.0}});
  auto ref = run_projection(data, tokens, {DType::f32, DType::f32}, Impl::reference);
  for (Impl impl : {Impl::fast, Impl::reference}) {
    HostTensor wide = poisoned({tokens, 2 * width}, DType::f32);
    Tensor right = wide.view, left = wide.view;
    right.shape = left.shape = {tokens, width};
    right.data = static_cast<float*>(wide.view.data) + width;
    ProjectionChainOptions options;
    options.impl = impl;
    projection_chain_forward(data.x, data.weight, data.bias_view(), data.segments, {right, left}, options);
    const auto all = wide.values();
    std::vector<double> got_first, got_second;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < width; ++j) {
        got_second.push_back(all[t * 2 * width + j]);
        got_first.push_back(all[t * 2 * width + width + j]);
      }
    EXPECT_LT(rel_err(got_first, ref[0].values()), 1e-5);
    EXPECT_LT(rel_err(got_second, ref[1].values()), 1e-5);
  }
}

class ProjectionChainGradients : public ::testing::TestWithParam<bool> {};

TEST_P(ProjectionChainGradients, OracleMatchesFiniteDifferences) {
  const bool with_bias = GetParam();
  const int64_t tokens = 3, d = 4;
  auto data = make_projection(tokens, d, DType::f64, with_bias,
                              {{2, Activation::identity}, {2, Activation::silu}, {2, Activation::sigmoid},
                               {2, Activation::logsigmoid, 4.0}, {2, Activation::softplus}});
  std::vector<HostTensor> weights;
  for (const auto& s : data.segments) weights.push_back(uniform({tokens, s.width}, DType::f64));
  const std::vector<DType> f64(data.segments.size(), DType::f64);
  auto loss = [&] {
    auto out = run_projection(data, tokens, f64, Impl::reference);
    double sum = 0;
    for (size_t s = 0; s < out.size(); ++s) sum += dot(out[s].values(), weights[s].values());
    return sum;
  };
  const int64_t W = total_width(data.segments);
  HostTensor dx = poisoned({tokens, d}, DType::f64), dw = poisoned({W, d}, DType::f64), db = poisoned({W}, DType::f64);
  ProjectionChainGrads grads{dx.view, dw.view};
  if (with_bias) grads.dbias = db.view;
  ProjectionChainOptions options;
  options.impl = Impl::reference;
  projection_chain_backward(data.x, data.weight, data.bias_view(), data.segments, views(weights), grads, options);
  EXPECT_LT(rel_err(dx.values(), finite_difference(data.x, loss)), 1e-7);
  EXPECT_LT(rel_err(dw.values(), finite_difference(data.weight, loss)), 1e-7);
  if (with_bias) EXPECT_LT(rel_err(db.values(), finite_difference(data.bias, loss)), 1e-7);
}

INSTANTIATE_TEST_SUITE_P(Bias, ProjectionChainGradients, ::testing::Values(true, false));

// ---------------------------------------------------------------- output chain

struct OutputCase {
  std::vector<int64_t> leading;  // [tokens] or [B, T]
  int64_t H, Dv, d_out;
  DType dtype;
};

struct OutputData {
  HostTensor o, g, norm_weight, out_weight;
  OutputChainInputs inputs() const { return {o, g, norm_weight, out_weight}; }
};

std::vector<int64_t> with_dims(std::vector<int64_t> leading, std::initializer_list<int64_t> dims) {
  leading.insert(leading.end(), dims);
  return leading;
}

OutputData make_output(const OutputCase& c) {
  return {uniform(with_dims(c.leading, {c.H, c.Dv}), c.dtype, -2, 2), uniform(with_dims(c.leading, {c.H, c.Dv}), c.dtype, -3, 3),
          uniform({c.Dv}, c.dtype, 0.5, 1.5), uniform({c.d_out, c.H * c.Dv}, c.dtype, -0.3, 0.3)};
}

HostTensor run_output(const OutputCase& c, const OutputData& data, Impl impl, double eps = 1e-5) {
  HostTensor y = poisoned(with_dims(c.leading, {c.d_out}), c.dtype);
  OutputChainOptions options;
  options.impl = impl;
  options.eps = eps;
  output_chain_forward(data.inputs(), y, options);
  return y;
}

TEST(OutputChain, OracleMatchesHandComputedValues) {
  // One token, one head, Dv = 2: o = [3, 4] has mean square 12.5.
  OutputCase c{{1}, 1, 2, 2, DType::f64};
  OutputData data{HostTensor({1, 1, 2}, DType::f64), HostTensor({1, 1, 2}, DType::f64), HostTensor({2}, DType::f64),
                  HostTensor({2, 2}, DType::f64)};
  data.o.set({3, 4});
  data.g.set({1, -1});
  data.norm_weight.set({2, 0.5});
  data.out_weight.set({1, 0, 1, -1});
  const double eps = 0.5, r = 1 / std::sqrt(12.5 + eps);
  const double u0 = 3 * r * 2 * (1 / (1 + std::exp(-1.0))), u1 = 4 * r * 0.5 * (-1 / (1 + std::exp(1.0)));
  const auto y = run_output(c, data, Impl::reference, eps).values();
  EXPECT_NEAR(y[0], u0, 1e-15);
  EXPECT_NEAR(y[1], u0 - u1, 1e-15);
}

class OutputChainCases : public ::testing::TestWithParam<OutputCase> {};

TEST_P(OutputChainCases, FastForwardMatchesOracle) {
  const OutputCase c = GetParam();
  const auto data = make_output(c);
  EXPECT_LT(rel_err(run_output(c, data, Impl::fast), run_output(c, data, Impl::reference)), tolerance(c.dtype));
}

TEST_P(OutputChainCases, FastBackwardMatchesOracle) {
  const OutputCase c = GetParam();
  const auto data = make_output(c);
  HostTensor dy = uniform(with_dims(c.leading, {c.d_out}), c.dtype);
  auto run = [&](Impl impl) {
    std::vector<HostTensor> g;
    g.push_back(poisoned(data.o.view.shape, c.dtype));
    g.push_back(poisoned(data.g.view.shape, c.dtype));
    g.push_back(poisoned({c.Dv}, c.dtype));
    g.push_back(poisoned({c.d_out, c.H * c.Dv}, c.dtype));
    OutputChainOptions options;
    options.impl = impl;
    output_chain_backward(data.inputs(), dy, {g[0].view, g[1].view, g[2].view, g[3].view}, options);
    return g;
  };
  auto fast = run(Impl::fast), ref = run(Impl::reference);
  const char* names[] = {"do", "dg", "dnorm_weight", "dout_weight"};
  for (int i = 0; i < 4; ++i) EXPECT_LT(rel_err(fast[i], ref[i]), tolerance(c.dtype)) << names[i];
}

INSTANTIATE_TEST_SUITE_P(Cases, OutputChainCases,
                         ::testing::Values(OutputCase{{1}, 3, 20, 70, DType::f32},
                                           OutputCase{{7}, 3, 20, 70, DType::f32},
                                           OutputCase{{100}, 2, 33, 65, DType::f32},
                                           OutputCase{{1}, 4, 16, 9, DType::bf16},
                                           OutputCase{{7}, 3, 20, 70, DType::bf16},
                                           OutputCase{{100}, 2, 33, 65, DType::bf16},
                                           OutputCase{{2, 5}, 3, 8, 17, DType::f32},
                                           OutputCase{{3, 4}, 2, 8, 11, DType::f16}));

TEST(OutputChain, OracleBackwardMatchesFiniteDifferences) {
  for (const OutputCase& c : {OutputCase{{3}, 2, 4, 5, DType::f64}, OutputCase{{2, 2}, 1, 3, 2, DType::f64}}) {
    auto data = make_output(c);
    HostTensor wy = uniform(with_dims(c.leading, {c.d_out}), DType::f64);
    auto loss = [&] { return dot(run_output(c, data, Impl::reference).values(), wy.values()); };
    HostTensor d_o = poisoned(data.o.view.shape, DType::f64), dg = poisoned(data.g.view.shape, DType::f64);
    HostTensor dw = poisoned({c.Dv}, DType::f64), dout = poisoned({c.d_out, c.H * c.Dv}, DType::f64);
    output_chain_backward(data.inputs(), wy, {d_o.view, dg.view, dw.view, dout.view});
    EXPECT_LT(rel_err(d_o.values(), finite_difference(data.o, loss)), 1e-7);
    EXPECT_LT(rel_err(dg.values(), finite_difference(data.g, loss)), 1e-7);
    EXPECT_LT(rel_err(dw.values(), finite_difference(data.norm_weight, loss)), 1e-7);
    EXPECT_LT(rel_err(dout.values(), finite_difference(data.out_weight, loss)), 1e-7);
  }
}

// ---------------------------------------------------------------- bad input

TEST(ProjectionChainErrors, EveryBadInputNamesTheArgument) {
  const std::vector<ProjectionSegment> segs = {{8, Activation::silu}, {4, Activation::logsigmoid, 16.0}};
  HostTensor x = uniform({5, 8}, DType::f32), w = uniform({12, 8}, DType::f32), b = uniform({12}, DType::f32);
  HostTensor y0({5, 8}, DType::f32), y1({5, 4}, DType::bf16);
  const std::vector<Tensor> out = {y0.view, y1.view};
  auto fwd = [&](const Tensor& x_, const Tensor& w_, std::optional<Tensor> b_, const std::vector<ProjectionSegment>& s_,
                 const std::vector<Tensor>& o_) { projection_chain_forward(x_, w_, b_, s_, o_); };
  const std::string op = "seqmix.projection_chain: ";

  HostTensor x_bf16 = uniform({5, 8}, DType::bf16), x_rank3 = uniform({1, 5, 8}, DType::f32);
  HostTensor x_int({5, 8}, DType::i32), x_empty({0, 8}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(x_bf16, w, std::nullopt, segs, out),
                      op + "argument 'weight': expected dtype bf16 (the dtype of x), got f32");
  EXPECT_SEQMIX_ERROR(fwd(x_int, w, std::nullopt, segs, out),
                      "argument 'x': expected dtype bf16 or f16 or f32 or f64, got int32");
  EXPECT_SEQMIX_ERROR(fwd(x_rank3, w, std::nullopt, segs, out),
                      "argument 'x': expected 2 dimensions [tokens, d], got 3 dimensions [1, 5, 8]");
  HostTensor y0_empty({0, 8}, DType::f32), y1_empty({0, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(x_empty, w, std::nullopt, segs, {y0_empty.view, y1_empty.view}),
                      "argument 'x': expected tokens >= 1, got tokens = 0");

  HostTensor w_narrow = uniform({12, 7}, DType::f32), w_rows = uniform({11, 8}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(x, w_narrow, std::nullopt, segs, out),
                      "argument 'weight': expected shape [12, 8] [W_total, d], got [12, 7]");
  EXPECT_SEQMIX_ERROR(fwd(x, w_rows, std::nullopt, segs, out),
                      "argument 'segments': expected widths summing to W_total = 11 (the rows of weight), "
                      "got widths summing to 12");

  HostTensor b_short = uniform({11}, DType::f32), b_f64 = uniform({12}, DType::f64);
  EXPECT_SEQMIX_ERROR(fwd(x, w, b_short.view, segs, out), "argument 'bias': expected shape [12] [W_total], got [11]");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b_f64.view, segs, out),
                      "argument 'bias': expected dtype f32 (the dtype of x), got f64");

  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, {}, {}), "argument 'segments': expected at least one segment, got none");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, {{12, Activation::silu}, {0, Activation::identity}}, out),
                      "argument 'segments[1]': expected width >= 1, got width = 0");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, {{8, Activation::silu}, {4, Activation::logsigmoid, -1.0}}, out),
                      "argument 'segments[1]': expected tau > 0, got tau = -1");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, {{8, Activation::logsigmoid, 0.0}, {4, Activation::identity}}, out),
                      "argument 'segments[0]': expected tau > 0, got tau = 0");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, {{8, Activation::silu, 2.0}, {4, Activation::identity}}, out),
                      "argument 'segments[0]': expected tau = 1 (tau divides logsigmoid only), "
                      "got tau = 2 with activation silu");

  HostTensor y1_wide({5, 3}, DType::f32), y1_int({5, 4}, DType::i64);
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, segs, {y0.view}),
                      "argument 'outputs': expected 2 tensors (one per segment), got 1 tensors");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, segs, {y0.view, y1_wide.view}),
                      "argument 'outputs[1]': expected shape [5, 4] [tokens, width], got [5, 3]");
  EXPECT_SEQMIX_ERROR(fwd(x, w, b.view, segs, {y0.view, y1_int.view}),
                      "argument 'outputs[1]': expected dtype bf16 or f16 or f32 or f64, got int64");

  Tensor x_strided = x.view;
  x_strided.shape = {5, 4};
  x_strided.strides = {8, 2};
  HostTensor w4 = uniform({12, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(x_strided, w4, std::nullopt, segs, out),
                      "argument 'x': expected stride 1 in the last dimension, got strides [8, 2]");
  Tensor w_gpu = w.view;
  w_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(fwd(x, w_gpu, std::nullopt, segs, out),
                      "argument 'weight': expected device cpu (the device of the first input), got cuda:0");
  Tensor y0_gpu = y0.view;
  y0_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(fwd(x, w, std::nullopt, segs, {y0_gpu, y1.view}),
                      "argument 'outputs[0]': expected device cpu (the device of the first input), got cuda:0");
  Tensor x_gpu = x.view, w_gpu0 = w.view, y1_gpu = y1.view;
  x_gpu.device = w_gpu0.device = y1_gpu.device = Device::cuda(0);
  // CUDA tensors reach the CUDA path's own checks (tests/cpp/test_chains_cuda.cpp), or
  // are refused when this build has no CUDA kernels for the chains.
#ifdef SEQMIX_CUDA_CHAINS
  EXPECT_SEQMIX_ERROR(fwd(x_gpu, w_gpu0, std::nullopt, segs, {y0_gpu, y1_gpu}),
                      "argument 'weight': expected W_total a multiple of 8 on a CUDA device, got W_total = 12");
#else
  EXPECT_SEQMIX_ERROR(fwd(x_gpu, w_gpu0, std::nullopt, segs, {y0_gpu, y1_gpu}),
                      "argument 'x': expected a CPU tensor (this build has no CUDA kernels for the chains; see "
                      "SEQMIX_CUDA_KERNELS), got cuda:0");
#endif
}

TEST(ProjectionChainErrors, BackwardChecksGradients) {
  const std::vector<ProjectionSegment> segs = {{8, Activation::silu}, {4, Activation::softplus}};
  HostTensor x = uniform({5, 8}, DType::f32), w = uniform({12, 8}, DType::f32), b = uniform({12}, DType::f32);
  HostTensor dy0 = uniform({5, 8}, DType::bf16), dy1 = uniform({5, 4}, DType::f32);
  HostTensor dx({5, 8}, DType::f32), dw({12, 8}, DType::f32), db({12}, DType::f32);
  HostTensor dx_bf16({5, 8}, DType::bf16), dw_short({11, 8}, DType::f32), dy1_short({4, 4}, DType::f32);
  const std::vector<Tensor> dy = {dy0.view, dy1.view};
  const std::string op = "seqmix.projection_chain_backward: ";
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, b.view, segs, dy, {dx.view, dw.view}),
                      op + "argument 'dbias': expected a tensor (bias is given), got none");
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, std::nullopt, segs, dy, {dx.view, dw.view, db.view}),
                      "argument 'dbias': expected none (bias is not given), got a tensor");
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, std::nullopt, segs, dy, {dx_bf16.view, dw.view}),
                      "argument 'dx': expected dtype f32 (the dtype of x), got bf16");
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, std::nullopt, segs, dy, {dx.view, dw_short.view}),
                      "argument 'dweight': expected shape [12, 8] [W_total, d], got [11, 8]");
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, std::nullopt, segs, {dy0.view, dy1_short.view}, {dx.view, dw.view}),
                      "argument 'd_outputs[1]': expected shape [5, 4] [tokens, width], got [4, 4]");
  EXPECT_SEQMIX_ERROR(projection_chain_backward(x, w, std::nullopt, segs, {dy0.view}, {dx.view, dw.view}),
                      "argument 'd_outputs': expected 2 tensors (one per segment), got 1 tensors");
}

TEST(ProjectionChainErrors, ActivationNamesParse) {
  EXPECT_EQ(parse_activation("logsigmoid"), Activation::logsigmoid);
  EXPECT_STREQ(activation_name(Activation::softplus), "softplus");
  EXPECT_SEQMIX_ERROR(parse_activation("gelu"),
                      "activation: expected identity, silu, sigmoid, logsigmoid or softplus, got 'gelu'");
}

TEST(OutputChainErrors, EveryBadInputNamesTheArgument) {
  HostTensor o = uniform({5, 2, 4}, DType::f32), g = uniform({5, 2, 4}, DType::f32);
  HostTensor nw = uniform({4}, DType::f32), ow = uniform({6, 8}, DType::f32), y({5, 6}, DType::f32);
  const std::string op = "seqmix.output_chain: ";
  auto fwd = [&](const Tensor& o_, const Tensor& g_, const Tensor& nw_, const Tensor& ow_, const Tensor& y_,
                 double eps = 1e-5) {
    OutputChainOptions options;
    options.eps = eps;
    output_chain_forward({o_, g_, nw_, ow_}, y_, options);
  };
  HostTensor o_rank2 = uniform({5, 8}, DType::f32), g_short = uniform({5, 2, 3}, DType::f32);
  HostTensor g_bf16 = uniform({5, 2, 4}, DType::bf16), nw_short = uniform({3}, DType::f32);
  HostTensor ow_narrow = uniform({6, 7}, DType::f32), y_wide({5, 7}, DType::f32), y_bf16({5, 6}, DType::bf16);
  EXPECT_SEQMIX_ERROR(fwd(o_rank2, g, nw, ow, y),
                      op + "argument 'o': expected 3 dimensions [tokens, H, Dv] (or 4 dimensions [B, T, H, Dv]), "
                           "got 2 dimensions [5, 8]");
  EXPECT_SEQMIX_ERROR(fwd(o, g_short, nw, ow, y), "argument 'g': expected shape [5, 2, 4] [tokens, H, Dv], got [5, 2, 3]");
  EXPECT_SEQMIX_ERROR(fwd(o, g_bf16, nw, ow, y), "argument 'g': expected dtype f32 (the dtype of o), got bf16");
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw_short, ow, y), "argument 'norm_weight': expected shape [4] [Dv], got [3]");
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw, ow_narrow, y),
                      "argument 'out_weight': expected shape [6, 8] [d_out, H·Dv], got [6, 7]");
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw, ow, y_wide), "argument 'y': expected shape [5, 6] [tokens, d_out], got [5, 7]");
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw, ow, y_bf16), "argument 'y': expected dtype f32 (the dtype of o), got bf16");
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw, ow, y, 0.0), "argument 'eps': expected eps > 0, got eps = 0");

  HostTensor o_empty({0, 2, 4}, DType::f32), g_empty({0, 2, 4}, DType::f32), y_empty({0, 6}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(o_empty, g_empty, nw, ow, y_empty), "argument 'o': expected tokens >= 1, got tokens = 0");
  HostTensor o4_empty({2, 0, 2, 4}, DType::f32), g4_empty({2, 0, 2, 4}, DType::f32), y3_empty({2, 0, 6}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(o4_empty, g4_empty, nw, ow, y3_empty),
                      "argument 'o': expected tokens B·T >= 1, got tokens B·T = 0");
  HostTensor o4 = uniform({1, 5, 2, 4}, DType::f32), g4 = uniform({1, 5, 2, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(o4, g4, nw, ow, y), "argument 'y': expected 3 dimensions [B, T, d_out], got 2 dimensions [5, 6]");
  EXPECT_SEQMIX_ERROR(fwd(o4, g, nw, ow, y), "argument 'g': expected 4 dimensions [B, T, H, Dv], got 3 dimensions");

  Tensor g_strided = g.view;
  g_strided.strides = {8, 4, 2};
  g_strided.shape = {5, 2, 4};
  EXPECT_SEQMIX_ERROR(fwd(o, g_strided, nw, ow, y), "argument 'g': expected stride 1 in the last dimension");
  Tensor ow_gpu = ow.view;
  ow_gpu.device = Device::cuda(1);
  EXPECT_SEQMIX_ERROR(fwd(o, g, nw, ow_gpu, y),
                      "argument 'out_weight': expected device cpu (the device of the first input), got cuda:1");
}

TEST(OutputChainErrors, BackwardChecksGradients) {
  HostTensor o = uniform({5, 2, 4}, DType::f32), g = uniform({5, 2, 4}, DType::f32);
  HostTensor nw = uniform({4}, DType::f32), ow = uniform({6, 8}, DType::f32), dy = uniform({5, 6}, DType::f32);
  HostTensor d_o({5, 2, 4}, DType::f32), dg({5, 2, 4}, DType::f32), dnw({4}, DType::f32), dow({6, 8}, DType::f32);
  HostTensor dnw_long({5}, DType::f32), dy_bf16({5, 6}, DType::bf16), dg_f64({5, 2, 4}, DType::f64);
  const OutputChainInputs in{o, g, nw, ow};
  EXPECT_SEQMIX_ERROR(output_chain_backward(in, dy_bf16, {d_o, dg, dnw, dow}),
                      "seqmix.output_chain_backward: argument 'dy': expected dtype f32 (the dtype of o), got bf16");
  EXPECT_SEQMIX_ERROR(output_chain_backward(in, dy, {d_o, dg, dnw_long, dow}),
                      "argument 'dnorm_weight': expected shape [4] [Dv], got [5]");
  EXPECT_SEQMIX_ERROR(output_chain_backward(in, dy, {d_o, dg_f64, dnw, dow}),
                      "argument 'dg': expected dtype f32 (the dtype of o), got f64");
}

}  // namespace
}  // namespace seqmix::test
