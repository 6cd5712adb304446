// The CUDA gated scan against the float64 oracle. Cases named Small* are the ones the
// GPU check runs under compute-sanitizer.
#include "cuda_util.hpp"
#include "seqmix/gated_scan.hpp"

namespace seqmix::test {
namespace {

struct GpuScanCase {
  const char* name;
  int64_t B, T, D;
  DType dtype;
  bool gated, with_state;
  Decay decay;
  std::vector<int64_t> cu;
  bool interleaved = false;  // a, b, z are column blocks of one [B, T, 3D] tensor (a GEMM's output)
  bool split = true;         // give the forward a workspace (short batches are split in time)
  bool keep_states = true;   // the forward keeps tile states for the backward (else it recomputes)
};

void PrintTo(const GpuScanCase& c, std::ostream* os) { *os << c.name; }

// Inputs on the host (the oracle's) and their device copies.
struct GpuScanData {
  std::vector<HostTensor> host;  // a, b, z, h0, cu (or the interleaved abz)
  int64_t N;
};

class GatedScanCuda : public ::testing::TestWithParam<GpuScanCase> {};

TEST_P(GatedScanCuda, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuScanCase c = GetParam();
  const int64_t N = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  const std::vector<int64_t> shape{c.B, c.T, c.D};
  HostTensor abz = uniform({c.B, c.T, 3 * c.D}, c.dtype);
  {  // decays in range for their form, in the first column block
    std::vector<double> v = abz.values();
    for (size_t r = 0; r < v.size() / (3 * c.D); ++r)
      for (int64_t d = 0; d < c.D; ++d) {
        double& x = v[r * 3 * c.D + d];
        x = c.decay == Decay::log ? x - 1.0 : c.decay == Decay::logit ? 4 * x : 0.75 + 0.24 * x;
      }
    abz.set(v);
  }
  HostTensor h0 = uniform({N, c.D}, DType::f32), dy = uniform(shape, c.dtype), dhT = uniform({N, c.D}, DType::f32);
  HostTensor cu = offsets(c.cu.empty() ? std::vector<int64_t>{0, 1} : c.cu);
  // Column blocks of abz as [B, T, D] views (strided rows), or contiguous copies.
  auto block = [&](const Tensor& base, int k) {
    Tensor t = base;
    t.shape = shape;
    t.data = static_cast<char*>(base.data) + k * c.D * dtype_size(c.dtype);
    return t;
  };
  std::vector<HostTensor> parts;
  for (int k = 0; k < 3; ++k) {
    parts.emplace_back(shape, c.dtype);
    parts.back().set(core::to_dense<double>(block(abz.view, k)));
  }
  DeviceTensor d_abz(abz), d_h0(h0), d_dy(dy), d_dhT(dhT), d_cu(cu);
  DeviceTensor d_a(parts[0]), d_b(parts[1]), d_z(parts[2]);

  auto inputs = [&](bool device) {
    GatedScanInputs in;
    if (device && c.interleaved) {
      in.a = block(d_abz.view, 0), in.b = block(d_abz.view, 1), in.z = block(d_abz.view, 2);
    } else {
      in.a = device ? d_a.view : parts[0].view, in.b = device ? d_b.view : parts[1].view;
      in.z = device ? d_z.view : parts[2].view;
    }
    if (!c.gated) in.z.reset();
    if (c.with_state) in.initial_state = device ? d_h0.view : h0.view;
    if (!c.cu.empty()) in.cu_seqlens = device ? d_cu.view : cu.view;
    return in;
  };
  GatedScanOptions options;
  options.decay = c.decay;

  // Oracle.
  HostTensor y_ref(shape, c.dtype), hT_ref({N, c.D}, DType::f32);
  std::vector<HostTensor> g_ref;
  for (int k = 0; k < 3; ++k) g_ref.emplace_back(shape, c.dtype);
  g_ref.emplace_back(std::vector<int64_t>{N, c.D}, DType::f32);
  options.impl = Impl::reference;
  gated_scan_forward(inputs(false), {y_ref.view, hT_ref.view}, options);
  GatedScanGrads ref_grads{g_ref[0].view, g_ref[1].view};
  if (c.gated) ref_grads.dz = g_ref[2].view;
  if (c.with_state) ref_grads.d_initial_state = g_ref[3].view;
  gated_scan_backward(inputs(false), dy, dhT.view, ref_grads, options);

  // Device, outputs poisoned.
  options.impl = Impl::automatic;
  HostTensor y = poisoned(shape, c.dtype), hT = poisoned({N, c.D}, DType::f32);
  std::vector<HostTensor> g;
  for (int k = 0; k < 3; ++k) g.push_back(poisoned(shape, c.dtype));
  g.push_back(poisoned({N, c.D}, DType::f32));
  DeviceTensor d_y(y), d_hT(hT), d_da(g[0]), d_db(g[1]), d_dz(g[2]), d_dh0(g[3]);
  HostTensor workspace = poisoned({gated_scan_workspace_size(c.B, c.T, N, c.D)}, DType::f32);
  DeviceTensor d_workspace(workspace);
  HostTensor states = poisoned(gated_scan_tile_states_shape(c.B, c.T, N, c.D), DType::f32);
  DeviceTensor d_states(states);
  GatedScanOutputs out{d_y.view, d_hT.view};
  if (c.split) out.workspace = d_workspace.view;
  if (c.keep_states) out.tile_states = d_states.view;
  gated_scan_forward(inputs(true), out, options);
  GatedScanGrads grads{d_da.view, d_db.view};
  if (c.keep_states) grads.tile_states = d_states.view;
  if (c.gated) grads.dz = d_dz.view;
  if (c.with_state) grads.d_initial_state = d_dh0.view;
  grads.workspace = d_workspace.view;
  gated_scan_backward(inputs(true), d_dy, d_dhT.view, grads, options);

  const double tol = tolerance(c.dtype);
  EXPECT_LT(rel_err(d_y.values(y), y_ref.values()), tol);
  EXPECT_LT(rel_err(d_hT.values(hT), hT_ref.values()), 1e-5);
  EXPECT_LT(rel_err(d_da.values(g[0]), g_ref[0].values()), tol);
  EXPECT_LT(rel_err(d_db.values(g[1]), g_ref[1].values()), tol);
  if (c.gated) EXPECT_LT(rel_err(d_dz.values(g[2]), g_ref[2].values()), tol);
  if (c.with_state) EXPECT_LT(rel_err(d_dh0.values(g[3]), g_ref[3].values()), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GatedScanCuda,
    ::testing::Values(
        GpuScanCase{"Small_f32_T1", 2, 1, 64, DType::f32, true, true, Decay::direct, {}},
        GpuScanCase{"Small_bf16_T63_D5", 2, 63, 5, DType::bf16, true, true, Decay::log, {}},
        GpuScanCase{"Small_f16_varlen", 1, 300, 40, DType::f16, true, true, Decay::direct, {0, 1, 129, 300}},
        GpuScanCase{"Small_bf16_interleaved", 2, 200, 64, DType::bf16, true, false, Decay::logit, {}, true},
        GpuScanCase{"f32_T1000_nogate", 3, 1000, 48, DType::f32, false, false, Decay::direct, {}},
        // Enough channels for the wide staged layouts on 132 SMs (the others run narrow).
        GpuScanCase{"Small_bf16_wide", 3, 130, 2888, DType::bf16, true, true, Decay::log, {}},
        // Three sequences of one slab: split in time, tiles copied by the copy engine.
        GpuScanCase{"Small_bf16_batch_split", 3, 700, 72, DType::bf16, true, true, Decay::log, {}},
        GpuScanCase{"Small_bf16_recompute_unsplit", 2, 700, 24, DType::bf16, true, true, Decay::logit, {}, false, false,
                    false},
        GpuScanCase{"bf16_recompute_split_varlen", 1, 3000, 32, DType::bf16, true, true, Decay::log, {0, 1000, 2999, 3000},
                    false, true, false},
        GpuScanCase{"bf16_T1000_log_varlen", 1, 1000, 256, DType::bf16, true, true, Decay::log, {0, 7, 500, 1000}},
        GpuScanCase{"f16_T2048_D1000", 2, 2048, 1000, DType::f16, false, true, Decay::log, {}},
        GpuScanCase{"bf16_interleaved_T4096", 1, 4096, 96, DType::bf16, true, true, Decay::logit, {}, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace seqmix::test
