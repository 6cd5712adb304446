#include "seqmix/gla.hpp"

#include <cmath>

#include "test_util.hpp"

namespace seqmix::test {
namespace {

struct GlaCase {
  int64_t B, T, H, K, V;
  DType dtype;
  bool with_state;
  double g_lo, g_hi;        // log decays drawn uniformly from [g_lo, g_hi)
  std::vector<int64_t> cu;  // non-empty: variable length with these offsets (B = 1)
};

struct GlaData {
  HostTensor q, k, v, g, h0, cu;
  int64_t N;
  GlaInputs inputs(const GlaCase& c) const {
    GlaInputs in{q, k, v, g};
    if (c.with_state) in.initial_state = h0.view;
    if (!c.cu.empty()) in.cu_seqlens = cu.view;
    return in;
  }
};

DType state_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

GlaData make_data(const GlaCase& c) {
  const int64_t N = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  return {uniform({c.B, c.T, c.H, c.K}, c.dtype),
          uniform({c.B, c.T, c.H, c.K}, c.dtype),
          uniform({c.B, c.T, c.H, c.V}, c.dtype),
          uniform({c.B, c.T, c.H, c.K}, c.dtype, c.g_lo, c.g_hi),
          uniform({N, c.H, c.K, c.V}, state_dtype(c.dtype)),
          offsets(c.cu.empty() ? std::vector<int64_t>{0, 1} : c.cu),
          N};
}

GlaOptions options_for(const GlaCase& c, Impl impl) {
  GlaOptions options;
  options.impl = impl;
  options.scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  return options;
}

struct ForwardResult {
  HostTensor o, hT;
};

ForwardResult run_forward(const GlaCase& c, const GlaData& d, Impl impl) {
  ForwardResult r{poisoned({c.B, c.T, c.H, c.V}, c.dtype), poisoned({d.N, c.H, c.K, c.V}, state_dtype(c.dtype))};
  gla_forward(d.inputs(c), {r.o.view, r.hT.view}, options_for(c, impl));
  return r;
}

// Chunks are 64 tokens with 16-token sub-chunks: T = 1, 63, 100 and the varlen offsets
// leave partial chunks and sub-chunks, and sequences that start mid-chunk.
const auto kForwardCases = ::testing::Values(
    GlaCase{2, 63, 2, 16, 8, DType::f32, true, -1.0, -0.01, {}},
    GlaCase{1, 1, 3, 8, 32, DType::f32, false, -1.0, -0.01, {}},
    GlaCase{2, 100, 2, 8, 32, DType::f32, true, -1e-3, 0.0, {}},
    GlaCase{1, 100, 2, 16, 8, DType::f32, true, -20.0, -15.0, {}},
    GlaCase{1, 130, 2, 8, 8, DType::f32, true, -20.0, -1e-3, {}},
    GlaCase{2, 100, 2, 16, 8, DType::bf16, true, -0.5, -0.01, {}},
    GlaCase{1, 63, 2, 8, 32, DType::f16, true, -1e-3, 0.0, {}},
    GlaCase{1, 150, 2, 16, 8, DType::f32, true, -1.0, -0.01, {0, 1, 17, 80, 150}},
    GlaCase{1, 130, 1, 8, 32, DType::bf16, true, -20.0, -1e-3, {0, 63, 64, 130}});

class GlaForward : public ::testing::TestWithParam<GlaCase> {};

TEST_P(GlaForward, FastMatchesOracle) {
  const GlaCase c = GetParam();
  GlaData d = make_data(c);
  auto fast = run_forward(c, d, Impl::fast);
  auto ref = run_forward(c, d, Impl::reference);
  EXPECT_LT(rel_err(fast.o, ref.o), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast.hT, ref.hT), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Cases, GlaForward, kForwardCases);

TEST(Gla, OracleMatchesHandComputedValues) {
  // K = V = 1, two steps with decays 0.5 and 0.25, S_0 = 1:
  //   S_1 = 0.5·1 + 1·2 = 2.5, o_1 = 2·1·2.5 = 5;  S_2 = 0.25·2.5 + 1·1 = 1.625, o_2 = 2·2·1.625 = 6.5.
  HostTensor q({1, 2, 1, 1}, DType::f64), k({1, 2, 1, 1}, DType::f64), v({1, 2, 1, 1}, DType::f64),
      g({1, 2, 1, 1}, DType::f64), h0({1, 1, 1, 1}, DType::f64);
  q.set({1.0, 2.0});
  k.set({1.0, 1.0});
  v.set({2.0, 1.0});
  g.set({std::log(0.5), std::log(0.25)});
  h0.set({1.0});
  HostTensor o = poisoned({1, 2, 1, 1}, DType::f64), hT = poisoned({1, 1, 1, 1}, DType::f64);
  GlaOptions options;
  options.scale = 2.0;
  gla_forward({q, k, v, g, h0.view}, {o.view, hT.view}, options);
  EXPECT_NEAR(o.values()[0], 5.0, 1e-14);
  EXPECT_NEAR(o.values()[1], 6.5, 1e-14);
  EXPECT_NEAR(hT.values()[0], 1.625, 1e-14);
}

TEST(Gla, KeyChannelsDecayIndependently) {
  // K = 2, V = 1, one token after S_0 = [1, 1]ᵀ with k = 0: each key channel keeps its own
  // decay, o = q_0·e^{g_0} + q_1·e^{g_1}.
  HostTensor q({1, 1, 1, 2}, DType::f64), k({1, 1, 1, 2}, DType::f64), v({1, 1, 1, 1}, DType::f64),
      g({1, 1, 1, 2}, DType::f64), h0({1, 1, 2, 1}, DType::f64);
  q.set({3.0, 5.0});
  k.set({0.0, 0.0});
  v.set({1.0});
  g.set({std::log(0.5), std::log(0.1)});
  h0.set({1.0, 1.0});
  for (Impl impl : {Impl::reference, Impl::fast}) {
    HostTensor o = poisoned({1, 1, 1, 1}, DType::f64);
    GlaOptions options;
    options.impl = impl;
    gla_forward({q, k, v, g, h0.view}, {o.view}, options);
    EXPECT_NEAR(o.values()[0], 3.0 * 0.5 + 5.0 * 0.1, 1e-6) << impl_name(impl);
  }
}

struct GradResult {
  std::vector<HostTensor> grads;  // dq, dk, dv, dg, d_initial_state
};

GradResult run_backward(const GlaCase& c, const GlaData& d, const HostTensor& d_o, const HostTensor& dhT,
                        Impl impl) {
  GradResult r;
  for (int i = 0; i < 2; ++i) r.grads.push_back(poisoned({c.B, c.T, c.H, c.K}, c.dtype));
  r.grads.push_back(poisoned({c.B, c.T, c.H, c.V}, c.dtype));
  r.grads.push_back(poisoned({c.B, c.T, c.H, c.K}, c.dtype));
  r.grads.push_back(poisoned({d.N, c.H, c.K, c.V}, state_dtype(c.dtype)));
  GlaGrads grads{r.grads[0].view, r.grads[1].view, r.grads[2].view, r.grads[3].view};
  if (c.with_state) grads.d_initial_state = r.grads[4].view;
  gla_backward(d.inputs(c), d_o, dhT.view, grads, options_for(c, impl));
  return r;
}

class GlaBackward : public ::testing::TestWithParam<GlaCase> {};

TEST_P(GlaBackward, OracleMatchesFiniteDifferences) {
  GlaCase c = GetParam();
  c.dtype = DType::f64;
  GlaData d = make_data(c);
  HostTensor wo = uniform({c.B, c.T, c.H, c.V}, DType::f64), ws = uniform({d.N, c.H, c.K, c.V}, DType::f64);
  // The loss reads the final state too, so dL/dS_T enters the backward.
  auto loss = [&] {
    HostTensor o({c.B, c.T, c.H, c.V}, DType::f64), hT({d.N, c.H, c.K, c.V}, DType::f64);
    gla_forward(d.inputs(c), {o.view, hT.view}, options_for(c, Impl::reference));
    return dot(o.values(), wo.values()) + dot(hT.values(), ws.values());
  };
  auto r = run_backward(c, d, wo, ws, Impl::reference);
  EXPECT_LT(rel_err(r.grads[0].values(), finite_difference(d.q, loss)), 1e-7);
  EXPECT_LT(rel_err(r.grads[1].values(), finite_difference(d.k, loss)), 1e-7);
  EXPECT_LT(rel_err(r.grads[2].values(), finite_difference(d.v, loss)), 1e-7);
  EXPECT_LT(rel_err(r.grads[3].values(), finite_difference(d.g, loss)), 1e-7);
  if (c.with_state) EXPECT_LT(rel_err(r.grads[4].values(), finite_difference(d.h0, loss)), 1e-7);
}

void expect_fast_backward_matches_oracle(const GlaCase& c) {
  GlaData d = make_data(c);
  HostTensor d_o = uniform({c.B, c.T, c.H, c.V}, c.dtype), dhT = uniform({d.N, c.H, c.K, c.V}, DType::f32);
  auto fast = run_backward(c, d, d_o, dhT, Impl::fast);
  auto ref = run_backward(c, d, d_o, dhT, Impl::reference);
  const char* names[] = {"dq", "dk", "dv", "dg"};
  for (int i = 0; i < 4; ++i) EXPECT_LT(rel_err(fast.grads[i], ref.grads[i]), tolerance(c.dtype)) << names[i];
  if (c.with_state) EXPECT_LT(rel_err(fast.grads[4], ref.grads[4]), 1e-5) << "d_initial_state";
}

TEST_P(GlaBackward, FastMatchesOracle) { expect_fast_backward_matches_oracle(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Small, GlaBackward,
    ::testing::Values(GlaCase{2, 5, 2, 3, 2, DType::f32, true, -1.0, -0.01, {}},
                      GlaCase{1, 7, 1, 2, 4, DType::f32, true, -2.0, -0.01, {0, 2, 7}},
                      GlaCase{1, 4, 2, 4, 1, DType::f32, false, -1e-3, 0.0, {}}));

// The forward cases, fast against oracle only: too large for finite differences.
class GlaBackwardFast : public ::testing::TestWithParam<GlaCase> {};
TEST_P(GlaBackwardFast, FastMatchesOracle) { expect_fast_backward_matches_oracle(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cases, GlaBackwardFast, kForwardCases);

TEST(GlaErrors, EveryBadInputNamesTheArgument) {
  HostTensor q = uniform({2, 8, 2, 4}, DType::f32), k = uniform({2, 8, 2, 4}, DType::f32),
             v = uniform({2, 8, 2, 3}, DType::f32), g = uniform({2, 8, 2, 4}, DType::f32, -1, 0);
  HostTensor o({2, 8, 2, 3}, DType::f32), hT({2, 2, 4, 3}, DType::f32);
  auto fwd = [&](GlaInputs in) { gla_forward(in, {o.view, hT.view}); };

  HostTensor k_bf16 = uniform({2, 8, 2, 4}, DType::bf16), k_short = uniform({2, 7, 2, 4}, DType::f32);
  HostTensor q_rank3 = uniform({2, 8, 8}, DType::f32), q_int({2, 8, 2, 4}, DType::i32);
  HostTensor v_heads = uniform({2, 8, 3, 3}, DType::f32), v_f64 = uniform({2, 8, 2, 3}, DType::f64);
  HostTensor g_wide = uniform({2, 8, 2, 5}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd({q, k_bf16, v, g}),
                      "seqmix.chunk_gla: argument 'k': expected dtype f32 (the dtype of q), got bf16");
  EXPECT_SEQMIX_ERROR(fwd({q, k_short, v, g}),
                      "seqmix.chunk_gla: argument 'k': expected shape [2, 8, 2, 4] [B, T, H, K], got [2, 7, 2, 4]");
  EXPECT_SEQMIX_ERROR(fwd({q_rank3, k, v, g}),
                      "argument 'q': expected 4 dimensions [B, T, H, K], got 3 dimensions [2, 8, 8]");
  EXPECT_SEQMIX_ERROR(fwd({q_int, k, v, g}), "argument 'q': expected dtype bf16 or f16 or f32 or f64, got int32");
  EXPECT_SEQMIX_ERROR(fwd({q, k, v_heads, g}),
                      "argument 'v': expected shape [2, 8, 2, 3] [B, T, H, V], got [2, 8, 3, 3]");
  EXPECT_SEQMIX_ERROR(fwd({q, k, v_f64, g}), "argument 'v': expected dtype f32 (the dtype of q), got f64");
  EXPECT_SEQMIX_ERROR(fwd({q, k, v, g_wide}),
                      "argument 'g': expected shape [2, 8, 2, 4] [B, T, H, K], got [2, 8, 2, 5]");

  HostTensor q_no_heads({2, 8, 0, 4}, DType::f32), q_no_keys({2, 8, 2, 0}, DType::f32);
  HostTensor v_no_values({2, 8, 2, 0}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd({q_no_heads, k, v, g}), "argument 'q': expected heads H >= 1, got heads H = 0");
  EXPECT_SEQMIX_ERROR(fwd({q_no_keys, k, v, g}),
                      "argument 'q': expected key dimension K >= 1, got key dimension K = 0");
  EXPECT_SEQMIX_ERROR(fwd({q, k, v_no_values, g}),
                      "argument 'v': expected value dimension V >= 1, got value dimension V = 0");

  HostTensor q_empty({2, 0, 2, 4}, DType::f32), k_empty({2, 0, 2, 4}, DType::f32), g_empty({2, 0, 2, 4}, DType::f32),
      v_empty({2, 0, 2, 3}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd({q_empty, k_empty, v_empty, g_empty}),
                      "argument 'T': expected sequence length T >= 1, got sequence length T = 0");

  Tensor strided = k.view;
  strided.strides = {64, 8, 4, 2};
  EXPECT_SEQMIX_ERROR(fwd({q, strided, v, g}),
                      "argument 'k': expected stride 1 in the last dimension, got strides [64, 8, 4, 2]");
  Tensor on_gpu = v.view;
  on_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(fwd({q, k, on_gpu, g}),
                      "argument 'v': expected device cpu (the device of the first input), got cuda:0");
  Tensor null_g = g.view;
  null_g.data = nullptr;
  EXPECT_SEQMIX_ERROR(fwd({q, k, v, null_g}), "argument 'g': expected a non-null data pointer, got nullptr");

  HostTensor h0_bad = uniform({2, 2, 3, 4}, DType::f32), h0_bf16 = uniform({2, 2, 4, 3}, DType::bf16);
  EXPECT_SEQMIX_ERROR(fwd({q, k, v, g, h0_bad.view}),
                      "argument 'initial_state': expected shape [2, 2, 4, 3] [N, H, K, V], got [2, 2, 3, 4]");
  EXPECT_SEQMIX_ERROR(fwd({q, k, v, g, h0_bf16.view}),
                      "argument 'initial_state': expected dtype f32 or f64, got bf16");

  HostTensor o_short({2, 8, 2, 2}, DType::f32), o_bf16({2, 8, 2, 3}, DType::bf16), hT_bad({1, 2, 4, 3}, DType::f32);
  EXPECT_SEQMIX_ERROR(gla_forward({q, k, v, g}, {o_short.view}),
                      "argument 'o': expected shape [2, 8, 2, 3] [B, T, H, V], got [2, 8, 2, 2]");
  EXPECT_SEQMIX_ERROR(gla_forward({q, k, v, g}, {o_bf16.view}),
                      "argument 'o': expected dtype f32 (the dtype of q), got bf16");
  EXPECT_SEQMIX_ERROR(gla_forward({q, k, v, g}, {o.view, hT_bad.view}),
                      "argument 'final_state': expected shape [2, 2, 4, 3] [N, H, K, V], got [1, 2, 4, 3]");

  GlaOptions bad_scale;
  bad_scale.scale = std::nan("");
  EXPECT_SEQMIX_ERROR(gla_forward({q, k, v, g}, {o.view}, bad_scale), "argument 'scale': expected a finite number");
}

TEST(GlaErrors, BackwardChecksEveryGradient) {
  HostTensor q = uniform({1, 6, 2, 4}, DType::f32), k = uniform({1, 6, 2, 4}, DType::f32),
             v = uniform({1, 6, 2, 3}, DType::f32), g = uniform({1, 6, 2, 4}, DType::f32, -1, 0),
             h0 = uniform({1, 2, 4, 3}, DType::f32), d_o = uniform({1, 6, 2, 3}, DType::f32);
  HostTensor dq({1, 6, 2, 4}, DType::f32), dk({1, 6, 2, 4}, DType::f32), dv({1, 6, 2, 3}, DType::f32),
      dg({1, 6, 2, 4}, DType::f32), dh0({1, 2, 4, 3}, DType::f32);
  HostTensor wrong_keys({1, 6, 2, 3}, DType::f32), wrong_values({1, 6, 2, 4}, DType::f32);
  HostTensor dhT_bad({1, 2, 4, 4}, DType::f32), d_o_f16({1, 6, 2, 3}, DType::f16);
  const GlaInputs in{q, k, v, g};
  const GlaInputs with_state{q, k, v, g, h0.view};
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o_f16, std::nullopt, {dq, dk, dv, dg}),
                      "seqmix.chunk_gla_backward: argument 'do': expected dtype f32 (the dtype of q), got f16");
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o, dhT_bad.view, {dq, dk, dv, dg}),
                      "argument 'd_final_state': expected shape [1, 2, 4, 3] [N, H, K, V], got [1, 2, 4, 4]");
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o, std::nullopt, {dq, wrong_keys, dv, dg}),
                      "argument 'dk': expected shape [1, 6, 2, 4] [B, T, H, K], got [1, 6, 2, 3]");
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o, std::nullopt, {dq, dk, wrong_values, dg}),
                      "argument 'dv': expected shape [1, 6, 2, 3] [B, T, H, V], got [1, 6, 2, 4]");
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o, std::nullopt, {dq, dk, dv, wrong_keys}),
                      "argument 'dg': expected shape [1, 6, 2, 4] [B, T, H, K], got [1, 6, 2, 3]");
  EXPECT_SEQMIX_ERROR(gla_backward(with_state, d_o, std::nullopt, {dq, dk, dv, dg}),
                      "argument 'd_initial_state': expected a tensor (initial_state is given), got none");
  EXPECT_SEQMIX_ERROR(gla_backward(in, d_o, std::nullopt, {dq, dk, dv, dg, dh0.view}),
                      "argument 'd_initial_state': expected none (initial_state is not given), got a tensor");
}

// The chunk tables (GlaOutputs::chunk_states and chunk_scores, the same in GlaInputs): their
// shapes count the chunks of the longest sequence; only the CUDA kernels keep them, a forward
// takes them as outputs only, and the scores come only beside the states.
TEST(GlaErrors, ChunkStatesAreCheckedAndShaped) {
  HostTensor q = uniform({2, 130, 3, 4}, DType::f32), k = uniform({2, 130, 3, 4}, DType::f32),
             v = uniform({2, 130, 3, 5}, DType::f32), g = uniform({2, 130, 3, 4}, DType::f32, -1, 0);
  const GlaInputs in{q, k, v, g};
  EXPECT_EQ(gla_chunk_states_shape(in), (std::vector<int64_t>{2, 3, 3, 4, 5}));
  HostTensor q1 = uniform({1, 300, 1, 4}, DType::f32), k1 = uniform({1, 300, 1, 4}, DType::f32),
             v1 = uniform({1, 300, 1, 2}, DType::f32), g1 = uniform({1, 300, 1, 4}, DType::f32, -1, 0);
  HostTensor cu = offsets({0, 1, 129, 300});  // the longest sequence has 171 tokens: 3 chunks
  EXPECT_EQ(gla_chunk_states_shape({q1, k1, v1, g1, std::nullopt, cu.view}), (std::vector<int64_t>{3, 1, 3, 4, 2}));

  HostTensor o({2, 130, 3, 5}, DType::f32), table({2, 3, 3, 4, 5}, DType::f32);
  EXPECT_SEQMIX_ERROR(gla_forward(in, {o.view, std::nullopt, table.view}),
                      "seqmix.chunk_gla: argument 'chunk_states': expected none with CPU inputs (only the CUDA "
                      "kernels keep chunk tables), got a tensor");
  GlaInputs with_table = in;
  with_table.chunk_states = table.view;
  EXPECT_SEQMIX_ERROR(gla_forward(with_table, {o.view}),
                      "argument 'chunk_states': expected none in the forward's inputs (it is an output there)");
  HostTensor d_o = uniform({2, 130, 3, 5}, DType::f32), dq({2, 130, 3, 4}, DType::f32),
             dk({2, 130, 3, 4}, DType::f32), dv({2, 130, 3, 5}, DType::f32), dg({2, 130, 3, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(gla_backward(with_table, d_o, std::nullopt, {dq, dk, dv, dg}),
                      "seqmix.chunk_gla_backward: argument 'chunk_states': expected none with CPU inputs");

  EXPECT_EQ(gla_chunk_scores_shape(in), (std::vector<int64_t>{2, 3, 3, 64, 64}));
  EXPECT_EQ(gla_chunk_scores_shape({q1, k1, v1, g1, std::nullopt, cu.view}),
            (std::vector<int64_t>{3, 1, 3, 64, 64}));
  HostTensor scores({2, 3, 3, 64, 64}, DType::f32);
  GlaOutputs scores_alone{o.view};
  scores_alone.chunk_scores = scores.view;
  EXPECT_SEQMIX_ERROR(gla_forward(in, scores_alone),
                      "seqmix.chunk_gla: argument 'chunk_scores': expected none (chunk_states is not given), got a "
                      "tensor");
  GlaOutputs both{o.view, std::nullopt, table.view};
  both.chunk_scores = scores.view;
  EXPECT_SEQMIX_ERROR(gla_forward(in, both), "argument 'chunk_states': expected none with CPU inputs");
  GlaInputs with_scores = in;
  with_scores.chunk_scores = scores.view;
  EXPECT_SEQMIX_ERROR(gla_forward(with_scores, {o.view}),
                      "argument 'chunk_scores': expected none in the forward's inputs (it is an output there)");
  EXPECT_SEQMIX_ERROR(gla_backward(with_scores, d_o, std::nullopt, {dq, dk, dv, dg}),
                      "seqmix.chunk_gla_backward: argument 'chunk_scores': expected none (chunk_states is not "
                      "given), got a tensor");
}

TEST(GlaErrors, CuSeqlensIsValidated) {
  HostTensor q = uniform({1, 10, 1, 2}, DType::f32), k = uniform({1, 10, 1, 2}, DType::f32),
             v = uniform({1, 10, 1, 2}, DType::f32), g = uniform({1, 10, 1, 2}, DType::f32, -1, 0);
  HostTensor o({1, 10, 1, 2}, DType::f32);
  HostTensor decreasing = offsets({0, 6, 4, 10}), short_end = offsets({0, 4, 9}), empty_seq = offsets({0, 4, 4, 10});
  HostTensor not_zero = offsets({1, 10}), floats({3}, DType::f32), h0({2, 1, 2, 2}, DType::f32);
  HostTensor good = offsets({0, 3, 10}, DType::i64);
  auto with_cu = [&](const HostTensor& cu) { return GlaInputs{q, k, v, g, std::nullopt, cu.view}; };
  EXPECT_SEQMIX_ERROR(gla_forward(with_cu(decreasing), {o.view}),
                      "argument 'cu_seqlens': expected non-decreasing offsets, got cu_seqlens[2] = 4 < 6");
  EXPECT_SEQMIX_ERROR(gla_forward(with_cu(short_end), {o.view}),
                      "argument 'cu_seqlens': expected last offset equal to the total length 10, got 9");
  EXPECT_SEQMIX_ERROR(gla_forward(with_cu(empty_seq), {o.view}),
                      "argument 'cu_seqlens': expected no empty sequence, got sequence 1 of length 0");
  EXPECT_SEQMIX_ERROR(gla_forward(with_cu(not_zero), {o.view}),
                      "argument 'cu_seqlens': expected cu_seqlens[0] == 0, got 1");
  EXPECT_SEQMIX_ERROR(gla_forward(with_cu(floats), {o.view}),
                      "argument 'cu_seqlens': expected dtype int32 or int64, got f32");
  // Two sequences, so the state has N = 2, not B = 1.
  HostTensor h0_batch({1, 1, 2, 2}, DType::f32);
  EXPECT_SEQMIX_ERROR(gla_forward({q, k, v, g, h0_batch.view, good.view}, {o.view}),
                      "argument 'initial_state': expected shape [2, 1, 2, 2] [N, H, K, V], got [1, 1, 2, 2]");

  HostTensor q2 = uniform({2, 5, 1, 2}, DType::f32), k2 = uniform({2, 5, 1, 2}, DType::f32),
             v2 = uniform({2, 5, 1, 2}, DType::f32), g2 = uniform({2, 5, 1, 2}, DType::f32, -1, 0);
  HostTensor o2({2, 5, 1, 2}, DType::f32), cu = offsets({0, 5});
  EXPECT_SEQMIX_ERROR(gla_forward({q2, k2, v2, g2, std::nullopt, cu.view}, {o2.view}),
                      "expected batch size 1 when cu_seqlens is given, got batch size 2");
}

}  // namespace
}  // namespace seqmix::test
