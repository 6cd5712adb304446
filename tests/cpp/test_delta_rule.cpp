#include "seqmix/delta_rule.hpp"

#include <cmath>

#include "test_util.hpp"

namespace seqmix::test {
namespace {

struct DeltaCase {
  int64_t B, T, H, K, V;
  DType dtype;
  bool with_state, l2norm;
  std::vector<int64_t> cu;       // non-empty: variable length with these offsets (B = 1)
  double g_lo = -0.5, g_hi = -0.01;  // range of the log decays
  double scale = 0.0;            // 0: the default K^-0.5
};

struct DeltaData {
  HostTensor q, k, v, g, beta, h0, cu;
  int64_t N;
  DeltaRuleInputs inputs(const DeltaCase& c) const {
    DeltaRuleInputs in{q, k, v, g, beta};
    if (c.with_state) in.initial_state = h0.view;
    if (!c.cu.empty()) in.cu_seqlens = cu.view;
    return in;
  }
};

DType state_dtype(const DeltaCase& c) { return c.dtype == DType::f64 ? DType::f64 : DType::f32; }

DeltaData make_data(const DeltaCase& c) {
  const int64_t N = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  // Without the L2 norm keep ‖k‖² near 2/3 so β‖k‖² < 2 and the recurrence stays bounded
  // (the regime the layer is used in); with it, any scale of k will do.
  const double k_range = c.l2norm ? 1.0 : std::sqrt(2.0 / c.K);
  return {uniform({c.B, c.T, c.H, c.K}, c.dtype),
          uniform({c.B, c.T, c.H, c.K}, c.dtype, -k_range, k_range),
          uniform({c.B, c.T, c.H, c.V}, c.dtype),
          uniform({c.B, c.T, c.H}, c.dtype, c.g_lo, c.g_hi),
          uniform({c.B, c.T, c.H}, c.dtype, 0.02, 0.98),
          uniform({N, c.H, c.K, c.V}, state_dtype(c)),
          offsets(c.cu.empty() ? std::vector<int64_t>{0, 1} : c.cu),
          N};
}

DeltaRuleOptions options_for(const DeltaCase& c, Impl impl) {
  DeltaRuleOptions options;
  options.impl = impl;
  options.scale = c.scale;
  options.use_qk_l2norm = c.l2norm;
  return options;
}

struct ForwardResult {
  HostTensor o, hT;
};

ForwardResult run_forward(const DeltaCase& c, const DeltaData& d, Impl impl) {
  ForwardResult r{poisoned({c.B, c.T, c.H, c.V}, c.dtype), poisoned({d.N, c.H, c.K, c.V}, state_dtype(c))};
  delta_rule_forward(d.inputs(c), {r.o.view, r.hT.view}, options_for(c, impl));
  return r;
}

class DeltaRuleForward : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRuleForward, FastMatchesOracle) {
  const DeltaCase c = GetParam();
  DeltaData d = make_data(c);
  auto fast = run_forward(c, d, Impl::fast);
  auto ref = run_forward(c, d, Impl::reference);
  EXPECT_LT(rel_err(fast.o, ref.o), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast.hT, ref.hT), tolerance(DType::f32));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeltaRuleForward,
    ::testing::Values(DeltaCase{2, 63, 2, 16, 24, DType::f32, true, false, {}},
                      DeltaCase{1, 1, 3, 8, 8, DType::f32, false, true, {}},
                      DeltaCase{2, 100, 2, 16, 8, DType::f32, true, true, {}, -0.5, -0.01, 0.3},
                      DeltaCase{1, 100, 2, 32, 16, DType::bf16, true, true, {}},
                      DeltaCase{2, 63, 1, 8, 12, DType::f16, false, false, {}},
                      DeltaCase{1, 150, 2, 16, 16, DType::f32, true, true, {0, 1, 70, 135, 150}},
                      DeltaCase{1, 90, 2, 8, 16, DType::bf16, true, false, {0, 64, 65, 90}},
                      DeltaCase{1, 100, 2, 16, 16, DType::f32, true, true, {}, -1e-3, 0.0},
                      DeltaCase{1, 100, 2, 16, 16, DType::f32, true, true, {}, -20.0, -19.0},
                      DeltaCase{1, 70, 2, 16, 16, DType::f32, true, false, {}, -20.0, 0.0}));

TEST(DeltaRule, OracleMatchesHandComputedValues) {
  // K = V = 1, scale 1, S_0 = 1:
  //   t = 1: k = 1, β = 0.5, g = log 0.5, v = 2: S_1 = 0.5·(1 − 0.5)·1 + 0.5·2 = 1.25, o = 2·1.25.
  //   t = 2: k = 2, β = 0.25, g = 0, v = 1:      S_2 = (1 − 0.25·4)·1.25 + 0.25·2·1 = 0.5, o = 1·0.5.
  HostTensor q({1, 2, 1, 1}, DType::f64), k({1, 2, 1, 1}, DType::f64), v({1, 2, 1, 1}, DType::f64);
  HostTensor g({1, 2, 1}, DType::f64), beta({1, 2, 1}, DType::f64), h0({1, 1, 1, 1}, DType::f64);
  q.set({2.0, 1.0});
  k.set({1.0, 2.0});
  v.set({2.0, 1.0});
  g.set({std::log(0.5), 0.0});
  beta.set({0.5, 0.25});
  h0.set({1.0});
  HostTensor o = poisoned({1, 2, 1, 1}, DType::f64), hT = poisoned({1, 1, 1, 1}, DType::f64);
  DeltaRuleOptions options;
  options.scale = 1.0;
  delta_rule_forward({q, k, v, g, beta, h0.view}, {o.view, hT.view}, options);
  EXPECT_DOUBLE_EQ(o.values()[0], 2.5);
  EXPECT_DOUBLE_EQ(o.values()[1], 0.5);
  EXPECT_DOUBLE_EQ(hT.values()[0], 0.5);

  // With the L2 norm, k = 2 becomes 2 / sqrt(4 + 1e-6) and q likewise; the default scale is 1.
  options.use_qk_l2norm = true;
  options.scale = 0.0;
  delta_rule_forward({q, k, v, g, beta, h0.view}, {o.view, hT.view}, options);
  const double n1 = 1.0 / std::sqrt(1.0 + 1e-6), n2 = 2.0 / std::sqrt(4.0 + 1e-6);
  const double s1 = 0.5 * (1 - 0.5 * n1 * n1) + 0.5 * n1 * 2.0;
  const double s2 = (1 - 0.25 * n2 * n2) * s1 + 0.25 * n2 * 1.0;
  EXPECT_NEAR(o.values()[0], 2.0 / std::sqrt(4.0 + 1e-6) * s1, 1e-15);
  EXPECT_NEAR(o.values()[1], n1 * s2, 1e-15);
}

struct GradResult {
  std::vector<HostTensor> g;  // dq, dk, dv, dg, dbeta, d_initial_state
};

GradResult run_backward(const DeltaCase& c, const DeltaData& d, const HostTensor& d_o, const HostTensor& dhT,
                        Impl impl) {
  GradResult r;
  r.g.push_back(poisoned({c.B, c.T, c.H, c.K}, c.dtype));
  r.g.push_back(poisoned({c.B, c.T, c.H, c.K}, c.dtype));
  r.g.push_back(poisoned({c.B, c.T, c.H, c.V}, c.dtype));
  r.g.push_back(poisoned({c.B, c.T, c.H}, c.dtype));
  r.g.push_back(poisoned({c.B, c.T, c.H}, c.dtype));
  r.g.push_back(poisoned({d.N, c.H, c.K, c.V}, state_dtype(c)));
  DeltaRuleGrads grads{r.g[0].view, r.g[1].view, r.g[2].view, r.g[3].view, r.g[4].view};
  if (c.with_state) grads.d_initial_state = r.g[5].view;
  delta_rule_backward(d.inputs(c), d_o, dhT.view, grads, options_for(c, impl));
  return r;
}

class DeltaRuleOracleBackward : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRuleOracleBackward, MatchesFiniteDifferences) {
  DeltaCase c = GetParam();
  c.dtype = DType::f64;
  DeltaData d = make_data(c);
  HostTensor wo = uniform({c.B, c.T, c.H, c.V}, DType::f64), ws = uniform({d.N, c.H, c.K, c.V}, DType::f64);
  auto loss = [&] {
    HostTensor o({c.B, c.T, c.H, c.V}, DType::f64), hT({d.N, c.H, c.K, c.V}, DType::f64);
    delta_rule_forward(d.inputs(c), {o.view, hT.view}, options_for(c, Impl::reference));
    return dot(o.values(), wo.values()) + dot(hT.values(), ws.values());
  };
  const GradResult r = run_backward(c, d, wo, ws, Impl::reference);
  EXPECT_LT(rel_err(r.g[0].values(), finite_difference(d.q, loss)), 1e-7) << "dq";
  EXPECT_LT(rel_err(r.g[1].values(), finite_difference(d.k, loss)), 1e-7) << "dk";
  EXPECT_LT(rel_err(r.g[2].values(), finite_difference(d.v, loss)), 1e-7) << "dv";
  EXPECT_LT(rel_err(r.g[3].values(), finite_difference(d.g, loss)), 1e-7) << "dg";
  EXPECT_LT(rel_err(r.g[4].values(), finite_difference(d.beta, loss)), 1e-7) << "dbeta";
  if (c.with_state) EXPECT_LT(rel_err(r.g[5].values(), finite_difference(d.h0, loss)), 1e-7) << "d_initial_state";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeltaRuleOracleBackward,
    ::testing::Values(DeltaCase{2, 6, 2, 3, 4, DType::f64, true, false, {}},
                      DeltaCase{1, 7, 2, 4, 3, DType::f64, true, true, {}, -0.5, -0.01, 0.8},
                      DeltaCase{1, 9, 1, 3, 2, DType::f64, true, true, {0, 2, 3, 9}},
                      DeltaCase{1, 5, 1, 2, 3, DType::f64, false, false, {}}));

class DeltaRuleFastBackward : public ::testing::TestWithParam<DeltaCase> {};

TEST_P(DeltaRuleFastBackward, MatchesOracle) {
  const DeltaCase c = GetParam();
  DeltaData d = make_data(c);
  HostTensor d_o = uniform({c.B, c.T, c.H, c.V}, c.dtype), dhT = uniform({d.N, c.H, c.K, c.V}, DType::f32);
  const GradResult fast = run_backward(c, d, d_o, dhT, Impl::fast);
  const GradResult ref = run_backward(c, d, d_o, dhT, Impl::reference);
  const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "d_initial_state"};
  for (int i = 0; i < (c.with_state ? 6 : 5); ++i)
    EXPECT_LT(rel_err(fast.g[i], ref.g[i]), i == 5 ? tolerance(DType::f32) : tolerance(c.dtype)) << names[i];
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DeltaRuleFastBackward,
    ::testing::Values(DeltaCase{2, 63, 2, 16, 24, DType::f32, true, false, {}},
                      DeltaCase{1, 1, 2, 8, 4, DType::f32, true, true, {}},
                      DeltaCase{1, 100, 2, 16, 8, DType::f32, true, true, {}, -0.5, -0.01, 0.4},
                      DeltaCase{1, 100, 2, 16, 16, DType::bf16, true, true, {0, 30, 31, 100}},
                      DeltaCase{2, 63, 1, 8, 12, DType::f16, false, false, {}},
                      DeltaCase{1, 100, 1, 16, 16, DType::f32, true, true, {}, -1e-3, 0.0},
                      DeltaCase{1, 100, 1, 16, 16, DType::f32, true, false, {}, -20.0, 0.0}));

// Inputs for the error tests: [2, 8, 2, 4] q/k, V = 6.
struct BadInputs {
  HostTensor q = uniform({2, 8, 2, 4}, DType::f32), k = uniform({2, 8, 2, 4}, DType::f32);
  HostTensor v = uniform({2, 8, 2, 6}, DType::f32), g = uniform({2, 8, 2}, DType::f32, -1, 0);
  HostTensor beta = uniform({2, 8, 2}, DType::f32, 0, 1), o{{2, 8, 2, 6}, DType::f32};
  DeltaRuleInputs in() const { return {q, k, v, g, beta}; }
};

TEST(DeltaRuleErrors, EveryBadInputNamesTheArgument) {
  BadInputs x;
  const DeltaRuleOutputs out{x.o.view};
  auto with = [&](auto edit) {
    DeltaRuleInputs in = x.in();
    edit(in);
    return in;
  };
  HostTensor k_bf16 = uniform({2, 8, 2, 4}, DType::bf16), k_short = uniform({2, 8, 2, 3}, DType::f32);
  HostTensor v_heads = uniform({2, 8, 3, 6}, DType::f32), g_rank4 = uniform({2, 8, 2, 1}, DType::f32);
  HostTensor beta_short = uniform({2, 7, 2}, DType::f32), q_int = uniform({2, 8, 2, 4}, DType::i32);
  HostTensor g_f64 = uniform({2, 8, 2}, DType::f64);
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.k = k_bf16; }), out),
                      "seqmix.delta_rule: argument 'k': expected dtype f32 (the dtype of q), got bf16");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.k = k_short; }), out),
                      "argument 'k': expected shape [2, 8, 2, 4] [B, T, H, K], got [2, 8, 2, 3]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.v = v_heads; }), out),
                      "argument 'v': expected shape [2, 8, 2, 6] [B, T, H, V], got [2, 8, 3, 6]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.g = g_rank4; }), out),
                      "argument 'g': expected 3 dimensions [B, T, H], got 4 dimensions [2, 8, 2, 1]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.g = g_f64; }), out),
                      "argument 'g': expected dtype f32 (the dtype of q), got f64");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.beta = beta_short; }), out),
                      "argument 'beta': expected shape [2, 8, 2] [B, T, H], got [2, 7, 2]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.q = q_int; }), out),
                      "argument 'q': expected dtype bf16 or f16 or f32 or f64, got int32");

  Tensor strided = x.v.view;
  strided.strides = {192, 24, 12, 2};
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.v = strided; }), out),
                      "argument 'v': expected stride 1 in the last dimension, got strides [192, 24, 12, 2]");
  Tensor on_gpu = x.beta.view;
  on_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.beta = on_gpu; }), out),
                      "argument 'beta': expected device cpu (the device of the first input), got cuda:0");
  Tensor all_gpu = x.q.view;
  all_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with([&](auto& in) { in.q = all_gpu; }), out),
                      "argument 'k': expected device cuda:0 (the device of the first input), got cpu");

  HostTensor o_bad({2, 8, 2, 4}, DType::f32), o_f16({2, 8, 2, 6}, DType::f16);
  EXPECT_SEQMIX_ERROR(delta_rule_forward(x.in(), {o_bad.view}),
                      "argument 'o': expected shape [2, 8, 2, 6] [B, T, H, V], got [2, 8, 2, 4]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(x.in(), {o_f16.view}),
                      "argument 'o': expected dtype f32 (the dtype of q), got f16");

  DeltaRuleOptions bad_scale;
  bad_scale.scale = std::nan("");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(x.in(), out, bad_scale), "argument 'scale': expected a finite number");

  HostTensor empty_q({2, 0, 2, 4}, DType::f32), empty_v({2, 0, 2, 6}, DType::f32), empty_g({2, 0, 2}, DType::f32);
  HostTensor empty_o({2, 0, 2, 6}, DType::f32);
  EXPECT_SEQMIX_ERROR(delta_rule_forward({empty_q, empty_q, empty_v, empty_g, empty_g}, {empty_o.view}),
                      "argument 'T': expected sequence length T >= 1, got sequence length T = 0");
  HostTensor no_k({2, 8, 2, 0}, DType::f32);
  EXPECT_SEQMIX_ERROR(delta_rule_forward({no_k, no_k, x.v, x.g, x.beta}, out),
                      "argument 'q': expected key dimension K >= 1, got key dimension K = 0");
}

TEST(DeltaRuleErrors, StatesAreValidated) {
  BadInputs x;
  HostTensor h0_heads = uniform({2, 3, 4, 6}, DType::f32), h0_bf16 = uniform({2, 2, 4, 6}, DType::bf16);
  HostTensor h0_f64 = uniform({2, 2, 4, 6}, DType::f64), h0_rank3 = uniform({2, 2, 24}, DType::f32);
  HostTensor hT_kv = uniform({2, 2, 6, 4}, DType::f32);
  auto with_state = [&](const HostTensor& h0) {
    DeltaRuleInputs in = x.in();
    in.initial_state = h0.view;
    return in;
  };
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with_state(h0_heads), {x.o.view}),
                      "argument 'initial_state': expected shape [2, 2, 4, 6] [N, H, K, V], got [2, 3, 4, 6]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with_state(h0_bf16), {x.o.view}),
                      "argument 'initial_state': expected dtype f32, got bf16");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with_state(h0_f64), {x.o.view}),
                      "argument 'initial_state': expected dtype f32, got f64");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(with_state(h0_rank3), {x.o.view}),
                      "argument 'initial_state': expected 4 dimensions [N, H, K, V], got 3 dimensions [2, 2, 24]");
  EXPECT_SEQMIX_ERROR(delta_rule_forward(x.in(), {x.o.view, hT_kv.view}),
                      "argument 'final_state': expected shape [2, 2, 4, 6] [N, H, K, V], got [2, 2, 6, 4]");
}

TEST(DeltaRuleErrors, BackwardArgumentsAreValidated) {
  BadInputs x;
  HostTensor dq({2, 8, 2, 4}, DType::f32), dk({2, 8, 2, 4}, DType::f32), dv({2, 8, 2, 6}, DType::f32);
  HostTensor dg({2, 8, 2}, DType::f32), dbeta({2, 8, 2}, DType::f32), dbeta_bad({2, 8, 1}, DType::f32);
  HostTensor d_o = uniform({2, 8, 2, 6}, DType::f32), d_o_bad = uniform({2, 8, 2, 5}, DType::f32);
  HostTensor h0 = uniform({2, 2, 4, 6}, DType::f32), dh0({2, 2, 4, 6}, DType::f32);
  const DeltaRuleGrads grads{dq, dk, dv, dg, dbeta};
  EXPECT_SEQMIX_ERROR(delta_rule_backward(x.in(), d_o_bad, std::nullopt, grads),
                      "seqmix.delta_rule_backward: argument 'do': expected shape [2, 8, 2, 6] [B, T, H, V], got [2, 8, 2, 5]");
  EXPECT_SEQMIX_ERROR(delta_rule_backward(x.in(), d_o, std::nullopt, {dq, dk, dv, dg, dbeta_bad}),
                      "argument 'dbeta': expected shape [2, 8, 2] [B, T, H], got [2, 8, 1]");
  EXPECT_SEQMIX_ERROR(delta_rule_backward(x.in(), d_o, std::nullopt, {dk, dq, d_o, dg, dbeta, dh0.view}),
                      "argument 'd_initial_state': expected none (initial_state is not given), got a tensor");
  DeltaRuleInputs with_state = x.in();
  with_state.initial_state = h0.view;
  EXPECT_SEQMIX_ERROR(delta_rule_backward(with_state, d_o, std::nullopt, grads),
                      "argument 'd_initial_state': expected a tensor (initial_state is given), got none");
  EXPECT_SEQMIX_ERROR(delta_rule_backward(x.in(), d_o, dq.view, grads),
                      "argument 'd_final_state': expected shape [2, 2, 4, 6] [N, H, K, V], got [2, 8, 2, 4]");
}

TEST(DeltaRuleErrors, CuSeqlensIsValidated) {
  HostTensor q = uniform({1, 10, 1, 4}, DType::f32), v = uniform({1, 10, 1, 4}, DType::f32);
  HostTensor g = uniform({1, 10, 1}, DType::f32, -1, 0), o({1, 10, 1, 4}, DType::f32);
  HostTensor empty_seq = offsets({0, 4, 4, 10}), short_end = offsets({0, 4, 9}, DType::i64);
  HostTensor h0 = uniform({3, 1, 4, 4}, DType::f32), cu = offsets({0, 3, 10});
  EXPECT_SEQMIX_ERROR(delta_rule_forward({q, q, v, g, g, std::nullopt, empty_seq.view}, {o.view}),
                      "argument 'cu_seqlens': expected no empty sequence, got sequence 1 of length 0");
  EXPECT_SEQMIX_ERROR(delta_rule_forward({q, q, v, g, g, std::nullopt, short_end.view}, {o.view}),
                      "argument 'cu_seqlens': expected last offset equal to the total length 10, got 9");
  EXPECT_SEQMIX_ERROR(delta_rule_forward({q, q, v, g, g, h0.view, cu.view}, {o.view}),
                      "argument 'initial_state': expected shape [2, 1, 4, 4] [N, H, K, V], got [3, 1, 4, 4]");
  HostTensor q2 = uniform({2, 5, 1, 4}, DType::f32), v2 = uniform({2, 5, 1, 4}, DType::f32);
  HostTensor g2 = uniform({2, 5, 1}, DType::f32), o2({2, 5, 1, 4}, DType::f32), cu2 = offsets({0, 5});
  EXPECT_SEQMIX_ERROR(delta_rule_forward({q2, q2, v2, g2, g2, std::nullopt, cu2.view}, {o2.view}),
                      "expected batch size 1 when cu_seqlens is given, got batch size 2");
}

}  // namespace
}  // namespace seqmix::test
