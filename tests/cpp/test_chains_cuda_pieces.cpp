// The projection backward's gradient GEMMs with dz in pieces (src/cuda/chains/
// pieces_mainloop.cuh): the two pieces GEMMs bit for bit the plain GEMMs on the same
// matrix gathered, and the chain's backward through them against the float64 oracle and
// bit for bit the backward that gathers dz first (SEQMIX_CHAINS_BACKWARD_PIECES=0; dbias,
// summed with atomics, to 1e-6). Token
// counts 1 and 1000 (not tile multiples), d = 136 (not a multiple of the tile's 64 or 256).
// Small* cases run under compute-sanitizer in the GPU check.
#include <cstdlib>
#include <optional>

#include "cuda/chains/params.hpp"
#include "chains_cuda_util.hpp"

namespace seqmix::test {
namespace {

// dz in three pieces along its columns (256, 512 and 40 wide; the last ends inside a tile),
// each in its own buffer with rows longer than the piece; the same values gathered into
// one [M, 808] matrix; x [M, d] and W [808, d].
TEST(ChainsCudaPieces, SmallPiecesGemmsAreTheGatheredGemms) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const int64_t M : {int64_t{1}, int64_t{1000}}) {
    constexpr int64_t d = 136, kWidths[3] = {256, 512, 40}, kStrides[3] = {264, 520, 48}, W = 808;
    HostTensor gathered({M, W}, DType::bf16);
    std::vector<double> all(M * W);
    std::vector<HostTensor> host;
    std::vector<std::unique_ptr<DeviceTensor>> device;
    cuda::RowPieces pieces;
    for (int p = 0, first = 0; p < 3; first += kWidths[p++]) {
      host.push_back(uniform({M, kStrides[p]}, DType::bf16));
      const std::vector<double> v = host.back().values();
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < kWidths[p]; ++j) all[i * W + first + j] = v[i * kStrides[p] + j];
      device.push_back(std::make_unique<DeviceTensor>(host.back()));
      pieces.piece[p] = {device.back()->ptr, kStrides[p]};
      pieces.first[p] = first;
    }
    pieces.count = 3;
    pieces.first[3] = W;
    gathered.set(all);
    HostTensor x = uniform({M, d}, DType::bf16), weight = uniform({W, d}, DType::bf16, -0.2, 0.2);
    DeviceTensor d_gathered(gathered), d_x(x), d_weight(weight);

    HostTensor dx = poisoned({M, d}, DType::bf16), dx_pieces = poisoned({M, d}, DType::bf16);
    HostTensor dw = poisoned({W, d}, DType::bf16), dw_pieces = poisoned({W, d}, DType::bf16);
    DeviceTensor d_dx(dx), d_dx_pieces(dx_pieces), d_dw(dw), d_dw_pieces(dw_pieces);
    const cuda::Rows dz{d_gathered.ptr, W}, x_rows{d_x.ptr, d}, w_rows{d_weight.ptr, d};
    cuda::gemm_nn_bf16(M, d, W, dz, w_rows, {d_dx.ptr, d}, nullptr);
    cuda::gemm_nn_bf16_pieces(M, d, W, pieces, w_rows, {d_dx_pieces.ptr, d}, nullptr);
    cuda::gemm_tn_bf16(W, d, M, dz, x_rows, {d_dw.ptr, d}, nullptr);
    cuda::gemm_tn_bf16_pieces(W, d, M, pieces, x_rows, {d_dw_pieces.ptr, d}, nullptr);
    const std::vector<double> want_dx = d_dx.values(dx), want_dw = d_dw.values(dw);
    EXPECT_EQ(d_dx_pieces.values(dx_pieces), want_dx) << "dx, M " << M;
    EXPECT_EQ(d_dw_pieces.values(dw_pieces), want_dw) << "dW, M " << M;
    // And the gathered GEMMs are right: dx = dz·W against float64.
    std::vector<double> oracle(M * d, 0.0);
    const std::vector<double> w = weight.values();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < W; ++k)
        for (int64_t j = 0; j < d; ++j) oracle[i * d + j] += all[i * W + k] * w[k * d + j];
    EXPECT_LT(rel_err(want_dx, oracle), tolerance(DType::bf16)) << "dx, M " << M;
  }
}

struct PiecesCase {
  const char* name;
  int64_t M;
  bool bias;
  int layer;  // index into kLayers
};
void PrintTo(const PiecesCase& c, std::ostream* os) { *os << c.name; }

// Segment lists whose pieces start at multiples of 256 columns:
// 0: a gathered piece in the middle (silu, then an identity segment that is not on a
//    piece boundary and whose gradient is f32), another at the end (the gates);
// 1: all identity (GLA's layout): every segment a piece of its own, the last 16 wide.
const std::vector<ProjectionSegment> kLayers[2] = {
    {{256, Activation::identity, 1.0},
     {200, Activation::silu, 1.0},
     {56, Activation::identity, 1.0},
     {256, Activation::identity, 1.0},
     {16, Activation::logsigmoid, 16.0},
     {16, Activation::sigmoid, 1.0}},
    {{256, Activation::identity, 1.0},
     {256, Activation::identity, 1.0},
     {512, Activation::identity, 1.0},
     {16, Activation::identity, 1.0}},
};

class ChainsCudaPiecesBackward : public ::testing::TestWithParam<PiecesCase> {};

TEST_P(ChainsCudaPiecesBackward, MatchesOracleAndTheGatheredBackward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const PiecesCase c = GetParam();
  const std::vector<ProjectionSegment>& segments = kLayers[c.layer];
  constexpr int64_t d = 136;
  const int64_t M = c.M, N = width_of(segments);
  HostTensor x = uniform({M, d}, DType::bf16), weight = uniform({N, d}, DType::bf16, -0.2, 0.2);
  HostTensor bias = uniform({N}, DType::bf16);
  HostTensor x64 = as_f64(x), weight64 = as_f64(weight), bias64 = as_f64(bias);
  DeviceTensor d_x(x), d_weight(weight), d_bias(bias);
  // Separate gradient tensors, as autograd hands them over; the third in f32.
  std::vector<HostTensor> d_outputs, d_outputs64;
  std::vector<std::unique_ptr<DeviceTensor>> device_d_outputs;
  std::vector<Tensor> host_views, device_views;
  for (size_t s = 0; s < segments.size(); ++s) {
    d_outputs.push_back(uniform({M, segments[s].width}, c.layer == 0 && s == 2 ? DType::f32 : DType::bf16));
    d_outputs64.push_back(as_f64(d_outputs.back()));
    device_d_outputs.push_back(std::make_unique<DeviceTensor>(d_outputs.back()));
    host_views.push_back(d_outputs64.back().view);
    device_views.push_back(device_d_outputs.back()->view);
  }
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  HostTensor dx64({M, d}, DType::f64), dw64({N, d}, DType::f64), db64({N}, DType::f64);
  projection_chain_backward(x64, weight64, maybe(c.bias, bias64.view), segments, host_views,
                            {dx64.view, dw64.view, maybe(c.bias, db64.view)}, reference);

  // The pieces path (the default), then the gathered one.
  std::vector<double> got[2][3];
  for (int gathered = 0; gathered < 2; ++gathered) {
    if (gathered) setenv("SEQMIX_CHAINS_BACKWARD_PIECES", "0", 1);
    HostTensor dx = poisoned({M, d}, DType::bf16), dw = poisoned({N, d}, DType::bf16);
    HostTensor db = poisoned({N}, DType::bf16);
    DeviceTensor d_dx(dx), d_dw(dw), d_db(db);
    projection_chain_backward(d_x, d_weight, maybe(c.bias, d_bias.view), segments, device_views,
                              {d_dx.view, d_dw.view, maybe(c.bias, d_db.view)});
    unsetenv("SEQMIX_CHAINS_BACKWARD_PIECES");
    got[gathered][0] = d_dx.values(dx);
    got[gathered][1] = d_dw.values(dw);
    if (c.bias) got[gathered][2] = d_db.values(db);
  }
  EXPECT_LT(rel_err(got[0][0], dx64.values()), tolerance(DType::bf16)) << "dx";
  EXPECT_LT(rel_err(got[0][1], dw64.values()), tolerance(DType::bf16)) << "dweight";
  if (c.bias) EXPECT_LT(rel_err(got[0][2], db64.values()), tolerance(DType::bf16)) << "dbias";
  EXPECT_EQ(got[0][0], got[1][0]) << "dx: pieces against gathered";
  EXPECT_EQ(got[0][1], got[1][1]) << "dweight: pieces against gathered";
  // dbias: column sums with atomic adds across blocks, so not bit for bit from run to run.
  if (c.bias) EXPECT_LT(rel_err(got[0][2], got[1][2]), 1e-6) << "dbias: pieces against gathered";
}

INSTANTIATE_TEST_SUITE_P(Cases, ChainsCudaPiecesBackward,
                         ::testing::Values(PiecesCase{"Small_M1_gates_bias", 1, true, 0},
                                           PiecesCase{"Small_M1000_gates_bias", 1000, true, 0},
                                           PiecesCase{"Small_M1000_gates_nobias", 1000, false, 0},
                                           PiecesCase{"Small_M1000_identity_bias", 1000, true, 1},
                                           PiecesCase{"M2085_identity_nobias", 2085, false, 1}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace seqmix::test
