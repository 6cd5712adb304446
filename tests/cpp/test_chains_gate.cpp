// The projection chain with its low-rank gate in one call (projection_chain_with_gate_forward)
// on the CPU: the two calls' composition by definition, checked against them and against the
// gate written out by hand; and every bad gate argument named in the error.
#include <cmath>

#include "seqmix/chains.hpp"
#include "test_util.hpp"

namespace seqmix::test {
namespace {

const std::vector<ProjectionSegment> kSegments = {
    {6, Activation::silu}, {4, Activation::identity}, {5, Activation::identity}};  // the code: segment 1, r = 4

struct Inputs {
  int64_t tokens;
  DType dtype;
  HostTensor x = uniform({tokens, 8}, dtype), weight = uniform({15, 8}, dtype, -0.5, 0.5), bias = uniform({15}, dtype),
             gate_weight = uniform({7, 4}, dtype), gate_bias = uniform({7}, dtype);
};

std::vector<Tensor> views(const std::vector<HostTensor>& tensors) {
  std::vector<Tensor> v;
  for (const auto& t : tensors) v.push_back(t.view);
  return v;
}
std::vector<HostTensor> poisoned_outputs(int64_t tokens, DType dtype) {
  std::vector<HostTensor> out;
  for (const auto& s : kSegments) out.push_back(poisoned({tokens, s.width}, dtype));
  return out;
}

class ProjectionChainWithGate : public testing::TestWithParam<std::tuple<int64_t, DType, bool>> {};

TEST_P(ProjectionChainWithGate, EqualsTheTwoCalls) {
  const auto [tokens, dtype, with_bias] = GetParam();
  Inputs in{tokens, dtype};
  const std::optional<Tensor> gate_bias = with_bias ? std::optional<Tensor>(in.gate_bias.view) : std::nullopt;
  auto one = poisoned_outputs(tokens, dtype), two = poisoned_outputs(tokens, dtype);
  HostTensor gate_one = poisoned({tokens, 7}, DType::f32), gate_two = poisoned({tokens, 7}, DType::f32);
  projection_chain_with_gate_forward(in.x, in.weight, in.bias.view, kSegments, {1, in.gate_weight, gate_bias, 8.0},
                                     views(one), gate_one);
  projection_chain_forward(in.x, in.weight, in.bias.view, kSegments, views(two));
  projection_chain_forward(two[1], in.gate_weight, gate_bias, {{7, Activation::logsigmoid, 8.0}}, {gate_two.view});
  for (size_t s = 0; s < kSegments.size(); ++s) EXPECT_EQ(one[s].values(), two[s].values()) << "segment " << s;
  EXPECT_EQ(gate_one.values(), gate_two.values());
}

INSTANTIATE_TEST_SUITE_P(Cases, ProjectionChainWithGate,
                         testing::Combine(testing::Values(int64_t{1}, int64_t{37}),
                                          testing::Values(DType::f64, DType::f32, DType::bf16), testing::Bool()));

// The float64 result against logsigmoid(u·W_gateᵀ + b)/tau written out here, u = x·W_codeᵀ + b.
TEST(ProjectionChainWithGate, OracleMatchesTheGateWrittenOut) {
  Inputs in{5, DType::f64};
  auto out = poisoned_outputs(5, DType::f64);
  HostTensor gate = poisoned({5, 7}, DType::f64);
  projection_chain_with_gate_forward(in.x, in.weight, in.bias.view, kSegments,
                                     {1, in.gate_weight, in.gate_bias.view, 16.0}, views(out), gate);
  const auto x = in.x.values(), w = in.weight.values(), b = in.bias.values(), gw = in.gate_weight.values(),
             gb = in.gate_bias.values(), got = gate.values();
  std::vector<double> want;
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t c = 0; c < 7; ++c) {
      double z = gb[c];
      for (int64_t k = 0; k < 4; ++k) {
        double u = b[6 + k];
        for (int64_t i = 0; i < 8; ++i) u += x[t * 8 + i] * w[(6 + k) * 8 + i];
        z += u * gw[c * 4 + k];
      }
      want.push_back(-std::log1p(std::exp(-z)) / 16.0);
    }
  EXPECT_LT(rel_err(got, want), 1e-12);
}

TEST(ProjectionChainWithGateErrors, EveryBadGateArgumentIsNamed) {
  Inputs in{3, DType::f32};
  const auto out = poisoned_outputs(3, DType::f32);
  HostTensor gate = poisoned({3, 7}, DType::f32);
  const auto call = [&](const LowRankGate& g, const Tensor& gate_out, const std::vector<Tensor>& outputs) {
    projection_chain_with_gate_forward(in.x, in.weight, std::nullopt, kSegments, g, outputs, gate_out);
  };
  const std::string op = "seqmix.projection_chain_with_gate: ";
  EXPECT_SEQMIX_ERROR(call({3, in.gate_weight, std::nullopt, 16.0}, gate, views(out)),
                      op + "argument 'gate.segment': expected the index of a segment (below 3), got 3");
  EXPECT_SEQMIX_ERROR(call({0, in.gate_weight, std::nullopt, 16.0}, gate, views(out)),
                      "argument 'gate.segment': expected an identity segment (the gate's code), got segment 0 with "
                      "activation silu");
  HostTensor wide = uniform({7, 5}, DType::f32), w_bf16 = uniform({7, 4}, DType::bf16);
  EXPECT_SEQMIX_ERROR(call({1, wide, std::nullopt, 16.0}, gate, views(out)),
                      "argument 'gate.weight': expected shape [7, 4] [width, r] (r: the code segment's width), got "
                      "[7, 5]");
  EXPECT_SEQMIX_ERROR(call({1, w_bf16, std::nullopt, 16.0}, gate, views(out)),
                      "argument 'gate.weight': expected dtype f32 (the dtype of x), got bf16");
  HostTensor short_bias = uniform({6}, DType::f32);
  EXPECT_SEQMIX_ERROR(call({1, in.gate_weight, short_bias.view, 16.0}, gate, views(out)),
                      "argument 'gate.bias': expected shape [7] [width], got [6]");
  EXPECT_SEQMIX_ERROR(call({1, in.gate_weight, std::nullopt, 0.0}, gate, views(out)),
                      "argument 'gate.tau': expected tau > 0, got tau = 0");
  HostTensor gate_short = poisoned({3, 6}, DType::f32), gate_int({3, 7}, DType::i32);
  EXPECT_SEQMIX_ERROR(call({1, in.gate_weight, std::nullopt, 16.0}, gate_short, views(out)),
                      "argument 'gate_out': expected shape [3, 7] [tokens, width], got [3, 6]");
  EXPECT_SEQMIX_ERROR(call({1, in.gate_weight, std::nullopt, 16.0}, gate_int, views(out)),
                      "argument 'gate_out': expected dtype bf16 or f16 or f32 or f64, got int32");
  HostTensor code_f64 = poisoned({3, 4}, DType::f64);
  EXPECT_SEQMIX_ERROR(call({1, in.gate_weight, std::nullopt, 16.0}, gate, {out[0].view, code_f64.view, out[2].view}),
                      "argument 'outputs[1]': expected dtype f32 (the dtype of x (the gate reads it)), got f64");
}

}  // namespace
}  // namespace seqmix::test
