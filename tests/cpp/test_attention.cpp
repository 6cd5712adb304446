#include "seqmix/attention.hpp"

#include <cstdlib>
#include <cstring>

#include "test_util.hpp"

namespace seqmix::test {
namespace {

struct AttnCase {
  int64_t B, Sq, Sk, Hq, Hkv, D, Dv;
  DType dtype;
  bool causal;
  std::vector<int64_t> cu_q, cu_k;  // non-empty: variable length (B, Sq, Sk unused)

  bool varlen() const { return !cu_q.empty(); }
  std::vector<int64_t> rows(int64_t S, const std::vector<int64_t>& cu, int64_t H, int64_t dim) const {
    if (varlen()) return {cu.back(), H, dim};
    return {B, S, H, dim};
  }
  std::vector<int64_t> q_shape() const { return rows(Sq, cu_q, Hq, D); }
  std::vector<int64_t> k_shape() const { return rows(Sk, cu_k, Hkv, D); }
  std::vector<int64_t> v_shape() const { return rows(Sk, cu_k, Hkv, Dv); }
  std::vector<int64_t> out_shape() const { return rows(Sq, cu_q, Hq, Dv); }
  std::vector<int64_t> lse_shape() const {
    return varlen() ? std::vector<int64_t>{Hq, cu_q.back()} : std::vector<int64_t>{B, Hq, Sq};
  }
  DType lse_dtype() const { return dtype == DType::f64 ? DType::f64 : DType::f32; }
  int64_t longest(const std::vector<int64_t>& cu) const {
    int64_t m = 0;
    for (size_t i = 1; i < cu.size(); ++i) m = std::max(m, cu[i] - cu[i - 1]);
    return m;
  }
};

struct AttnData {
  HostTensor q, k, v, cu_q, cu_k;
  AttentionInputs inputs(const AttnCase& c) const {
    AttentionInputs in{q, k, v};
    if (c.varlen()) {
      in.cu_seqlens_q = cu_q.view;
      in.cu_seqlens_k = cu_k.view;
      in.max_seqlen_q = c.longest(c.cu_q);
      in.max_seqlen_k = c.longest(c.cu_k);
    }
    return in;
  }
};

AttnData make_data(const AttnCase& c) {
  return {uniform(c.q_shape(), c.dtype, -2, 2), uniform(c.k_shape(), c.dtype, -2, 2), uniform(c.v_shape(), c.dtype),
          offsets(c.varlen() ? c.cu_q : std::vector<int64_t>{0, 1}),
          offsets(c.varlen() ? c.cu_k : std::vector<int64_t>{0, 1}, DType::i64)};
}

AttentionOptions make_options(const AttnCase& c, Impl impl) {
  AttentionOptions o;
  o.impl = impl;
  o.causal = c.causal;
  o.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  return o;
}

struct Forward {
  HostTensor out, lse;
  AttentionOutputs views() const { return {out.view, lse.view}; }
};

Forward run_forward(const AttnCase& c, const AttnData& d, Impl impl) {
  Forward r{poisoned(c.out_shape(), c.dtype), poisoned(c.lse_shape(), c.lse_dtype())};
  attention_forward(d.inputs(c), r.views(), make_options(c, impl));
  return r;
}

// LSE rows that see no key are −inf in both; the rest compare by relative norm.
double lse_err(const HostTensor& got, const HostTensor& want) {
  std::vector<double> g = got.values(), w = want.values(), gf, wf;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isinf(w[i]) && w[i] < 0) {
      if (!(std::isinf(g[i]) && g[i] < 0)) return INFINITY;
      continue;
    }
    gf.push_back(g[i]);
    wf.push_back(w[i]);
  }
  return gf.empty() ? 0.0 : rel_err(gf, wf);
}

class AttentionForward : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionForward, FastMatchesOracle) {
  const AttnCase c = GetParam();
  AttnData d = make_data(c);
  Forward fast = run_forward(c, d, Impl::fast), ref = run_forward(c, d, Impl::reference);
  EXPECT_LT(rel_err(fast.out, ref.out), tolerance(c.dtype));
  EXPECT_LT(lse_err(fast.lse, ref.lse), 1e-5);
}

const AttnCase kForwardCases[] = {
    {2, 63, 63, 2, 2, 16, 16, DType::f32, false, {}, {}},
    {2, 100, 63, 4, 1, 64, 64, DType::f32, true, {}, {}},   // Sq > Sk causal: early rows see nothing
    {1, 63, 100, 4, 4, 16, 16, DType::bf16, true, {}, {}},  // Sq < Sk causal
    {2, 1, 100, 8, 2, 64, 64, DType::f16, true, {}, {}},    // one query (decoding)
    {1, 100, 1, 4, 1, 16, 16, DType::bf16, false, {}, {}},
    {2, 100, 100, 4, 1, 16, 32, DType::f32, true, {}, {}},  // Dv != D
    {1, 130, 70, 4, 4, 64, 64, DType::f16, false, {}, {}},
    {1, 0, 0, 4, 1, 16, 16, DType::f32, true, {0, 1, 64, 100, 163}, {0, 50, 51, 151, 215}},
    {1, 0, 0, 2, 2, 64, 64, DType::bf16, false, {0, 100, 101}, {0, 1, 64}},
    {1, 0, 0, 4, 2, 16, 16, DType::f16, true, {0, 70, 71, 135}, {0, 1, 100, 163}},
};
INSTANTIATE_TEST_SUITE_P(Cases, AttentionForward, ::testing::ValuesIn(kForwardCases));

TEST(Attention, OracleMatchesHandComputedValues) {
  // One query against keys with scores 0 and ln 2: P = [1/3, 2/3], O = 3/3 + 12/3 = 5, LSE = ln 3.
  HostTensor q({1, 1, 1, 1}, DType::f64), k({1, 2, 1, 1}, DType::f64), v({1, 2, 1, 1}, DType::f64);
  q.set({1.0});
  k.set({0.0, std::log(2.0)});
  v.set({3.0, 6.0});
  for (Impl impl : {Impl::reference, Impl::fast}) {
    HostTensor out = poisoned({1, 1, 1, 1}, DType::f64), lse = poisoned({1, 1, 1}, DType::f64);
    AttentionOptions o;
    o.impl = impl;
    o.scale = 1.0;
    attention_forward({q, k, v}, {out.view, lse.view}, o);
    EXPECT_NEAR(out.values()[0], 5.0, 1e-6);
    EXPECT_NEAR(lse.values()[0], std::log(3.0), 1e-6);
  }
}

TEST(Attention, CausalMaskIsBottomRightAligned) {
  // Sq = 3, Sk = 2: query i sees key j iff j <= i - 1. Query 0 sees nothing, query 1 key 0.
  HostTensor q = uniform({1, 3, 1, 2}, DType::f64), k = uniform({1, 2, 1, 2}, DType::f64);
  HostTensor v({1, 2, 1, 1}, DType::f64);
  v.set({4.0, -2.0});
  for (Impl impl : {Impl::reference, Impl::fast}) {
    HostTensor out = poisoned({1, 3, 1, 1}, DType::f64), lse = poisoned({1, 1, 3}, DType::f64);
    AttentionOptions o;
    o.impl = impl;
    o.causal = true;
    attention_forward({q, k, v}, {out.view, lse.view}, o);
    const auto O = out.values(), L = lse.values();
    EXPECT_EQ(O[0], 0.0);
    EXPECT_TRUE(std::isinf(L[0]) && L[0] < 0);
    EXPECT_NEAR(O[1], 4.0, 1e-6);
    const auto qv = q.values(), kv = k.values();
    EXPECT_NEAR(L[1], (qv[2] * kv[0] + qv[3] * kv[1]) / std::sqrt(2.0), 1e-6);  // default scale D^-0.5
    EXPECT_GT(O[2], -2.0);
    EXPECT_LT(O[2], 4.0);
  }
}

// Gradients of all three inputs (and the LSE path) from the fast path and from the oracle.
struct Grads {
  HostTensor dq, dk, dv;
};

Grads run_backward(const AttnCase& c, const AttnData& d, const HostTensor& dout, const HostTensor& d_lse, Impl impl) {
  const Forward f = run_forward(c, d, impl);
  Grads g{poisoned(c.q_shape(), c.dtype), poisoned(c.k_shape(), c.dtype), poisoned(c.v_shape(), c.dtype)};
  attention_backward(d.inputs(c), f.views(), dout, d_lse.view, {g.dq.view, g.dk.view, g.dv.view},
                     make_options(c, impl));
  return g;
}

// Σ w·LSE over the rows that see at least one key (the others are −inf and constant).
double finite_dot(const std::vector<double>& lse, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < lse.size(); ++i)
    if (std::isfinite(lse[i])) s += lse[i] * w[i];
  return s;
}

class AttentionBackward : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionBackward, OracleMatchesFiniteDifferences) {
  AttnCase c = GetParam();
  c.dtype = DType::f64;
  AttnData d = make_data(c);
  HostTensor w_out = uniform(c.out_shape(), DType::f64), w_lse = uniform(c.lse_shape(), DType::f64);
  const AttentionOptions options = make_options(c, Impl::reference);
  auto loss = [&] {
    HostTensor out(c.out_shape(), DType::f64), lse(c.lse_shape(), DType::f64);
    attention_forward(d.inputs(c), {out.view, lse.view}, options);
    return dot(out.values(), w_out.values()) + finite_dot(lse.values(), w_lse.values());
  };
  const Grads g = run_backward(c, d, w_out, w_lse, Impl::reference);
  EXPECT_LT(rel_err(g.dq.values(), finite_difference(d.q, loss)), 1e-7);
  EXPECT_LT(rel_err(g.dk.values(), finite_difference(d.k, loss)), 1e-7);
  EXPECT_LT(rel_err(g.dv.values(), finite_difference(d.v, loss)), 1e-7);
}

// The fast backward against the oracle's, on the same inputs and output gradients.
void expect_fast_backward_matches_oracle(const AttnCase& c) {
  AttnData d = make_data(c);
  HostTensor dout = uniform(c.out_shape(), c.dtype), d_lse = uniform(c.lse_shape(), c.lse_dtype());
  const Grads fast = run_backward(c, d, dout, d_lse, Impl::fast);
  const Grads ref = run_backward(c, d, dout, d_lse, Impl::reference);
  EXPECT_LT(rel_err(fast.dq, ref.dq), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast.dk, ref.dk), tolerance(c.dtype));
  EXPECT_LT(rel_err(fast.dv, ref.dv), tolerance(c.dtype));
}

TEST_P(AttentionBackward, FastMatchesOracle) {
  expect_fast_backward_matches_oracle(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionBackward,
    ::testing::Values(AttnCase{1, 5, 7, 2, 1, 3, 4, DType::f32, true, {}, {}},    // GQA 2, Sq < Sk, Dv != D
                      AttnCase{2, 6, 4, 2, 1, 3, 3, DType::f32, false, {}, {}},   // Sq > Sk
                      AttnCase{1, 7, 4, 2, 1, 3, 3, DType::bf16, true, {}, {}},   // rows that see nothing
                      AttnCase{1, 0, 0, 4, 2, 3, 2, DType::f16, true, {0, 1, 6, 9}, {0, 3, 4, 9}}));

// Larger shapes (several tiles, GQA 4) for the fast backward only: the oracle's finite
// differences would be slow there and add nothing.
class AttentionBackwardTiles : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionBackwardTiles, FastMatchesOracle) { expect_fast_backward_matches_oracle(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionBackwardTiles,
    ::testing::Values(AttnCase{2, 100, 63, 4, 1, 16, 16, DType::f32, true, {}, {}},
                      AttnCase{1, 63, 100, 4, 4, 64, 64, DType::bf16, false, {}, {}},
                      AttnCase{1, 1, 100, 8, 2, 16, 32, DType::f16, true, {}, {}},
                      AttnCase{1, 0, 0, 4, 1, 16, 16, DType::f32, true, {0, 1, 64, 100, 163}, {0, 50, 51, 151, 215}},
                      AttnCase{1, 0, 0, 2, 2, 64, 64, DType::bf16, false, {0, 100, 101}, {0, 1, 64}}));

TEST(Attention, FastBackwardDoesNotDependOnTheThreadCount) {
  const AttnCase c{2, 70, 90, 4, 1, 16, 16, DType::f32, true, {}, {}};
  AttnData d = make_data(c);
  HostTensor dout = uniform(c.out_shape(), c.dtype), d_lse = uniform(c.lse_shape(), c.lse_dtype());
  const char* saved = std::getenv("SEQMIX_NUM_THREADS");
  const std::string restore = saved ? saved : "";
  setenv("SEQMIX_NUM_THREADS", "1", 1);
  const Grads one = run_backward(c, d, dout, d_lse, Impl::fast);
  if (saved) setenv("SEQMIX_NUM_THREADS", restore.c_str(), 1);
  else unsetenv("SEQMIX_NUM_THREADS");
  const Grads all = run_backward(c, d, dout, d_lse, Impl::fast);
  EXPECT_EQ(one.dq.storage, all.dq.storage);
  EXPECT_EQ(one.dk.storage, all.dk.storage);
  EXPECT_EQ(one.dv.storage, all.dv.storage);
}

TEST(Attention, OnlyTheInnermostStrideMustBeOne) {
  // q read through a view with a padded head stride gives the same result as a dense copy.
  const AttnCase c{2, 9, 11, 2, 1, 4, 4, DType::f32, true, {}, {}};
  AttnData d = make_data(c);
  HostTensor wide = uniform({2, 9, 2, 8}, DType::f32);
  std::vector<double> wv = wide.values(), qv(2 * 9 * 2 * 4);
  for (size_t r = 0; r < qv.size() / 4; ++r)
    for (int e = 0; e < 4; ++e) qv[r * 4 + e] = wv[r * 8 + e];
  d.q.set(qv);
  AttentionInputs strided = d.inputs(c);
  strided.q = wide.view;
  strided.q.shape = {2, 9, 2, 4};
  Forward dense = run_forward(c, d, Impl::fast), view{poisoned(c.out_shape(), c.dtype), poisoned(c.lse_shape(), c.lse_dtype())};
  attention_forward(strided, view.views(), make_options(c, Impl::fast));
  EXPECT_EQ(rel_err(view.out, dense.out), 0.0);
}

TEST(AttentionErrors, EveryBadInputNamesTheArgument) {
  HostTensor q = uniform({2, 8, 4, 16}, DType::f32), k = uniform({2, 6, 2, 16}, DType::f32),
             v = uniform({2, 6, 2, 16}, DType::f32);
  HostTensor out({2, 8, 4, 16}, DType::f32), lse({2, 4, 8}, DType::f32);
  const AttentionOutputs o{out.view, lse.view};
  auto fwd = [&](const Tensor& q_, const Tensor& k_, const Tensor& v_) { attention_forward({q_, k_, v_}, o); };

  HostTensor q_rank3 = uniform({16, 4, 16}, DType::f32), q_int({2, 8, 4, 16}, DType::i32);
  EXPECT_SEQMIX_ERROR(fwd(q_rank3, k, v),
                      "seqmix.attention: argument 'q': expected 4 dimensions [B, Sq, Hq, D], got 3 dimensions [16, 4, 16]");
  EXPECT_SEQMIX_ERROR(fwd(q_int, k, v), "argument 'q': expected dtype bf16 or f16 or f32 or f64, got int32");
  HostTensor k_bf16 = uniform({2, 6, 2, 16}, DType::bf16);
  EXPECT_SEQMIX_ERROR(fwd(q, k_bf16, v), "argument 'k': expected dtype f32 (the dtype of q), got bf16");
  HostTensor k_gqa = uniform({2, 6, 3, 16}, DType::f32), v_gqa = uniform({2, 6, 3, 16}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(q, k_gqa, v_gqa),
                      "argument 'k': expected kv heads Hkv dividing the 4 query heads (integral GQA ratio Hq / Hkv), "
                      "got Hkv = 3");
  HostTensor k_dim = uniform({2, 6, 2, 8}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(q, k_dim, v), "argument 'k': expected head dim 16 (the head dim of q), got 8");
  HostTensor k_batch = uniform({3, 6, 2, 16}, DType::f32), v_batch = uniform({3, 6, 2, 16}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(q, k_batch, v_batch), "argument 'k': expected batch size 2 (the batch size of q), got 3");
  HostTensor v_short = uniform({2, 5, 2, 16}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(q, k, v_short), "argument 'v': expected shape [2, 6, 2, 16] [B, Sk, Hkv, Dv], got [2, 5, 2, 16]");

  Tensor strided = k.view;
  strided.strides = {192, 32, 16, 2};
  EXPECT_SEQMIX_ERROR(fwd(q, strided, v), "argument 'k': expected stride 1 in the last dimension, got strides [192, 32, 16, 2]");
  Tensor on_gpu = v.view;
  on_gpu.device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(fwd(q, k, on_gpu), "argument 'v': expected device cpu (the device of the first input), got cuda:0");

  HostTensor q_empty({2, 0, 4, 16}, DType::f32), k_empty({2, 0, 2, 16}, DType::f32), v_empty({2, 0, 2, 16}, DType::f32);
  EXPECT_SEQMIX_ERROR(fwd(q_empty, k, v), "argument 'q': expected sequence length Sq >= 1, got sequence length Sq = 0");
  EXPECT_SEQMIX_ERROR(fwd(q, k_empty, v_empty), "argument 'k': expected sequence length Sk >= 1, got sequence length Sk = 0");

  HostTensor out_bad({2, 8, 4, 8}, DType::f32), lse_bad({2, 4, 8}, DType::bf16), lse_short({2, 8, 4}, DType::f32);
  EXPECT_SEQMIX_ERROR(attention_forward({q, k, v}, {out_bad.view, lse.view}),
                      "argument 'out': expected shape [2, 8, 4, 16] [B, Sq, Hq, Dv], got [2, 8, 4, 8]");
  EXPECT_SEQMIX_ERROR(attention_forward({q, k, v}, {out.view, lse_bad.view}),
                      "argument 'lse': expected dtype f32 or f64, got bf16");
  EXPECT_SEQMIX_ERROR(attention_forward({q, k, v}, {out.view, lse_short.view}),
                      "argument 'lse': expected shape [2, 4, 8] [B, Hq, Sq], got [2, 8, 4]");
  AttentionOptions nan_scale;
  nan_scale.scale = std::nan("");
  EXPECT_SEQMIX_ERROR(attention_forward({q, k, v}, o, nan_scale), "argument 'scale': expected a finite softmax scale");

  // All on a CUDA device: valid arguments, but this build has no CUDA kernel for attention.
  Tensor qg = q.view, kg = k.view, vg = v.view, og = out.view, lg = lse.view;
  for (Tensor* t : {&qg, &kg, &vg, &og, &lg}) t->device = Device::cuda(0);
  EXPECT_SEQMIX_ERROR(attention_forward({qg, kg, vg}, {og, lg}), "expected a CPU tensor (this op has no CUDA kernel");
}

TEST(AttentionErrors, BackwardChecksGradientsAndForwardOutputs) {
  HostTensor q = uniform({1, 5, 2, 4}, DType::f32), k = uniform({1, 7, 1, 4}, DType::f32),
             v = uniform({1, 7, 1, 6}, DType::f32);
  HostTensor out({1, 5, 2, 6}, DType::f32), lse({1, 2, 5}, DType::f32), dout = uniform({1, 5, 2, 6}, DType::f32);
  HostTensor dq({1, 5, 2, 4}, DType::f32), dk({1, 7, 1, 4}, DType::f32), dv({1, 7, 1, 6}, DType::f32);
  HostTensor dv_bad({1, 7, 1, 4}, DType::f32), dout_f16({1, 5, 2, 6}, DType::f16), d_lse_bad({1, 5, 2}, DType::f32);
  const AttentionInputs in{q, k, v};
  EXPECT_SEQMIX_ERROR(attention_backward(in, {out.view, lse.view}, dout, std::nullopt, {dq.view, dk.view, dv_bad.view}),
                      "seqmix.attention_backward: argument 'dv': expected shape [1, 7, 1, 6] [B, Sk, Hkv, Dv], got [1, 7, 1, 4]");
  EXPECT_SEQMIX_ERROR(attention_backward(in, {out.view, lse.view}, dout_f16, std::nullopt, {dq.view, dk.view, dv.view}),
                      "argument 'dout': expected dtype f32 (the dtype of q), got f16");
  EXPECT_SEQMIX_ERROR(attention_backward(in, {out.view, lse.view}, dout, d_lse_bad.view, {dq.view, dk.view, dv.view}),
                      "argument 'd_lse': expected shape [1, 2, 5] [B, Hq, Sq], got [1, 5, 2]");
  EXPECT_SEQMIX_ERROR(attention_backward(in, {dout_f16.view, lse.view}, dout, std::nullopt, {dq.view, dk.view, dv.view}),
                      "argument 'out': expected dtype f32 (the dtype of q), got f16");
}

TEST(AttentionErrors, VariableLengthIsValidated) {
  HostTensor q = uniform({10, 2, 4}, DType::f32), k = uniform({12, 1, 4}, DType::f32), v = uniform({12, 1, 4}, DType::f32);
  HostTensor out({10, 2, 4}, DType::f32), lse({2, 10}, DType::f32);
  HostTensor cu_q = offsets({0, 4, 10}), cu_k = offsets({0, 5, 12}, DType::i64);
  auto fwd = [&](const HostTensor& cq, const HostTensor& ck, int64_t max_q = 6, int64_t max_k = 7) {
    AttentionInputs in{q, k, v, cq.view, ck.view, max_q, max_k};
    attention_forward(in, {out.view, lse.view});
  };
  fwd(cu_q, cu_k);  // the valid call
  EXPECT_SEQMIX_ERROR(fwd(cu_q, cu_k, 5, 7), "argument 'max_seqlen_q': expected >= 6 (the longest query sequence), got 5");
  EXPECT_SEQMIX_ERROR(fwd(cu_q, cu_k, 6, 0), "argument 'max_seqlen_k': expected >= 7 (the longest key sequence), got 0");
  HostTensor three = offsets({0, 4, 8, 12});
  EXPECT_SEQMIX_ERROR(fwd(cu_q, three),
                      "argument 'cu_seqlens_k': expected 3 offsets (as many sequences as cu_seqlens_q), got 4");
  HostTensor empty_seq = offsets({0, 4, 4, 10}), decreasing = offsets({0, 6, 4, 10}), not_zero = offsets({1, 10});
  HostTensor short_end = offsets({0, 4, 9}), floats({3}, DType::f32), one = offsets({0});
  EXPECT_SEQMIX_ERROR(fwd(empty_seq, cu_k), "argument 'cu_seqlens_q': expected no empty sequence, got sequence 1 of length 0");
  EXPECT_SEQMIX_ERROR(fwd(decreasing, cu_k),
                      "argument 'cu_seqlens_q': expected non-decreasing offsets, got cu_seqlens_q[2] = 4 < 6");
  EXPECT_SEQMIX_ERROR(fwd(not_zero, cu_k), "argument 'cu_seqlens_q': expected cu_seqlens_q[0] == 0, got 1");
  EXPECT_SEQMIX_ERROR(fwd(short_end, cu_k), "argument 'cu_seqlens_q': expected last offset equal to total_q = 10, got 9");
  EXPECT_SEQMIX_ERROR(fwd(cu_q, floats), "argument 'cu_seqlens_k': expected dtype int32 or int64, got f32");
  EXPECT_SEQMIX_ERROR(fwd(cu_q, one), "argument 'cu_seqlens_k': expected at least 2 offsets (one sequence), got 1");

  AttentionInputs only_q{q, k, v, cu_q.view, std::nullopt, 6, 7};
  EXPECT_SEQMIX_ERROR(attention_forward(only_q, {out.view, lse.view}),
                      "argument 'cu_seqlens_k': expected a tensor (variable length needs both cu_seqlens_q and cu_seqlens_k), got none");
  HostTensor q4 = uniform({1, 10, 2, 4}, DType::f32);
  AttentionInputs padded_q{q4, k, v, cu_q.view, cu_k.view, 6, 7};
  EXPECT_SEQMIX_ERROR(attention_forward(padded_q, {out.view, lse.view}),
                      "argument 'q': expected 3 dimensions [total_q, Hq, D], got 4 dimensions [1, 10, 2, 4]");
  HostTensor lse_padded({1, 2, 10}, DType::f32);
  EXPECT_SEQMIX_ERROR(attention_forward({q, k, v, cu_q.view, cu_k.view, 6, 7}, {out.view, lse_padded.view}),
                      "argument 'lse': expected 2 dimensions [Hq, total_q], got 3 dimensions [1, 2, 10]");
}

}  // namespace
}  // namespace seqmix::test
