// Every CUTLASS configuration the chains' forward GEMMs can run in (gemm_tiles.hpp: tile,
// schedule, cluster, and the tile scheduler's raster order and swizzle) against the float64
// oracle, at row counts that fill no tile (1, 1000) and a width that is no multiple of
// 128. The per-shape dispatch picks among these; the timing test measures them. Named
// Small* so the GPU check runs them under compute-sanitizer.
#include <cuda_runtime.h>

#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/chains/gemm_tiles.hpp"
#include "cuda_util.hpp"
#include "seqmix/chains.hpp"

namespace seqmix::test {
namespace {

constexpr int64_t kWidth = 264, kDepth = 200;

// The scheduler variants tried with every tile: the default, and both raster orders with
// a swizzle (a reordering of the tiles must not change what each one computes).
std::vector<cuda::GemmSchedule> schedules(cuda::GemmTile tile) {
  return {{tile, cuda::Raster::heuristic, 1}, {tile, cuda::Raster::along_n, 2}, {tile, cuda::Raster::along_m, 8}};
}

// The per-column vectors of a chain (bias, activation code, scale) in one f32 device
// buffer, as launch_projection.cu fills them.
struct DeviceColumns {
  float* data = nullptr;
  DeviceColumns(const std::vector<ProjectionSegment>& segments, const std::vector<double>& bias) {
    const int64_t n = static_cast<int64_t>(bias.size());
    std::vector<float> host(3 * n);
    int64_t c = 0;
    for (const auto& s : segments)
      for (int64_t j = 0; j < s.width; ++j, ++c) {
        host[c] = static_cast<float>(bias[c]);
        host[n + c] = static_cast<float>(static_cast<int>(s.activation));
        host[2 * n + c] = s.activation == Activation::logsigmoid ? static_cast<float>(1.0 / s.tau) : 1.f;
      }
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(float)));
    cuda_ok(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceColumns() { cudaFree(data); }
  DeviceColumns(const DeviceColumns&) = delete;
  DeviceColumns& operator=(const DeviceColumns&) = delete;
  cuda::ColumnEpilogue epilogue(int64_t n) const { return {data, data + n, data + 2 * n}; }
};

// act_s(x·Wᵀ + b) of `segments` in float64 through the oracle, as one [M, Σ widths] tensor.
HostTensor oracle(const HostTensor& x, const HostTensor& w, const std::optional<HostTensor>& bias,
                  const std::vector<ProjectionSegment>& segments, int64_t M) {
  auto f64 = [](const HostTensor& t) {
    HostTensor copy(t.view.shape, DType::f64);
    copy.set(t.values());
    return copy;
  };
  int64_t width = 0;
  for (const auto& s : segments) width += s.width;
  HostTensor x64 = f64(x), w64 = f64(w), y64({M, width}, DType::f64);
  std::optional<HostTensor> b64;
  if (bias) b64.emplace(f64(*bias));
  std::vector<Tensor> outputs;
  int64_t first = 0;
  for (const auto& s : segments) {
    Tensor v = y64.view;
    v.data = static_cast<double*>(y64.view.data) + first;
    v.shape = {M, s.width};
    outputs.push_back(v);
    first += s.width;
  }
  ProjectionChainOptions reference;
  reference.impl = Impl::reference;
  projection_chain_forward(x64, w64, b64 ? std::optional<Tensor>(b64->view) : std::nullopt, segments, outputs,
                           reference);
  return y64;
}

TEST(ChainsCudaTiles, SmallEveryNtTileMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<ProjectionSegment> identity = {{kWidth, Activation::identity, 1.0}};
  for (int64_t M : {1, 1000}) {
    HostTensor x = uniform({M, kDepth}, DType::bf16), w = uniform({kWidth, kDepth}, DType::bf16);
    const HostTensor want = oracle(x, w, std::nullopt, identity, M);
    DeviceTensor d_x(x), d_w(w);
    for (int t = 0; t < cuda::kGemmTiles; ++t)
      for (const cuda::GemmSchedule& s : schedules(static_cast<cuda::GemmTile>(t))) {
        HostTensor y = poisoned({M, kWidth}, DType::bf16);
        DeviceTensor d_y(y);
        cuda::gemm_nt_bf16_scheduled(s, M, kWidth, kDepth, {d_x.ptr, kDepth}, {d_w.ptr, kDepth},
                                     {d_y.ptr, kWidth}, nullptr);
        EXPECT_LT(rel_err(d_y.values(y), want.values()), tolerance(DType::bf16))
            << cuda::gemm_tile_name(s.tile) << ", raster " << static_cast<int>(s.raster) << ", swizzle "
            << s.swizzle << ", M " << M;
      }
  }
}

TEST(ChainsCudaTiles, SmallEveryActivationTileMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // Every activation, segment edges off the tile edges; weights scaled so the
  // pre-activations span several units.
  const std::vector<ProjectionSegment> segments = {{64, Activation::identity, 1.0},
                                                   {48, Activation::silu, 1.0},
                                                   {40, Activation::sigmoid, 1.0},
                                                   {56, Activation::logsigmoid, 16.0},
                                                   {56, Activation::softplus, 1.0}};
  for (int64_t M : {1, 1000}) {
    HostTensor x = uniform({M, kDepth}, DType::bf16), w = uniform({kWidth, kDepth}, DType::bf16, -0.2, 0.2);
    std::optional<HostTensor> bias;
    bias.emplace(uniform({kWidth}, DType::bf16));
    const HostTensor want = oracle(x, w, bias, segments, M);
    DeviceTensor d_x(x), d_w(w);
    const DeviceColumns columns(segments, bias->values());
    for (int t = 0; t < cuda::kGemmTiles; ++t) {
      if (!cuda::activation_tile_built(static_cast<cuda::GemmTile>(t))) continue;
      for (const cuda::GemmSchedule& s : schedules(static_cast<cuda::GemmTile>(t))) {
        HostTensor y = poisoned({M, kWidth}, DType::bf16);
        DeviceTensor d_y(y);
        cuda::activation_gemm_bf16_scheduled(s, M, kWidth, kDepth, {d_x.ptr, kDepth}, {d_w.ptr, kDepth},
                                             {d_y.ptr, kWidth}, columns.epilogue(kWidth), nullptr);
        EXPECT_LT(rel_err(d_y.values(y), want.values()), tolerance(DType::bf16))
            << cuda::gemm_tile_name(s.tile) << ", raster " << static_cast<int>(s.raster) << ", swizzle "
            << s.swizzle << ", M " << M;
      }
    }
  }
}

// A tile with no activation kernel is refused by name, before anything is launched.
TEST(ChainsCudaTiles, ActivationNamesAnUnbuiltTile) {
  for (int t = 0; t < cuda::kGemmTiles; ++t) {
    const auto tile = static_cast<cuda::GemmTile>(t);
    if (cuda::activation_tile_built(tile)) continue;
    EXPECT_SEQMIX_ERROR(cuda::activation_gemm_bf16_scheduled({tile}, 8, 8, 8, {}, {}, {}, {}, nullptr),
                        std::string("no activation kernel for ") + cuda::gemm_tile_name(tile));
  }
}

// The dispatch's 256 × 192 tile through gemm_nt_bf16 (the entry the chains call) on shapes
// it takes that fill no tile, against the float64 oracle: 3100 rows (a partial 256-row band,
// above the 3k-token threshold: along N), 4104 columns (21 column tiles of 192, the last 72
// wide); 2000 rows (below it: along M), 6160 columns (GLA's width, the last tile 16 wide);
// depth 200 (a partial 64-deep k-block). Not Small: the oracle takes seconds.
// The same for the 256 × 160 tile (SEQMIX_CHAINS_TILE_160, on by default): 3100 × 4104 takes
// it (3 rounds of 26 column tiles, the last 104 wide, against 256 × 192's 3 rounds of 22).
void expect_dispatch_matches_oracle(int64_t M, int64_t N, cuda::GemmTile tile) {
  const cuda::GemmSchedule schedule = cuda::forward_schedule(M, N, kDepth);
  ASSERT_EQ(schedule.tile, tile) << M << " x " << N;
  const std::vector<ProjectionSegment> identity = {{N, Activation::identity, 1.0}};
  HostTensor x = uniform({M, kDepth}, DType::bf16), w = uniform({N, kDepth}, DType::bf16);
  const HostTensor want = oracle(x, w, std::nullopt, identity, M);
  DeviceTensor d_x(x), d_w(w);
  HostTensor y = poisoned({M, N}, DType::bf16);
  DeviceTensor d_y(y);
  cuda::gemm_nt_bf16(M, N, kDepth, {d_x.ptr, kDepth}, {d_w.ptr, kDepth}, {d_y.ptr, N}, nullptr);
  EXPECT_LT(rel_err(d_y.values(y), want.values()), tolerance(DType::bf16))
      << cuda::gemm_tile_name(tile) << ", " << M << " x " << N
      << (schedule.raster == cuda::Raster::along_m ? " along M" : " along N");
}

TEST(ChainsCudaTiles, WideTileThroughTheDispatchMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  setenv("SEQMIX_CHAINS_TILE_160", "0", 1);
  for (const auto [M, N] : {std::pair<int64_t, int64_t>{3100, 4104}, {2000, 6160}})
    expect_dispatch_matches_oracle(M, N, cuda::GemmTile::cooperative_256x192_cluster2x1);
  unsetenv("SEQMIX_CHAINS_TILE_160");
}

TEST(ChainsCudaTiles, Tile160ThroughTheDispatchMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  expect_dispatch_matches_oracle(3100, 4104, cuda::GemmTile::cooperative_256x160_cluster2x1);
}

// The forward schedule by rounds (SEQMIX_CHAINS_FORWARD_ROUNDS=1) on a 132-SM H100, at
// issue 6's widths: a swizzle of 2 where it costs no round (Gated DeltaNet's 97 column tiles
// of 128 at 8192 tokens: 24 rounds either way), 1 where padding the column tiles to an even
// count would add one (GLA's 49: 13 rounds against 12); above 16k tokens 256 × 128 where it
// needs fewer rounds than 128 × 256 (GLA 32768: 48 against 49). Skipped on other devices.
TEST(ChainsCudaTiles, ForwardScheduleCountsRounds) {
  const int sms = cuda::dispatch_sm_count();
  if (sms != 132) GTEST_SKIP() << "the expected schedules are an H100's (132 SMs), this device has " << sms;
  setenv("SEQMIX_CHAINS_FORWARD_ROUNDS", "1", 1);
  setenv("SEQMIX_CHAINS_WIDE_TILE", "0", 1);  // the tall and default tiles' rounds
  setenv("SEQMIX_CHAINS_TILE_160", "0", 1);
  const auto tall = cuda::GemmTile::cooperative_256x128_cluster2x1;
  EXPECT_EQ(cuda::forward_schedule(8192, 12320, 2048).swizzle, 2);
  EXPECT_EQ(cuda::forward_schedule(8192, 6160, 2048).swizzle, 1);
  EXPECT_EQ(cuda::forward_schedule(8192, 6160, 2048).tile, tall);
  EXPECT_EQ(cuda::forward_schedule(32768, 6160, 2048).tile, tall);
  EXPECT_EQ(cuda::forward_schedule(32768, 12288, 2048).tile, cuda::GemmTile::cooperative_128x256_cluster2x1);
  EXPECT_EQ(cuda::forward_schedule(2048, 6160, 2048).raster, cuda::Raster::along_m);
  setenv("SEQMIX_CHAINS_FORWARD_ROUNDS", "0", 1);
  EXPECT_EQ(cuda::forward_schedule(8192, 6160, 2048).swizzle, 2);
  unsetenv("SEQMIX_CHAINS_FORWARD_ROUNDS");
  unsetenv("SEQMIX_CHAINS_WIDE_TILE");
  unsetenv("SEQMIX_CHAINS_TILE_160");
}

// forward_schedule(M, N, 2048) on `tile` or not; where on it, along M up to 3k tokens and
// along N above, with `swizzle`.
void expect_tile(cuda::GemmTile tile, int64_t M, int64_t N, bool taken, int swizzle) {
  const cuda::GemmSchedule s = cuda::forward_schedule(M, N, 2048);
  EXPECT_EQ(s.tile == tile, taken) << cuda::gemm_tile_name(tile) << ", " << M << " x " << N;
  if (!taken) return;
  EXPECT_EQ(s.raster, M <= 3072 ? cuda::Raster::along_m : cuda::Raster::along_n) << M << " x " << N;
  EXPECT_EQ(s.swizzle, swizzle) << M << " x " << N;
}

// The 256 × 192 tile (on unless SEQMIX_CHAINS_WIDE_TILE=0) for the projections' GEMMs (N ≥
// 4096) above 3k tokens: up to 16k tokens along N with a swizzle of 2 where that adds no round
// (GDN's 65 column tiles pad to 66: 16 rounds at 8192 tokens either way), without one elsewhere
// (GLA's 33 pad to 34: 9 rounds against 8); above 16k tokens without a swizzle where the
// weights take at most 32 MiB (GLA's 25 MB, not GDN's 50 MB); up to 3k tokens along M where
// its rounds are at most 2/3 of the tall tile's; never for o_proj's 2048 columns.
// Skipped on other devices. (With the 256 × 160 tile's comparison off: the test below.)
TEST(ChainsCudaTiles, ForwardScheduleTakesTheWideTile) {
  const int sms = cuda::dispatch_sm_count();
  if (sms != 132) GTEST_SKIP() << "the expected schedules are an H100's (132 SMs), this device has " << sms;
  setenv("SEQMIX_CHAINS_TILE_160", "0", 1);  // the rules before the 256 × 160 tile's comparison
  const auto expect = [](int64_t M, int64_t N, bool is_wide, int swizzle) {
    expect_tile(cuda::GemmTile::cooperative_256x192_cluster2x1, M, N, is_wide, swizzle);
  };
  expect(8192, 12320, true, 2);
  expect(32768, 12320, false, 0);
  expect(8192, 6160, true, 1);
  expect(32768, 6160, true, 1);
  expect(2048, 6160, true, 1);   // 2 rounds against the tall tile's 3
  expect(2048, 12320, true, 1);  // 4 against 6
  expect(1000, 6160, true, 1);   // 1 against 2
  expect(256, 6160, false, 0);   // 1 round either way: 33 wide tiles would leave 99 SMs idle
  expect(8192, 2048, false, 0);
  expect(2048, 2048, false, 0);
  setenv("SEQMIX_CHAINS_WIDE_TILE", "0", 1);
  expect(8192, 12320, false, 0);
  unsetenv("SEQMIX_CHAINS_WIDE_TILE");
  unsetenv("SEQMIX_CHAINS_TILE_160");
}

// The 256 × 160 tile above 3k tokens (N ≥ 4096) where its rounds hold less work (rounds × tile
// area) than the rules above choose: GDN's 12320 columns (77 column tiles) at 8192 tokens (19
// rounds of 160 against 16 of 192: 3040 against 3072 column-rounds) and 32768 (75 against the
// tall tile's 95 rounds of 128); GLA's 6160 at 32768 (38 × 160 against 32 × 192), not at 8192
// (10 × 160 against 8 × 192) or 4096; a swizzle of 2 up to 16k tokens where it adds no round;
// never at 3k tokens or fewer. Skipped on other devices.
TEST(ChainsCudaTiles, ForwardScheduleTakesTheTile160) {
  const int sms = cuda::dispatch_sm_count();
  if (sms != 132) GTEST_SKIP() << "the expected schedules are an H100's (132 SMs), this device has " << sms;
  const auto expect = [](int64_t M, int64_t N, bool is_160, int swizzle) {
    expect_tile(cuda::GemmTile::cooperative_256x160_cluster2x1, M, N, is_160, swizzle);
  };
  expect(8192, 12320, true, 2);
  expect(16384, 12320, true, 2);
  expect(32768, 12320, true, 1);
  expect(32768, 12288, true, 1);  // GDN's identity columns alone (the gates split off)
  expect(32768, 6160, true, 1);
  expect(8192, 6160, false, 0);
  expect(4096, 6160, false, 0);
  expect(4096, 12320, false, 0);
  expect(2048, 12320, false, 0);
  expect(8192, 2048, false, 0);
  setenv("SEQMIX_CHAINS_TILE_160", "0", 1);
  expect(8192, 12320, false, 0);
  unsetenv("SEQMIX_CHAINS_TILE_160");
}

}  // namespace
}  // namespace seqmix::test
