// The CUDA gated linear attention against the float64 oracle. Cases named Small* are the
// ones the GPU check runs under compute-sanitizer.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/gla/params.hpp"
#include "cuda/gla/profile.hpp"
#include "cuda_util.hpp"
#include "seqmix/gla.hpp"

namespace seqmix::test {
namespace {

struct GpuGlaCase {
  const char* name;
  int64_t B, T, H, K, V;
  DType dtype;
  bool with_state;
  double g_lo, g_hi;        // log decays drawn uniformly from [g_lo, g_hi)
  std::vector<int64_t> cu;  // non-empty: variable length with these offsets (B = 1)
  // Below zero: the tokens of every odd chunk (t / 64 odd) take log decays from [g_strong, g_lo)
  // instead, so that one walk mixes chunks the forward factors whole with chunks it cannot.
  double g_strong = 0.0;
  double k_scale = 1.0;  // keys drawn from [−k_scale, k_scale)
};

void PrintTo(const GpuGlaCase& c, std::ostream* os) { *os << c.name; }

class GlaCuda : public ::testing::TestWithParam<GpuGlaCase> {};

// The case's log decays [B, T, H, K] (GpuGlaCase::g_lo, g_hi, g_strong).
HostTensor decays(const GpuGlaCase& c, const std::vector<int64_t>& shape) {
  HostTensor g = uniform(shape, c.dtype, c.g_lo, c.g_hi);
  if (c.g_strong >= 0.0) return g;
  std::vector<double> x = g.values();
  std::uniform_real_distribution<double> strong(c.g_strong, c.g_lo);
  const int64_t row = c.H * c.K;  // one token's decays
  for (size_t i = 0; i < x.size(); ++i)
    if ((static_cast<int64_t>(i) / row % c.T) / cuda::kGlaChunk % 2 == 1) x[i] = strong(rng());
  g.set(x);
  return g;
}

// The chunks of all of one case's sequences together.
int64_t sequence_chunks(const GpuGlaCase& c) {
  const int64_t sequences = c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1;
  int64_t chunks = 0;
  for (int64_t n = 0; n < sequences; ++n) {
    const int64_t length = c.cu.empty() ? c.T : c.cu[n + 1] - c.cu[n];
    chunks += (length + cuda::kGlaChunk - 1) / cuda::kGlaChunk;
  }
  return chunks;
}

// One case's fresh random inputs, on the host (for the oracle) and on the device.
struct GlaCaseInputs {
  const GpuGlaCase& c;
  int64_t N;
  std::vector<int64_t> key_shape, value_shape, state_shape;
  HostTensor q, k, v, g, h0, cu;
  DeviceTensor d_q, d_k, d_v, d_g, d_h0, d_cu;

  explicit GlaCaseInputs(const GpuGlaCase& c_)
      : c(c_),
        N(c.cu.empty() ? c.B : static_cast<int64_t>(c.cu.size()) - 1),
        key_shape{c.B, c.T, c.H, c.K},
        value_shape{c.B, c.T, c.H, c.V},
        state_shape{N, c.H, c.K, c.V},
        q(uniform(key_shape, c.dtype)),
        k(uniform(key_shape, c.dtype, -c.k_scale, c.k_scale)),
        v(uniform(value_shape, c.dtype)),
        g(decays(c, key_shape)),
        h0(uniform(state_shape, DType::f32)),
        cu(offsets(c.cu.empty() ? std::vector<int64_t>{0, 1} : c.cu)),
        d_q(q), d_k(k), d_v(v), d_g(g), d_h0(h0), d_cu(cu) {}

  GlaInputs inputs(bool device) const {
    GlaInputs in{device ? d_q.view : q.view, device ? d_k.view : k.view, device ? d_v.view : v.view,
                 device ? d_g.view : g.view};
    if (c.with_state) in.initial_state = device ? d_h0.view : h0.view;
    if (!c.cu.empty()) in.cu_seqlens = device ? d_cu.view : cu.view;
    return in;
  }
  GlaOptions options(Impl impl) const {
    GlaOptions options;
    options.scale = 1.0 / std::sqrt(static_cast<double>(c.K));
    options.impl = impl;
    return options;
  }
};

// One test's choice of each kernel form (params.hpp), restored at the test's end.
template <class T, T (*get)(), void (*set)(T)>
struct Selected : Chosen<T> {
  explicit Selected(T value) : Chosen<T>(get, set, value) {}
};
// How the forward forms A's diagonal sub-chunks.
using ForwardDiagonal = Selected<cuda::GlaForwardDiagonal, cuda::gla_forward_diagonal, cuda::gla_set_forward_diagonal>;
// How the backward's gradient kernel forms the pairs inside each sub-chunk.
using BackwardDiagonal =
    Selected<cuda::GlaBackwardDiagonal, cuda::gla_backward_diagonal, cuda::gla_set_backward_diagonal>;
// How the gradient kernel's token walks read their tiles.
using BackwardWalk = Selected<cuda::GlaBackwardWalk, cuda::gla_backward_walk, cuda::gla_set_backward_walk>;
// The gradient kernel's tail (dg's sums, the quad operands' walk).
using BackwardTail = Selected<cuda::GlaBackwardTail, cuda::gla_backward_tail, cuda::gla_set_backward_tail>;
// The forward walks' tiling of the state and o.
using ForwardTiling = Selected<cuda::GlaForwardTiling, cuda::gla_forward_tiling, cuda::gla_set_forward_tiling>;
// The outputs pass's walkers.
using ForwardWalkers = Selected<cuda::GlaForwardWalkers, cuda::gla_forward_walkers, cuda::gla_set_forward_walkers>;
// Whether the outputs pass factors chunks whole where their decays allow.
using ForwardFactored = Selected<bool, cuda::gla_forward_factored, cuda::gla_set_forward_factored>;
// Whether the outputs pass runs with two chunks in flight (forward_pipelined.cuh).
using ForwardPipelined = Selected<bool, cuda::gla_forward_pipelined, cuda::gla_set_forward_pipelined>;
// How the outputs pass writes o.
using ForwardOutput = Selected<cuda::GlaForwardOutput, cuda::gla_forward_output, cuda::gla_set_forward_output>;
// The stages of the backward's dL/dS walk.
using BackwardStateStages = Selected<int, cuda::gla_backward_state_stages, cuda::gla_set_backward_state_stages>;
// Whether the gradient kernel's last chunks start beside the dL/dS walk.
using BackwardEarlyStart = Selected<bool, cuda::gla_backward_early_start, cuda::gla_set_backward_early_start>;
// Whether the gradient kernel's value slices of S_0 and dL/dS come by the copy engine.
using BackwardTableCopies = Selected<bool, cuda::gla_backward_table_copies, cuda::gla_set_backward_table_copies>;
// Whether the value loop holds k_end's and do's fragments.
using BackwardHeldOperands = Selected<bool, cuda::gla_backward_held_operands, cuda::gla_set_backward_held_operands>;

// The oracle's forward of one case's inputs, and the device's (by the forms selected) checked
// against it.
struct ForwardCheck {
  const GlaCaseInputs& in;
  HostTensor o_ref, hT_ref;

  explicit ForwardCheck(const GlaCaseInputs& in_)
      : in(in_), o_ref(in.value_shape, in.c.dtype), hT_ref(in.state_shape, DType::f32) {
    gla_forward(in.inputs(false), {o_ref.view, hT_ref.view}, in.options(Impl::reference));
  }
  // One device forward into poisoned outputs, o and the final state against the oracle's;
  // returns the device's o.
  std::vector<double> device() const {
    HostTensor o = poisoned(in.value_shape, in.c.dtype), hT = poisoned(in.state_shape, DType::f32);
    DeviceTensor d_o(o), d_hT(hT);
    gla_forward(in.inputs(true), {d_o.view, d_hT.view}, in.options(Impl::automatic));
    const double tol = tolerance(in.c.dtype);
    const std::vector<double> out = d_o.values(o);
    EXPECT_LT(rel_err(out, o_ref.values()), tol);
    EXPECT_LT(rel_err(d_hT.values(hT), hT_ref.values()), tol);
    return out;
  }
};

// The outputs pass's default form: tall tiling, tensor-core diagonal, paired walkers; the form
// with two chunks in flight (which takes its place where it applies) off, so that the tests
// that name this form run its kernels.
struct DefaultForwardForm {
  const ForwardTiling tiling{cuda::GlaForwardTiling::tall};
  const ForwardDiagonal diagonal{cuda::GlaForwardDiagonal::tensor_cores};
  const ForwardWalkers walkers{cuda::GlaForwardWalkers::paired};
  const ForwardPipelined pipelined{false};
};

// The forward (output and final state) against the oracle, by the forms selected.
void forward_matches_oracle(const GpuGlaCase& c) {
  const GlaCaseInputs in(c);
  ForwardCheck(in).device();
}

TEST_P(GlaCuda, ForwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::cuda_cores);
  forward_matches_oracle(GetParam());
}

// The diagonal sub-chunks' quad pairs on the tensor cores.
TEST_P(GlaCuda, ForwardTensorDiagonalMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::tensor_cores);
  forward_matches_oracle(GetParam());
}

// The same with each warp on 32 rows of the state and of o (the default), by both diagonals;
// the wide tiling by the tensor-core diagonal.
TEST_P(GlaCuda, ForwardTallTilingMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  {
    const ForwardTiling tiling(cuda::GlaForwardTiling::wide);
    const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::tensor_cores);
    forward_matches_oracle(GetParam());
  }
  const ForwardTiling tiling(cuda::GlaForwardTiling::tall);
  {
    const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::tensor_cores);
    forward_matches_oracle(GetParam());
  }
  const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::cuda_cores);
  forward_matches_oracle(GetParam());
}

// The outputs pass with the single walkers (one channel and the whole chunk a thread), the
// tall tiling's form before the paired walkers became its default (ForwardMatchesOracle runs
// those, the walkers in use with the tensor-core diagonal and the tall tiling).
TEST_P(GlaCuda, ForwardSingleWalkersMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const ForwardTiling tiling(cuda::GlaForwardTiling::tall);
  const ForwardDiagonal diagonal(cuda::GlaForwardDiagonal::tensor_cores);
  const ForwardWalkers walkers(cuda::GlaForwardWalkers::single);
  forward_matches_oracle(GetParam());
}

// o by direct stores and through the staging boxes and tensor copies (the default form's
// default), each against the oracle and the two bit for bit (the same values rounded the same
// way); with K ≤ 128 the staged kernel must have run (K = 256 writes float partials instead).
TEST_P(GlaCuda, ForwardStagedOutputMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  const DefaultForwardForm form;
  const GlaCaseInputs in(c);
  const ForwardCheck check(in);
  std::vector<double> direct;
  {
    const ForwardOutput output(cuda::GlaForwardOutput::direct);
    direct = check.device();
  }
  const ForwardOutput output(cuda::GlaForwardOutput::staged);
  cuda::gla_profile_start();
  const std::vector<double> staged = check.device();
  bool ran_staged = false;
  for (const auto& l : cuda::gla_profile_stop().launches)
    ran_staged = ran_staged || l.kernel == "gla forward (paired walkers, staged output)";
  EXPECT_EQ(staged, direct) << "staged o against direct";
  EXPECT_EQ(ran_staged, c.K <= 128) << "the staged outputs pass";
}

// The default form with chunks factored whole and without, each against the oracle. Profiled:
// in f16 no chunk is factored; in bf16 with every log decay ≥ −0.5 (|b| ≤ 46 in log2 units over a
// chunk) every chunk step of the outputs pass is; with strong decays in every other chunk
// (g_strong) some are and some are not.
TEST_P(GlaCuda, ForwardFactoredChunksMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  const DefaultForwardForm form;
  const GlaCaseInputs in(c);
  const ForwardCheck check(in);
  {
    const ForwardFactored factored(false);
    check.device();
  }
  const ForwardFactored factored(true);
  cuda::gla_profile_start();
  check.device();
  const uint64_t steps_factored = cuda::gla_profile_stop().phase_cycles[cuda::kGlaPhaseFactored];
  // The outputs pass's chunk steps: one walk a (key block, value block, head, sequence) over its chunks.
  const int64_t chunks = sequence_chunks(c);
  const int64_t value_blocks = c.V % 128 == 0 ? c.V / 128 : c.V / 64, key_blocks = c.K == 256 ? 2 : 1;
  const uint64_t steps = static_cast<uint64_t>(key_blocks * value_blocks * c.H * chunks);
  if (c.dtype == DType::f16) EXPECT_EQ(steps_factored, 0u) << "f16 chunks factored";
  else if (c.g_strong < 0.0)
    EXPECT_TRUE(steps_factored > 0 && steps_factored < steps) << steps_factored << " of " << steps;
  else if (c.g_lo >= -0.5) EXPECT_EQ(steps_factored, steps) << "chunk steps factored";
}

// The outputs pass with two chunks in flight against the oracle where it applies (bf16, K = 128,
// V a multiple of 128): every chunk of the mild cases walked by it, and in the cases with chunks
// it cannot factor (strong decays, huge keys) the rest of a segment by the outputs pass after it,
// from the chunk it stopped at. The chunk steps left to that pass, profiled: the steps with it
// less those of the default form's passes (pass 1 of a split, then every outputs step).
TEST_P(GlaCuda, ForwardPipelinedMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  const DefaultForwardForm form;
  const ForwardFactored factored(true);
  const GlaCaseInputs in(c);
  const ForwardCheck check(in);
  cuda::gla_profile_start();
  check.device();
  const uint64_t default_steps = cuda::gla_profile_stop().phase_cycles[cuda::kGlaPhaseSteps];
  const ForwardPipelined pipelined(true);
  cuda::gla_profile_start();
  check.device();
  const cuda::GlaProfile profile = cuda::gla_profile_stop();
  const bool applies = c.dtype == DType::bf16 && c.K == 128 && c.V % 128 == 0;
  bool ran = false;
  for (const auto& launch : profile.launches) ran = ran || launch.kernel == "gla forward (two chunks in flight)";
  EXPECT_EQ(ran, applies);
  if (!applies) return;
  const uint64_t outputs_steps = static_cast<uint64_t>((c.V / 128) * c.H * sequence_chunks(c));
  const uint64_t left = profile.phase_cycles[cuda::kGlaPhaseSteps] + outputs_steps - default_steps;
  if (c.g_strong < 0.0 || c.g_lo <= -5.0 || c.k_scale > 1e6) EXPECT_GT(left, 0u) << "no chunk left to the next pass";
  else if (c.g_lo >= -0.5) EXPECT_EQ(left, 0u) << "chunks left to the next pass";
}

// Every gradient (dq, dk, dv, dg, and d initial state with an initial state) against the
// oracle's backward, by the backward diagonal selected; the final state's gradient is given
// in the cases with an initial state.
// forward_first: the device forward runs first on the same inputs (its o and final state
// checked against the oracle too) and saves its chunk states into a poisoned table, which the
// backward reads; the backward's launches are returned (profiled), so a test can see whether
// it walked its own chunk states (and its phase counters). with_scores (with forward_first): the
// forward also saves its chunk scores into a poisoned table, which the backward reads too.
cuda::GlaProfile backward_matches_oracle(const GpuGlaCase& c, bool forward_first = false, bool with_scores = false) {
  const GlaCaseInputs in(c);
  const auto &key_shape = in.key_shape, &value_shape = in.value_shape, &state_shape = in.state_shape;
  HostTensor d_o = uniform(value_shape, c.dtype), dhT = uniform(state_shape, DType::f32);
  DeviceTensor dev_do(d_o), dev_dhT(dhT);
  const std::optional<Tensor> host_dhT = c.with_state ? std::optional<Tensor>(dhT.view) : std::nullopt;
  const std::optional<Tensor> device_dhT = c.with_state ? std::optional<Tensor>(dev_dhT.view) : std::nullopt;

  HostTensor dq_ref(key_shape, c.dtype), dk_ref(key_shape, c.dtype), dv_ref(value_shape, c.dtype),
      dg_ref(key_shape, c.dtype), dh0_ref(state_shape, DType::f32);
  GlaGrads ref{dq_ref.view, dk_ref.view, dv_ref.view, dg_ref.view};
  if (c.with_state) ref.d_initial_state = dh0_ref.view;
  gla_backward(in.inputs(false), d_o.view, host_dhT, ref, in.options(Impl::reference));

  HostTensor dq = poisoned(key_shape, c.dtype), dk = poisoned(key_shape, c.dtype),
             dv = poisoned(value_shape, c.dtype), dg = poisoned(key_shape, c.dtype),
             dh0 = poisoned(state_shape, DType::f32);
  DeviceTensor dev_dq(dq), dev_dk(dk), dev_dv(dv), dev_dg(dg), dev_dh0(dh0);
  GlaGrads grads{dev_dq.view, dev_dk.view, dev_dv.view, dev_dg.view};
  if (c.with_state) grads.d_initial_state = dev_dh0.view;
  const double tol = tolerance(c.dtype);
  GlaInputs device_in = in.inputs(true);
  HostTensor chunk_states = poisoned(gla_chunk_states_shape(device_in), c.dtype);
  HostTensor chunk_scores = poisoned(gla_chunk_scores_shape(device_in), c.dtype);
  DeviceTensor dev_chunk_states(chunk_states), dev_chunk_scores(chunk_scores);
  if (forward_first) {
    HostTensor o_ref(value_shape, c.dtype), hT_ref(state_shape, DType::f32);
    gla_forward(in.inputs(false), {o_ref.view, hT_ref.view}, in.options(Impl::reference));
    HostTensor o = poisoned(value_shape, c.dtype), hT = poisoned(state_shape, DType::f32);
    DeviceTensor dev_o(o), dev_hT(hT);
    GlaOutputs out{dev_o.view, dev_hT.view, dev_chunk_states.view};
    if (with_scores) out.chunk_scores = dev_chunk_scores.view;
    gla_forward(device_in, out, in.options(Impl::automatic));
    EXPECT_LT(rel_err(dev_o.values(o), o_ref.values()), tol) << "o";
    EXPECT_LT(rel_err(dev_hT.values(hT), hT_ref.values()), tol) << "final state";
    device_in.chunk_states = dev_chunk_states.view;
    if (with_scores) device_in.chunk_scores = dev_chunk_scores.view;
    cuda::gla_profile_start();
  }
  gla_backward(device_in, dev_do.view, device_dhT, grads, in.options(Impl::automatic));
  const cuda::GlaProfile profile = forward_first ? cuda::gla_profile_stop() : cuda::GlaProfile{};

  const double e_dq = rel_err(dev_dq.values(dq), dq_ref.values()), e_dk = rel_err(dev_dk.values(dk), dk_ref.values()),
               e_dv = rel_err(dev_dv.values(dv), dv_ref.values()), e_dg = rel_err(dev_dg.values(dg), dg_ref.values()),
               e_dh0 = c.with_state ? rel_err(dev_dh0.values(dh0), dh0_ref.values()) : 0.0;
  std::printf("  %s relative errors: dq %.2e dk %.2e dv %.2e dg %.2e d initial state %.2e\n", c.name, e_dq, e_dk,
              e_dv, e_dg, e_dh0);
  EXPECT_LT(e_dq, tol) << "dq";
  EXPECT_LT(e_dk, tol) << "dk";
  EXPECT_LT(e_dv, tol) << "dv";
  EXPECT_LT(e_dg, tol) << "dg";
  EXPECT_LT(e_dh0, tol) << "d initial state";
  return profile;
}

// The names of a profile's launches, in order.
std::vector<std::string> kernels(const cuda::GlaProfile& profile) {
  std::vector<std::string> names;
  for (const auto& l : profile.launches) names.push_back(l.kernel);
  return names;
}

TEST_P(GlaCuda, BackwardMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardDiagonal diagonal(cuda::GlaBackwardDiagonal::cuda_cores);
  backward_matches_oracle(GetParam());
}

// The gradient kernel with the pairs of different 4-token quads on the tensor cores, its
// token walks a quad at a time, dg summed on one thread a key channel (the narrow tail).
TEST_P(GlaCuda, BackwardTensorDiagonalMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardDiagonal diagonal(cuda::GlaBackwardDiagonal::tensor_cores);
  const BackwardWalk walk(cuda::GlaBackwardWalk::quads);
  const BackwardTail tail(cuda::GlaBackwardTail::narrow);
  backward_matches_oracle(GetParam());
}

// The same with the wide tail (the default): dg summed on every thread, the quad operands
// read a sub-chunk before they are stored.
TEST_P(GlaCuda, BackwardWideTailMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardDiagonal diagonal(cuda::GlaBackwardDiagonal::tensor_cores);
  const BackwardWalk walk(cuda::GlaBackwardWalk::quads);
  const BackwardTail tail(cuda::GlaBackwardTail::wide);
  backward_matches_oracle(GetParam());
}

// The backward with the tall tiling selected (the split's pass 1 takes it) and the wide one.
TEST_P(GlaCuda, BackwardTallTilingMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  {
    const ForwardTiling tiling(cuda::GlaForwardTiling::tall);
    backward_matches_oracle(GetParam());
  }
  const ForwardTiling tiling(cuda::GlaForwardTiling::wide);
  backward_matches_oracle(GetParam());
}

// The default backward with the dL/dS walk's copies three stages deep.
TEST_P(GlaCuda, BackwardThreeStateStagesMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardStateStages stages(3);
  backward_matches_oracle(GetParam());
}

// The forward saving every chunk's entering state (GlaOutputs::chunk_states) and the backward
// reading it instead of its chunk-state pass: o, the final state and every gradient against
// the oracle, and no walk of the forward's states in the backward (neither the chunk-state
// pass nor, when split, the segments' own end states), and one walk of dL/dS, split or not
// (the split's carried-in parts are added by the gradient kernel).
TEST_P(GlaCuda, SavedStatesMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::vector<std::string> launches = kernels(backward_matches_oracle(GetParam(), true));
  EXPECT_FALSE(launches.empty());
  for (const std::string& kernel : launches) {
    EXPECT_NE(kernel, "gla chunk states") << "the backward walked its states";
    EXPECT_NE(kernel, "gla forward segment states") << "the backward walked its segments";
  }
  EXPECT_EQ(std::count(launches.begin(), launches.end(), std::string("gla backward state gradients")), 1)
      << "walks of dL/dS";
}

// The forward saving every chunk's scores A beside its states (GlaOutputs::chunk_scores) and
// the backward reading them instead of forming A: o, the final state and every gradient against
// the oracle, and the gradient kernel that reads them launched. K = 256 (two key blocks) keeps
// no scores: its forward refuses the table.
TEST_P(GlaCuda, SavedScoresMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  if (c.K > 128) {
    const GlaCaseInputs in(c);
    const GlaInputs device_in = in.inputs(true);
    DeviceTensor o(HostTensor(in.value_shape, c.dtype));
    DeviceTensor states(HostTensor(gla_chunk_states_shape(device_in), c.dtype));
    DeviceTensor scores(HostTensor(gla_chunk_scores_shape(device_in), c.dtype));
    GlaOutputs out{o.view, std::nullopt, states.view};
    out.chunk_scores = scores.view;
    EXPECT_SEQMIX_ERROR(gla_forward(device_in, out, in.options(Impl::automatic)),
                        "argument 'chunk_scores': expected none with K = 256 (only K <= 128 saves them)");
    return;
  }
  const std::vector<std::string> launches = kernels(backward_matches_oracle(c, true, true));
  const std::string reader = "gla backward (quad walk, wide tail, saved scores)";
  EXPECT_EQ(std::count(launches.begin(), launches.end(), reader), 1) << "gradient kernels that read the saved scores";
}

// Whether the gradient kernel factors chunks whole where their decays allow.
using BackwardFactored = Selected<bool, cuda::gla_backward_factored, cuda::gla_set_backward_factored>;

// The backward given the forward's saved states and scores (the training default), with chunks
// factored whole and without, each against the oracle. Profiled: in f16 no gradient block is
// factored, nor with K = 256 (which saves no scores); in bf16 with every log decay ≥ −0.5 every
// block is; with strong decays in every other chunk (g_strong) some are and some are not, and so
// with keys of 2^38 whose decays pass the first vote: the full chunks' operands fail the second.
TEST_P(GlaCuda, BackwardFactoredChunksMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  const bool scores = c.K <= 128;
  {
    const BackwardFactored factored(false);
    const cuda::GlaProfile profile = backward_matches_oracle(c, true, scores);
    EXPECT_EQ(profile.phase_cycles[cuda::kGlaGradientFactored], 0u) << "blocks factored with the switch off";
  }
  const BackwardFactored factored(true);
  const cuda::GlaProfile profile = backward_matches_oracle(c, true, scores);
  const uint64_t blocks_factored = profile.phase_cycles[cuda::kGlaGradientFactored];
  // The gradient kernel's blocks: one a chunk and head (one key block with the scores).
  const uint64_t blocks = static_cast<uint64_t>(c.H * sequence_chunks(c));
  if (c.dtype == DType::f16 || !scores) EXPECT_EQ(blocks_factored, 0u) << "blocks factored";
  else if (c.g_strong < 0.0 || c.k_scale > 1.0)
    EXPECT_TRUE(blocks_factored > 0 && blocks_factored < blocks) << blocks_factored << " of " << blocks;
  else if (c.g_lo >= -0.5) EXPECT_EQ(blocks_factored, blocks) << "gradient blocks factored";
}

// The forward's saved chunk states (GlaOutputs::chunk_states, written a tile a tensor copy)
// against the states a float64 token-by-token recurrence reaches at each chunk's start, from
// the same rounded inputs and initial state, within the table's dtype bound; the table is
// poisoned first, and the slots past a shorter sequence's chunks must stay poisoned (nothing
// written there, and no box's padding columns written anywhere).
TEST_P(GlaCuda, SavedStatesMatchRecurrence) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuGlaCase& c = GetParam();
  const GlaCaseInputs in(c);
  const GlaInputs device_in = in.inputs(true);
  const std::vector<int64_t> shape = gla_chunk_states_shape(device_in);  // [N, H, max_chunks, K, V]
  HostTensor o = poisoned(in.value_shape, c.dtype), states = poisoned(shape, c.dtype);
  DeviceTensor d_o(o), d_states(states);
  gla_forward(device_in, GlaOutputs{d_o.view, std::nullopt, d_states.view}, in.options(Impl::automatic));
  const std::vector<double> table = d_states.values(states), q = in.q.values(), k = in.k.values(),
                            v = in.v.values(), g = in.g.values(), h0 = in.h0.values();
  const int64_t H = c.H, K = c.K, V = c.V, max_chunks = shape[2];
  std::vector<double> want(table.size(), std::nan("")), S(K * V);
  for (int64_t n = 0; n < in.N; ++n) {
    const int64_t start = c.cu.empty() ? 0 : c.cu[n], length = c.cu.empty() ? c.T : c.cu[n + 1] - c.cu[n];
    const int64_t batch = c.cu.empty() ? n : 0;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < K * V; ++i) S[i] = c.with_state ? h0[(n * H + h) * K * V + i] : 0.0;
      for (int64_t t = 0; t < length; ++t) {
        const int64_t token = (batch * c.T + start + t) * H + h;
        if (t % cuda::kGlaChunk == 0)
          std::copy(S.begin(), S.end(), want.begin() + ((n * H + h) * max_chunks + t / cuda::kGlaChunk) * K * V);
        for (int64_t a = 0; a < K; ++a)
          for (int64_t b = 0; b < V; ++b)
            S[a * V + b] = std::exp(g[token * K + a]) * S[a * V + b] + k[token * K + a] * v[token * V + b];
      }
    }
  }
  double error = 0.0, norm = 0.0;
  int64_t unexpected = 0;  // written where nothing should be, or poisoned where a state should be
  for (size_t i = 0; i < table.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(table[i])) {
      unexpected += std::isnan(want[i]) != std::isnan(table[i]);
      continue;
    }
    error += (table[i] - want[i]) * (table[i] - want[i]), norm += want[i] * want[i];
  }
  EXPECT_EQ(unexpected, 0) << "table elements written outside the chunks' states, or states missing";
  EXPECT_LT(std::sqrt(error / std::max(norm, 1e-300)), tolerance(c.dtype)) << "chunk states";
}

// The default backward with the gradient kernel launched after the dL/dS walk, its blocks in
// chunk order (the default starts the last chunks first, beside the walk; params.hpp
// gla_backward_early_start).
TEST_P(GlaCuda, BackwardAfterTheWalkMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardEarlyStart early(false);
  backward_matches_oracle(GetParam());
}

// The default backward with the value slices of S_0 and dL/dS copied as cp.async pieces (the
// default copies them by the copy engine; params.hpp gla_backward_table_copies).
TEST_P(GlaCuda, BackwardTablePiecesMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardTableCopies copies(false);
  backward_matches_oracle(GetParam());
}

// The default backward with the value loop's operands read from shared memory at each product
// (the default holds k_end's and do's fragments; params.hpp gla_backward_held_operands).
TEST_P(GlaCuda, BackwardOperandsReadMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardHeldOperands held(false);
  backward_matches_oracle(GetParam());
}

// The same with the token walks a row at a time.
TEST_P(GlaCuda, BackwardRowWalkMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const BackwardDiagonal diagonal(cuda::GlaBackwardDiagonal::tensor_cores);
  const BackwardWalk walk(cuda::GlaBackwardWalk::rows);
  backward_matches_oracle(GetParam());
}

// Chunks are 64 tokens in 16-token sub-chunks: T = 1, 63, 300, 1000 and the varlen offsets
// leave partial chunks and sequences that start mid-chunk; decays from near 0 (the state
// carries over thousands of tokens) to −20 (every product underflows but the diagonal's).
// Grids of fewer than half the SMs' blocks split each sequence into segments (most cases
// here; the backward's state passes split the same way); T ≤ 192, bf16_unsplit_B4_H17 and
// the two unsplit varlen cases (uneven sequences, one of length 1) take the unsplit path, the
// second without a final state's gradient (the gradient kernel's last chunks then start beside
// the dL/dS walk). The mixed cases and huge_keys (keys of 2^38, decays near −0.68) mix chunks
// the forward and the backward factor whole with chunks they cannot. Every case runs the forward
// and the backward.
INSTANTIATE_TEST_SUITE_P(
    Cases, GlaCuda,
    ::testing::Values(
        GpuGlaCase{"Small_bf16_T1", 2, 1, 2, 128, 128, DType::bf16, true, -1.0, 0.0, {}},
        GpuGlaCase{"Small_bf16_T63_K64", 2, 63, 2, 64, 64, DType::bf16, true, -1.0, 0.0, {}},
        GpuGlaCase{"Small_f16_varlen", 1, 300, 2, 128, 64, DType::f16, true, -1.0, 0.0, {0, 1, 129, 300}},
        GpuGlaCase{"Small_bf16_decay20", 1, 200, 2, 128, 128, DType::bf16, true, -20.0, 0.0, {}},
        GpuGlaCase{"Small_f16_K64_V128", 2, 150, 2, 64, 128, DType::f16, false, -0.5, 0.0, {}},
        GpuGlaCase{"bf16_T1000_V256", 2, 1000, 2, 128, 256, DType::bf16, true, -1.0, 0.0, {}},
        GpuGlaCase{"f16_T1000_near0", 1, 1000, 3, 128, 128, DType::f16, true, -0.02, 0.0, {}},
        GpuGlaCase{"bf16_varlen_long", 1, 2100, 2, 128, 128, DType::bf16, false, -0.1, 0.0, {0, 700, 701, 2100}},
        GpuGlaCase{"f16_T1000_decay20_K64", 2, 1000, 2, 64, 192, DType::f16, true, -20.0, -5.0, {}},
        GpuGlaCase{"bf16_unsplit_B4_H17", 4, 300, 17, 64, 64, DType::bf16, true, -0.3, 0.0, {}},
        GpuGlaCase{"f16_split_T5000", 1, 5000, 1, 128, 128, DType::f16, true, -0.05, 0.0, {}},
        GpuGlaCase{"bf16_unsplit_varlen_H20", 1, 1500, 20, 128, 128, DType::bf16, true, -0.3, 0.0,
                   {0, 1, 200, 777, 1500}},
        GpuGlaCase{"f16_unsplit_varlen_H20_no_state", 1, 1500, 20, 128, 128, DType::f16, false, -0.3, 0.0,
                   {0, 777, 778, 1300, 1500}},
        GpuGlaCase{"bf16_T1000_mixed_chunks", 2, 1000, 2, 128, 128, DType::bf16, true, -0.3, 0.0, {}, -20.0},
        GpuGlaCase{"Small_bf16_T300_mixed_chunks_K64", 1, 300, 2, 64, 128, DType::bf16, true, -0.2, 0.0, {}, -3.0},
        GpuGlaCase{"Small_bf16_T200_huge_keys", 1, 200, 2, 128, 128, DType::bf16, true, -0.69, -0.67, {}, 0.0, 0x1p38}),
    [](const auto& info) { return std::string(info.param.name); });

// Every pair of head dimensions in {64, 128, 256} (K = 256 runs as two key blocks of 128
// whose shares of o and dv are summed after; V = 256 as two value blocks), both dtypes,
// T = 1, 63 and 1000, initial state, varlen with uneven lengths (a length-1 sequence and
// sequences starting mid-chunk), log decays near 0 and down to −20.
INSTANTIATE_TEST_SUITE_P(
    HeadDims, GlaCuda,
    ::testing::Values(
        GpuGlaCase{"Small_bf16_K256_V64_T1", 2, 1, 2, 256, 64, DType::bf16, true, -1.0, 0.0, {}},
        GpuGlaCase{"Small_f16_K256_V128_T63", 2, 63, 2, 256, 128, DType::f16, true, -1.0, 0.0, {}},
        GpuGlaCase{"Small_bf16_K256_V256_varlen", 1, 300, 2, 256, 256, DType::bf16, true, -1.0, 0.0, {0, 1, 129, 300}},
        GpuGlaCase{"Small_f16_K64_V256_decay20", 1, 200, 2, 64, 256, DType::f16, true, -20.0, 0.0, {}},
        GpuGlaCase{"Small_bf16_K128_V256_T63", 2, 63, 2, 128, 256, DType::bf16, false, -0.5, 0.0, {}},
        GpuGlaCase{"Small_f16_K64_V64_T1", 2, 1, 2, 64, 64, DType::f16, true, -1.0, 0.0, {}},
        GpuGlaCase{"Small_bf16_K128_V64_T63", 2, 63, 2, 128, 64, DType::bf16, true, -1.0, 0.0, {}},
        GpuGlaCase{"bf16_K256_V256_T1000_near0", 1, 1000, 3, 256, 256, DType::bf16, true, -0.02, 0.0, {}},
        GpuGlaCase{"f16_K256_V64_T1000_decay20", 2, 1000, 2, 256, 64, DType::f16, true, -20.0, -5.0, {}},
        GpuGlaCase{"bf16_K256_V128_varlen_long", 1, 2100, 2, 256, 128, DType::bf16, false, -0.1, 0.0, {0, 700, 701, 2100}},
        GpuGlaCase{"f16_K64_V256_T1000", 2, 1000, 2, 64, 256, DType::f16, true, -1.0, 0.0, {}},
        GpuGlaCase{"bf16_K256_unsplit_B4_H17", 4, 300, 17, 256, 128, DType::bf16, true, -0.3, 0.0, {}}),
    [](const auto& info) { return std::string(info.param.name); });

// What the CUDA path refuses, with the reason; no kernel runs (the tensors only claim a
// CUDA device), so this runs without a GPU too.
TEST(GlaCudaErrors, UnsupportedInputsAreRefused) {
  HostTensor q = uniform({1, 8, 1, 128}, DType::bf16), v = uniform({1, 8, 1, 128}, DType::bf16);
  HostTensor q32 = uniform({1, 8, 1, 128}, DType::f32), v32 = uniform({1, 8, 1, 128}, DType::f32);
  HostTensor q96 = uniform({1, 8, 1, 96}, DType::bf16);
  auto on_gpu = [](const Tensor& t) {
    Tensor c = t;
    c.device = Device::cuda(0);
    return c;
  };
  const Tensor gq = on_gpu(q), gv = on_gpu(v), gq32 = on_gpu(q32), gv32 = on_gpu(v32), gq96 = on_gpu(q96);
  EXPECT_SEQMIX_ERROR(gla_forward({gq32, gq32, gv32, gq32}, {gv32}),
                      "argument 'q': expected dtype bf16 or f16 on a CUDA device, got f32");
  EXPECT_SEQMIX_ERROR(gla_forward({gq96, gq96, gv, gq96}, {gv}),
                      "argument 'q': expected K in {64, 128, 256} and V a multiple of 64 on a CUDA device, got K = 96");
  GlaOptions reference;
  reference.impl = Impl::reference;
  EXPECT_SEQMIX_ERROR(gla_forward({gq, gq, gv, gq}, {gv}, reference),
                      "argument 'impl': expected fast or automatic on a CUDA device, got reference");
  Tensor unaligned = gq;
  unaligned.shape = {1, 4, 1, 128};
  unaligned.strides = {4 * 132, 132, 132, 1};
  Tensor unaligned_v = gv;
  unaligned_v.shape = {1, 4, 1, 128};
  unaligned_v.strides = {512, 128, 128, 1};
  EXPECT_SEQMIX_ERROR(gla_forward({unaligned, unaligned, unaligned_v, unaligned}, {unaligned_v}),
                      "argument 'q': expected 16-byte aligned data and strides");
  EXPECT_SEQMIX_ERROR(gla_backward({gq32, gq32, gv32, gq32}, gv32, std::nullopt, {gq32, gq32, gv32, gq32}),
                      "argument 'q': expected dtype bf16 or f16 on a CUDA device, got f32");
  EXPECT_SEQMIX_ERROR(gla_backward({gq96, gq96, gv, gq96}, gv, std::nullopt, {gq96, gq96, gv, gq96}),
                      "argument 'q': expected K in {64, 128, 256} and V a multiple of 64 on a CUDA device, got K = 96");
  Tensor unaligned_grad = gq;
  unaligned_grad.data = static_cast<char*>(gq.data) + 2;
  EXPECT_SEQMIX_ERROR(gla_backward({gq, gq, gv, gq}, gv, std::nullopt, {gq, unaligned_grad, gv, gq}),
                      "argument 'dk': expected 16-byte aligned data and strides");

  // The chunk-state table: [N, H, C, K, V] in q's dtype, contiguous.
  HostTensor table({1, 1, 1, 128, 128}, DType::bf16), table_long({1, 1, 2, 128, 128}, DType::bf16),
      table_f16({1, 1, 1, 128, 128}, DType::f16);
  const Tensor gtable = on_gpu(table), glong = on_gpu(table_long), gf16 = on_gpu(table_f16);
  EXPECT_SEQMIX_ERROR(gla_forward({gq, gq, gv, gq}, {gv, std::nullopt, glong}),
                      "argument 'chunk_states': expected shape [1, 1, 1, 128, 128] [N, H, C, K, V], got [1, 1, 2, 128, 128]");
  EXPECT_SEQMIX_ERROR(gla_forward({gq, gq, gv, gq}, {gv, std::nullopt, gf16}),
                      "argument 'chunk_states': expected dtype bf16 (the dtype of q), got f16");
  Tensor transposed = gtable;
  transposed.strides = {128 * 128, 128 * 128, 128 * 128, 1, 128};
  GlaInputs with_table{gq, gq, gv, gq};
  with_table.chunk_states = transposed;
  EXPECT_SEQMIX_ERROR(gla_backward(with_table, gv, std::nullopt, {gq, gq, gv, gq}),
                      "argument 'chunk_states': expected stride 1 in the last dimension");
  Tensor padded_rows = gtable;
  padded_rows.strides = {128 * 256, 128 * 256, 128 * 256, 256, 1};
  with_table.chunk_states = padded_rows;
  EXPECT_SEQMIX_ERROR(gla_backward(with_table, gv, std::nullopt, {gq, gq, gv, gq}),
                      "argument 'chunk_states': expected a contiguous tensor");
}

// Forward and forward + backward times at the benchmark shapes (H 16, K = V = 128, bf16;
// B 8 × T 2048 and one sequence of 32768 tokens, which is split), printed; run with
// --gtest_filter='*GlaCudaTiming*'. Asserts only that the outputs are finite.
// g_lo: log decays from [g_lo, 0).
void time_forward(int64_t B, int64_t T, bool with_backward, double g_lo = -0.2) {
  const int64_t H = 16, K = 128, V = 128;
  HostTensor q = uniform({B, T, H, K}, DType::bf16), k = uniform({B, T, H, K}, DType::bf16),
             v = uniform({B, T, H, V}, DType::bf16), g = uniform({B, T, H, K}, DType::bf16, g_lo, 0.0);
  HostTensor o({B, T, H, V}, DType::bf16), hT({B, H, K, V}, DType::f32), d_out = uniform({B, T, H, V}, DType::bf16);
  HostTensor dq({B, T, H, K}, DType::bf16), dk({B, T, H, K}, DType::bf16), dv({B, T, H, V}, DType::bf16),
      dg({B, T, H, K}, DType::bf16);
  DeviceTensor d_q(q), d_k(k), d_v(v), d_g(g), d_o(o), d_hT(hT), d_do(d_out), d_dq(dq), d_dk(dk), d_dv(dv),
      d_dg(dg);
  GlaOptions options;
  options.scale = 1.0 / std::sqrt(static_cast<double>(K));
  auto run = [&] {
    gla_forward({d_q, d_k, d_v, d_g}, {d_o.view, d_hT.view}, options);
    if (with_backward)
      gla_backward({d_q, d_k, d_v, d_g}, d_do.view, std::nullopt, {d_dq.view, d_dk.view, d_dv.view, d_dg.view},
                   options);
  };
  const std::vector<float> times = event_times_ms(run, {.reps = 20, .warmups = 3, .flush_l2 = false});
  std::printf("gla %s B%lld T%lld H%lld K%lld V%lld bf16%s: median %.4f ms (min %.4f)\n",
              with_backward ? "forward+backward" : "forward", static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
              static_cast<long long>(K), static_cast<long long>(V), g_lo < -1.0 ? " strong decays" : "",
              times[times.size() / 2], times[0]);
  const std::vector<double> out = d_o.values(o);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](double x) { return std::isfinite(x); }));
  if (with_backward) {
    const std::vector<double> grad = d_dg.values(dg);
    EXPECT_TRUE(std::all_of(grad.begin(), grad.end(), [](double x) { return std::isfinite(x); }));
  }
}

TEST(GlaCudaTiming, ForwardB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward(8, 2048, false);
  time_forward(8, 2048, true);
}

TEST(GlaCudaTiming, ForwardB1T32768) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward(1, 32768, false);
  time_forward(1, 32768, true);
}

// The forward at B 8 × T 2048 with log decays from [−4, 0): no chunk can be factored whole, so
// each pays the factored walk and the vote before the sub-chunks and quads.
TEST(GlaCudaTiming, ForwardStrongDecaysB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  time_forward(8, 2048, false, -4.0);
}

// The backward alone by each diagonal (CUDA cores, tensor-core quads), side by side on the
// same inputs at B 8, T 2048, H 16, K = V = 128, bf16: median of 30 event-timed runs after
// 3 warm-up runs each. Asserts that the two paths' gradients agree within the bf16 bound.
TEST(GlaCudaTiming, BackwardDiagonalsB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t B = 8, T = 2048, H = 16, K = 128, V = 128;
  HostTensor q = uniform({B, T, H, K}, DType::bf16), k = uniform({B, T, H, K}, DType::bf16),
             v = uniform({B, T, H, V}, DType::bf16), g = uniform({B, T, H, K}, DType::bf16, -0.2, 0.0),
             d_out = uniform({B, T, H, V}, DType::bf16);
  DeviceTensor d_q(q), d_k(k), d_v(v), d_g(g), d_do(d_out);
  GlaOptions options;
  options.scale = 1.0 / std::sqrt(static_cast<double>(K));
  struct Path {
    const char* name;
    cuda::GlaBackwardDiagonal diagonal;
    float median_ms = 0, min_ms = 0;
    std::vector<double> dq, dk, dv, dg;
  };
  Path paths[] = {{"cuda_cores", cuda::GlaBackwardDiagonal::cuda_cores},
                  {"tensor_cores", cuda::GlaBackwardDiagonal::tensor_cores}};
  for (Path& path : paths) {
    const BackwardDiagonal diagonal(path.diagonal);
    HostTensor dq = poisoned({B, T, H, K}, DType::bf16), dk = poisoned({B, T, H, K}, DType::bf16),
               dv = poisoned({B, T, H, V}, DType::bf16), dg = poisoned({B, T, H, K}, DType::bf16);
    DeviceTensor d_dq(dq), d_dk(dk), d_dv(dv), d_dg(dg);
    auto run = [&] {
      gla_backward({d_q, d_k, d_v, d_g}, d_do.view, std::nullopt, {d_dq.view, d_dk.view, d_dv.view, d_dg.view},
                   options);
    };
    const std::vector<float> times = event_times_ms(run, {.reps = 30, .warmups = 3, .flush_l2 = false});
    path.median_ms = times[times.size() / 2], path.min_ms = times[0];
    path.dq = d_dq.values(dq), path.dk = d_dk.values(dk), path.dv = d_dv.values(dv), path.dg = d_dg.values(dg);
  }
  std::printf("gla backward B8 T2048 H16 K128 V128 bf16, median of 30 (min):\n");
  for (const Path& path : paths) std::printf("  %-13s %.4f ms (%.4f)\n", path.name, path.median_ms, path.min_ms);
  std::printf("  tensor_cores / cuda_cores: %.3f\n", paths[1].median_ms / paths[0].median_ms);
  const double tol = tolerance(DType::bf16);
  EXPECT_LT(rel_err(paths[1].dq, paths[0].dq), tol) << "dq";
  EXPECT_LT(rel_err(paths[1].dk, paths[0].dk), tol) << "dk";
  EXPECT_LT(rel_err(paths[1].dv, paths[0].dv), tol) << "dv";
  EXPECT_LT(rel_err(paths[1].dg, paths[0].dg), tol) << "dg";
}

}  // namespace
}  // namespace seqmix::test
