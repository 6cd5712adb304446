// The CUDA dense linear recurrence against the float64 oracle, every method and dtype.
// Cases named Small* are the ones the GPU check runs under compute-sanitizer. With
// SEQMIX_LINREC_TIMING=1 the LinearRecurrenceCudaTiming test also times every method
// on a grid of shapes (CUDA events, L2 flushed, medians) and prints a table;
// SEQMIX_LINREC_TIMING_TRANSFERS=mma,wgmma times the chunked method with each
// chunk-transfer product side by side, SEQMIX_LINREC_TIMING_GRADIENTS=tiles,stream every
// method with each gradient kernel, SEQMIX_LINREC_TIMING_REWALKS=1,2 the chunked method
// with its re-walk at one and two blocks per SM, SEQMIX_LINREC_TIMING_FORWARDS=split,fused16
// its forward in three launches and in one pass (chunks of 16) side by side (any other
// value, e.g. "auto", times the default), SEQMIX_LINREC_TIMING_FUSED_BLOCKS=2,3 the one
// pass of f32 at two and three blocks per SM (_BF16=3,4: the bf16 forward at three and four);
// SEQMIX_LINREC_TIMING_FUSED_TRANSFERS=shared,registers,transposed the one-pass forward's
// transfers (the running product in shared memory, or in registers with mma.sync or wgmma
// products);
// SEQMIX_LINREC_TIMING_STATES=1 adds the backward given the forward's h;
// SEQMIX_LINREC_TIMING_CHUNKS=64,128 the chunked method with each chunk length;
// SEQMIX_LINREC_TIMING_WALKS=0,1 every method with the sequential walk of matrix states on
// the CUDA cores and on tensor cores (walk_wgmma.cuh). With
// SEQMIX_LINREC_TIMING=1, LinearRecurrenceCudaTiming.SequentialSwitchesSideBySide times the
// sequential walk with its switches (b held raw, state read as rows) off and on, alternating.
// SEQMIX_LINREC_CHUNK_TRANSFER=mma (or wgmma, the default) picks the chunk-transfer product
// for every other test.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "cuda/linear_recurrence/params.hpp"
#include "cuda_util.hpp"
#include "seqmix/linear_recurrence.hpp"

namespace seqmix::test {
namespace {

using Method = LinearRecurrenceMethod;

struct GpuCase {
  const char* name;
  int64_t G, T, n, m;
  DType dtype;
  Method method;
  bool with_state = true;
  bool with_d_final = true;
  bool give_workspace = false;
};

void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

// Transitions with iid entries of standard deviation about 0.7/√n (spectral radius well
// below 1), inputs and output gradients uniform in [-1, 1).
struct GpuData {
  HostTensor A, b, h0, dh, d_final;
  explicit GpuData(const GpuCase& c)
      : A(uniform({c.G, c.T, c.n, c.n}, c.dtype, -1.2 / std::sqrt(double(c.n)), 1.2 / std::sqrt(double(c.n)))),
        b(uniform({c.G, c.T, c.n, c.m}, c.dtype)),
        h0(uniform({c.G, c.n, c.m}, c.dtype)),
        dh(uniform({c.G, c.T, c.n, c.m}, c.dtype)),
        d_final(uniform({c.G, c.n, c.m}, c.dtype)) {}
};

struct Results {
  HostTensor h, final_state, dA, db, dh0;
  explicit Results(const GpuCase& c)
      : h(poisoned({c.G, c.T, c.n, c.m}, c.dtype)),
        final_state(poisoned({c.G, c.n, c.m}, c.dtype)),
        dA(poisoned({c.G, c.T, c.n, c.n}, c.dtype)),
        db(poisoned({c.G, c.T, c.n, c.m}, c.dtype)),
        dh0(poisoned({c.G, c.n, c.m}, c.dtype)) {}
};

// The oracle's forward and backward on the host copies.
void run_oracle(const GpuCase& c, const GpuData& d, Results& r) {
  LinearRecurrenceOptions o;
  o.impl = Impl::reference;
  LinearRecurrenceInputs in{d.A, d.b};
  if (c.with_state) in.initial_state = d.h0.view;
  linear_recurrence_forward(in, {r.h.view, r.final_state.view}, o);
  LinearRecurrenceGrads grads{r.dA.view, r.db.view};
  if (c.with_state) grads.d_initial_state = r.dh0.view;
  linear_recurrence_backward(in, d.dh, c.with_d_final ? std::optional<Tensor>(d.d_final.view) : std::nullopt, grads,
                             o);
}

// A device f32 buffer for the workspace argument.
struct DeviceWorkspace {
  float* ptr = nullptr;
  int64_t elems = 0;
  explicit DeviceWorkspace(int64_t n) : elems(n) { cuda_ok(cudaMalloc(&ptr, n * sizeof(float))); }
  ~DeviceWorkspace() { cudaFree(ptr); }
  Tensor view() const { return Tensor::contiguous(ptr, DType::f32, {elems}, Device::cuda(0)); }
};

class LinearRecurrenceCuda : public ::testing::TestWithParam<GpuCase> {};

// Case `c` forward and backward through the public API on the device with options `o`
// (workspaces passed in when c.give_workspace; the forward's h passed to the backward as
// its states when pass_states), every output against the oracle's.
void expect_device_run_matches_oracle(const GpuCase& c, const LinearRecurrenceOptions& o, bool pass_states = false) {
  const GpuData d(c);
  Results want(c), got(c);
  run_oracle(c, d, want);

  DeviceTensor A(d.A), b(d.b), h0(d.h0), dh(d.dh), d_final(d.d_final);
  DeviceTensor h(got.h), final_state(got.final_state), dA(got.dA), db(got.db), dh0(got.dh0);
  LinearRecurrenceInputs in{A, b};
  if (c.with_state) in.initial_state = h0.view;
  LinearRecurrenceOutputs out{h, final_state.view};
  LinearRecurrenceGrads grads{dA, db};
  if (c.with_state) grads.d_initial_state = dh0.view;
  std::optional<DeviceWorkspace> forward_ws, backward_ws;
  if (c.give_workspace) {
    forward_ws.emplace(linear_recurrence_workspace_size(c.G, c.T, c.n, c.m, c.dtype, false, o));
    backward_ws.emplace(linear_recurrence_workspace_size(c.G, c.T, c.n, c.m, c.dtype, true, o));
    out.workspace = forward_ws->view();
    grads.workspace = backward_ws->view();
  }
  linear_recurrence_forward(in, out, o);
  linear_recurrence_backward(in, dh, c.with_d_final ? std::optional<Tensor>(d_final.view) : std::nullopt, grads, o,
                             pass_states ? std::optional<Tensor>(h.view) : std::nullopt);
  cuda_ok(cudaDeviceSynchronize());

  const double tol = tolerance(c.dtype);
  EXPECT_LT(rel_err(h.values(got.h), want.h.values()), tol) << "h";
  EXPECT_LT(rel_err(final_state.values(got.final_state), want.final_state.values()), tol) << "final_state";
  EXPECT_LT(rel_err(dA.values(got.dA), want.dA.values()), tol) << "dA";
  EXPECT_LT(rel_err(db.values(got.db), want.db.values()), tol) << "db";
  if (c.with_state) EXPECT_LT(rel_err(dh0.values(got.dh0), want.dh0.values()), tol) << "d_initial_state";
}

TEST_P(LinearRecurrenceCuda, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuCase c = GetParam();
  LinearRecurrenceOptions o;
  o.method = c.method;
  expect_device_run_matches_oracle(c, o);
}

std::string case_name(const ::testing::TestParamInfo<GpuCase>& info) { return info.param.name; }

constexpr DType f32 = DType::f32, bf16 = DType::bf16;
constexpr Method seq = Method::sequential, chunked = Method::chunked, scan = Method::scan,
                 cr = Method::cyclic_reduction, autom = Method::automatic;

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearRecurrenceCuda,
    ::testing::Values(
        // Small: every method, both dtypes, padded state sizes, T not a power of two.
        GpuCase{"SmallSequentialF32Vector", 2, 37, 64, 1, f32, seq},
        GpuCase{"SmallSequentialF32Matrix", 2, 21, 40, 11, f32, seq},
        GpuCase{"SmallSequentialBf16N32", 3, 19, 32, 1, bf16, seq},
        GpuCase{"SmallSequentialBf16N128Matrix", 1, 9, 128, 8, bf16, seq, false, false},
        GpuCase{"SmallSequentialF32N8", 2, 50, 8, 3, f32, seq, true, false},
        GpuCase{"SmallSequentialF32N128", 1, 13, 128, 1, f32, seq},
        GpuCase{"SmallSequentialT1", 2, 1, 16, 2, f32, seq},
        GpuCase{"SmallChunkedF32", 2, 45, 24, 1, f32, chunked},
        GpuCase{"SmallChunkedBf16Matrix", 2, 33, 64, 5, bf16, chunked, false, true},
        GpuCase{"SmallChunkedWorkspace", 1, 70, 32, 2, f32, chunked, true, true, true},
        // The chunked method on tensor cores (n ≤ 64, m ≤ 8): uneven last chunk, padded
        // n, 8 columns, one chunk only, whole chunks; n = 128 takes the composition path.
        GpuCase{"SmallChunkedTensorF32N64Vector", 2, 100, 64, 1, f32, chunked},
        GpuCase{"SmallChunkedTensorBf16N40Columns8", 1, 53, 40, 8, bf16, chunked},
        GpuCase{"SmallChunkedTensorF32N56NoState", 1, 35, 56, 2, f32, chunked, false, false},
        GpuCase{"SmallChunkedTensorT1", 2, 1, 16, 1, f32, chunked},
        GpuCase{"SmallChunkedTensorWholeChunks", 1, 64, 32, 3, bf16, chunked, true, true, true},
        GpuCase{"SmallChunkedComposeN128", 1, 40, 128, 1, f32, chunked},
        GpuCase{"SmallScanF32", 2, 37, 32, 1, f32, scan},
        GpuCase{"SmallScanBf16Matrix", 1, 29, 40, 3, bf16, scan, true, false},
        GpuCase{"SmallScanN128", 1, 11, 128, 2, f32, scan},
        GpuCase{"SmallCyclicReductionF32", 2, 37, 32, 1, f32, cr},
        GpuCase{"SmallCyclicReductionBf16Matrix", 1, 30, 64, 9, bf16, cr, false, false},
        GpuCase{"SmallCyclicReductionWorkspace", 1, 17, 16, 66, f32, cr, true, true, true},
        GpuCase{"SmallCyclicReductionT1", 1, 1, 8, 1, f32, cr},
        GpuCase{"SmallAutomatic", 2, 40, 32, 1, f32, autom},
        // Longer chains and wide states.
        GpuCase{"SequentialF32Long", 4, 1000, 64, 1, f32, seq},
        GpuCase{"SequentialF32Wide", 2, 300, 64, 64, f32, seq},
        GpuCase{"SequentialBf16Long", 4, 1000, 128, 1, bf16, seq},
        GpuCase{"ChunkedF32Long", 1, 1000, 64, 1, f32, chunked},
        GpuCase{"ChunkedTensorF32Groups", 16, 1500, 64, 1, f32, chunked},
        GpuCase{"ChunkedTensorBf16Long", 2, 3000, 64, 4, bf16, chunked},
        GpuCase{"ChunkedBf16Wide", 1, 300, 32, 64, bf16, chunked},
        GpuCase{"ScanF32Long", 1, 1000, 64, 1, f32, scan},
        GpuCase{"CyclicReductionF32Long", 1, 1000, 64, 1, f32, cr},
        GpuCase{"CyclicReductionBf16Wide", 1, 300, 128, 64, bf16, cr}),
    case_name);

// The backward given the forward's h (`states`): the reverse chain alone, the gradient
// products reading h in the input dtype (matrix states with m a multiple of 8 up to 64 and
// n ≤ 64: on tensor cores, more steps than blocks in the last case of each dtype). The
// sequential method: vector and matrix states, padded n, T = 1, with and without an
// initial state and a final-state gradient, f32 and bf16 (whose dA then comes from the
// forward's rounded h, within the bf16 bound); the chunked method's split path on tensor
// cores (fewer than 5 groups, or m > 1).
class LinearRecurrenceCudaGivenStates : public ::testing::TestWithParam<GpuCase> {};

TEST_P(LinearRecurrenceCudaGivenStates, BackwardGivenStatesMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  LinearRecurrenceOptions o;
  o.method = GetParam().method;
  expect_device_run_matches_oracle(GetParam(), o, /*pass_states=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearRecurrenceCudaGivenStates,
    ::testing::Values(GpuCase{"SmallF32Vector", 2, 37, 64, 1, f32, seq},
                      GpuCase{"SmallF32Matrix", 2, 21, 40, 11, f32, seq},
                      GpuCase{"SmallBf16N32", 3, 19, 32, 1, bf16, seq},
                      GpuCase{"SmallBf16N128MatrixNoState", 1, 9, 128, 8, bf16, seq, false, false},
                      GpuCase{"SmallF32N128NoFinalGradient", 1, 13, 128, 1, f32, seq, true, false},
                      GpuCase{"SmallT1", 2, 1, 16, 2, f32, seq},
                      GpuCase{"SmallWorkspace", 1, 30, 24, 9, bf16, seq, true, true, true},
                      GpuCase{"SmallBf16N48Columns16", 2, 29, 48, 16, bf16, seq},
                      // bf16 matrix states: the gradient products on tensor cores (grad_wgmma.cuh)
                      GpuCase{"SmallBf16N40Columns8NoState", 2, 23, 40, 8, bf16, seq, false, true},
                      GpuCase{"SmallBf16N64Columns24T1", 3, 1, 64, 24, bf16, seq},
                      GpuCase{"Bf16N64Wide", 2, 300, 64, 64, bf16, seq},
                      GpuCase{"Bf16N56WideManySteps", 4, 500, 56, 64, bf16, seq, true, false},
                      GpuCase{"SmallF32N40Columns8NoState", 2, 23, 40, 8, f32, seq, false, true},
                      GpuCase{"SmallF32N64Columns24T1", 3, 1, 64, 24, f32, seq},
                      GpuCase{"F32N56WideManySteps", 4, 300, 56, 64, f32, seq, true, false},
                      GpuCase{"SmallF32N32Columns8NoState", 2, 17, 32, 8, f32, seq, false, true},
                      GpuCase{"F32Wide", 2, 300, 64, 64, f32, seq},
                      GpuCase{"Bf16Long", 4, 1000, 128, 1, bf16, seq},
                      GpuCase{"Bf16WideN128", 1, 200, 128, 40, bf16, seq},
                      GpuCase{"SmallChunkedSplitBf16N40Columns3", 2, 53, 40, 3, bf16, chunked},
                      GpuCase{"SmallChunkedSplitF32N64OneGroup", 1, 100, 64, 1, f32, chunked, false, true},
                      GpuCase{"ChunkedSplitF32N32Long", 3, 1500, 32, 8, f32, chunked}),
    case_name);

// The chunked method of bf16 matrix states with whole states a block (chunked_wide.cuh:
// 8 < m ≤ 64, m a multiple of 8, n ≤ 64) against the oracle: the last chunk short, one
// chunk, T = 1, padded n (K = 32 and 64), with and without an initial state and a
// final-state gradient, a given workspace, many groups; the backward recomputing h (both
// chains side by side) and given the forward's h (the reverse chain alone).
class LinearRecurrenceCudaChunkedWide : public ::testing::TestWithParam<GpuCase> {};

TEST_P(LinearRecurrenceCudaChunkedWide, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  LinearRecurrenceOptions o;
  o.method = chunked;
  expect_device_run_matches_oracle(GetParam(), o);
}

TEST_P(LinearRecurrenceCudaChunkedWide, BackwardGivenStatesMatchesOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  LinearRecurrenceOptions o;
  o.method = chunked;
  expect_device_run_matches_oracle(GetParam(), o, /*pass_states=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearRecurrenceCudaChunkedWide,
    ::testing::Values(GpuCase{"SmallN64Columns64", 2, 100, 64, 64, bf16, chunked},
                      GpuCase{"SmallN32Columns16NoState", 1, 45, 32, 16, bf16, chunked, false, true},
                      GpuCase{"SmallN40Columns24NoFinalGradient", 2, 33, 40, 24, bf16, chunked, true, false},
                      GpuCase{"SmallN8Columns64T1", 2, 1, 8, 64, bf16, chunked},
                      GpuCase{"SmallN64Columns16OneChunk", 1, 20, 64, 16, bf16, chunked},
                      GpuCase{"SmallWholeChunksWorkspace", 1, 64, 64, 40, bf16, chunked, true, true, true},
                      GpuCase{"N64Columns64Long", 3, 1000, 64, 64, bf16, chunked},
                      GpuCase{"N56Columns40Groups", 16, 300, 56, 40, bf16, chunked, true, false},
                      GpuCase{"SmallN24Columns56", 2, 70, 24, 56, bf16, chunked},
                      // f32: three tf32 products, A split (and transposed for the reverse chain) a step
                      GpuCase{"SmallF32N64Columns64", 2, 100, 64, 64, f32, chunked},
                      GpuCase{"SmallF32N32Columns16NoState", 1, 45, 32, 16, f32, chunked, false, true},
                      GpuCase{"SmallF32N40Columns24NoFinalGradient", 2, 33, 40, 24, f32, chunked, true, false},
                      GpuCase{"SmallF32N8Columns64T1", 2, 1, 8, 64, f32, chunked},
                      GpuCase{"SmallF32WholeChunksWorkspace", 1, 64, 64, 40, f32, chunked, true, true, true},
                      GpuCase{"F32N64Columns64Long", 3, 1000, 64, 64, f32, chunked},
                      GpuCase{"F32N56Columns40Groups", 16, 300, 56, 40, f32, chunked, true, false},
                      GpuCase{"SmallF32N24Columns56", 2, 70, 24, 56, f32, chunked}),
    case_name);

// Case c's forward and backward (chunked, workspaces given) on a stream of their own, issued
// directly or captured into a CUDA graph and replayed twice; the outputs copied into r.
void run_wide_on_stream(const GpuCase& c, const GpuData& d, bool graph, Results& r) {
  DeviceTensor A(d.A), b(d.b), h0(d.h0), dh(d.dh), d_final(d.d_final);
  DeviceTensor h(r.h), final_state(r.final_state), dA(r.dA), db(r.db), dh0(r.dh0);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  LinearRecurrenceOptions o;
  o.method = chunked;
  o.stream = stream;
  DeviceWorkspace wf(linear_recurrence_workspace_size(c.G, c.T, c.n, c.m, c.dtype, false, o));
  DeviceWorkspace wb(linear_recurrence_workspace_size(c.G, c.T, c.n, c.m, c.dtype, true, o));
  const LinearRecurrenceInputs in{A, b, h0.view};
  const auto issue = [&] {
    linear_recurrence_forward(in, {h, final_state.view, wf.view()}, o);
    linear_recurrence_backward(in, dh, d_final.view, {dA, db, dh0.view, wb.view()}, o);
  };
  if (graph) {
    const CapturedGraph captured(stream, issue);
    for (int replay = 0; replay < 2; ++replay) captured.launch(stream);
    cuda_ok(cudaStreamSynchronize(stream));
  } else {
    issue();
  }
  cuda_ok(cudaStreamSynchronize(stream));
  cuda_ok(cudaStreamDestroy(stream));
  h.values(r.h), final_state.values(r.final_state), dA.values(r.dA), db.values(r.db), dh0.values(r.dh0);
}

// The wide chunked method's forward and backward captured into a CUDA graph (as the benches
// replay them) give bitwise the results of the same calls issued directly.
TEST(LinearRecurrenceCudaChunkedWideGraph, SmallReplayMatchesDirectRun) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const GpuCase& c : {GpuCase{"bf16", 2, 100, 64, 64, bf16, chunked}, GpuCase{"f32", 2, 70, 24, 56, f32, chunked}}) {
    SCOPED_TRACE(c.name);
    const GpuData d(c);
    Results direct(c), replayed(c);
    run_wide_on_stream(c, d, false, direct);
    run_wide_on_stream(c, d, true, replayed);
    EXPECT_EQ(direct.h.storage, replayed.h.storage) << "h";
    EXPECT_EQ(direct.final_state.storage, replayed.final_state.storage) << "final_state";
    EXPECT_EQ(direct.dA.storage, replayed.dA.storage) << "dA";
    EXPECT_EQ(direct.db.storage, replayed.db.storage) << "db";
    EXPECT_EQ(direct.dh0.storage, replayed.dh0.storage) << "d_initial_state";
  }
}

// The chunked method's chains in one pass for vector states (SEQMIX_LINREC_CHUNKED_FORWARD=
// fused, fused_chunked.cuh: the forward, and the backward's two chains side by side)
// against the oracle: chunk lengths that do not divide T, one chunk, a
// single step, padded n, with and without an initial state, a chunk length from the
// options, and many chunks per group (every block waits for its predecessor's state).
// With the forward's h passed to the backward (`states`: its reverse chain alone).
// Padded n = 64 also with the compact layout: f32 at three blocks per SM
// (SEQMIX_LINREC_FUSED_BLOCKS=3), the bf16 forward at four (SEQMIX_LINREC_FUSED_BLOCKS_BF16=4).
struct FusedCase {
  const char* name;
  int64_t G, T, n;
  DType dtype;
  const char* setting;     // SEQMIX_LINREC_CHUNKED_FORWARD
  int64_t chunk_size = 0;  // the option, 0: the setting's
  bool with_state = true;
  const char* blocks = nullptr;  // SEQMIX_LINREC_FUSED_BLOCKS and _BF16, null: the defaults
  bool pass_states = false;
  const char* transfer = nullptr;  // SEQMIX_LINREC_FUSED_TRANSFER, null: the default
};

void PrintTo(const FusedCase& c, std::ostream* os) { *os << c.name; }

class LinearRecurrenceCudaFused : public ::testing::TestWithParam<FusedCase> {};

TEST_P(LinearRecurrenceCudaFused, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const FusedCase f = GetParam();
  const GpuCase c{f.name, f.G, f.T, f.n, 1, f.dtype, Method::chunked, f.with_state, true, true};
  LinearRecurrenceOptions o;
  o.method = Method::chunked;
  o.chunk_size = f.chunk_size;
  setenv("SEQMIX_LINREC_CHUNKED_FORWARD", f.setting, 1);  // before the workspaces are sized
  if (f.blocks) setenv("SEQMIX_LINREC_FUSED_BLOCKS", f.blocks, 1), setenv("SEQMIX_LINREC_FUSED_BLOCKS_BF16", f.blocks, 1);
  if (f.transfer) setenv("SEQMIX_LINREC_FUSED_TRANSFER", f.transfer, 1);
  expect_device_run_matches_oracle(c, o, f.pass_states);
  unsetenv("SEQMIX_LINREC_FUSED_TRANSFER");
  unsetenv("SEQMIX_LINREC_CHUNKED_FORWARD");
  unsetenv("SEQMIX_LINREC_FUSED_BLOCKS");
  unsetenv("SEQMIX_LINREC_FUSED_BLOCKS_BF16");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearRecurrenceCudaFused,
    ::testing::Values(FusedCase{"SmallF32N64", 2, 100, 64, f32, "fused"},
                      FusedCase{"SmallBf16N40", 3, 53, 40, bf16, "fused8"},
                      FusedCase{"SmallF32N32NoState", 2, 37, 32, f32, "fused8", 0, false},
                      FusedCase{"SmallBf16N64", 1, 70, 64, bf16, "fused"},
                      FusedCase{"SmallF32N24OneChunk", 2, 11, 24, f32, "fused"},
                      FusedCase{"SmallF32T1", 2, 1, 16, f32, "fused"},
                      FusedCase{"SmallF32ChunkOption", 1, 29, 64, f32, "fused", 5},
                      FusedCase{"SmallF32N64ThreeBlocks", 2, 100, 64, f32, "fused", 0, true, "3"},
                      FusedCase{"SmallF32N40ThreeBlocksNoState", 3, 53, 40, f32, "fused8", 0, false, "3"},
                      FusedCase{"SmallF32N64ThreeBlocksChunkOption", 1, 29, 64, f32, "fused", 5, true, "3"},
                      FusedCase{"SmallF32N64ThreeBlocksOneChunk", 2, 11, 64, f32, "fused", 0, true, "3"},
                      FusedCase{"F32ManyChunksThreeBlocks", 16, 1500, 64, f32, "fused8", 0, true, "3"},
                      FusedCase{"SmallBf16N64FourBlocks", 1, 70, 64, bf16, "fused", 0, true, "4"},
                      FusedCase{"SmallBf16N48FourBlocksNoState", 3, 53, 48, bf16, "fused8", 0, false, "4"},
                      FusedCase{"Bf16ManyChunksFourBlocks", 16, 1500, 64, bf16, "fused8", 0, true, "4"},
                      FusedCase{"SmallF32N64SavedStates", 2, 100, 64, f32, "fused", 0, true, nullptr, true},
                      FusedCase{"SmallBf16N40SavedStatesNoState", 3, 53, 40, bf16, "fused8", 0, false, nullptr, true},
                      FusedCase{"SmallF32N32SavedStates", 2, 37, 32, f32, "fused8", 0, true, nullptr, true},
                      FusedCase{"SmallF32T1SavedStates", 2, 1, 16, f32, "fused", 0, true, nullptr, true},
                      FusedCase{"F32ManyChunksSavedStates", 16, 1500, 64, f32, "fused8", 0, true, nullptr, true},
                      FusedCase{"SmallF32N64RegisterP", 2, 100, 64, f32, "fused", 0, true, "3", false, "registers"},
                      FusedCase{"SmallF32N40RegisterPNoState", 3, 53, 40, f32, "fused8", 0, false, "3", false,
                                "registers"},
                      FusedCase{"SmallF32N64RegisterPChunkOption", 1, 29, 64, f32, "fused", 5, true, "3", false,
                                "registers"},
                      FusedCase{"SmallF32N64RegisterPOneChunk", 2, 11, 64, f32, "fused", 0, true, "3", false,
                                "registers"},
                      FusedCase{"SmallBf16N64RegisterP", 1, 70, 64, bf16, "fused", 0, true, "4", false, "registers"},
                      FusedCase{"SmallBf16N48RegisterPNoState", 3, 53, 48, bf16, "fused8", 0, false, "4", false,
                                "registers"},
                      FusedCase{"F32ManyChunksRegisterP", 16, 1500, 64, f32, "fused8", 0, true, "3", false, "registers"},
                      FusedCase{"Bf16ManyChunksRegisterP", 16, 1500, 64, bf16, "fused8", 0, true, "4", false,
                                "registers"},
                      // The transposed product on wgmma (chunk_transfer_transposed.cuh).
                      FusedCase{"SmallF32N64Transposed", 2, 100, 64, f32, "fused", 0, true, "3", false, "transposed"},
                      FusedCase{"SmallF32N40TransposedNoState", 3, 53, 40, f32, "fused8", 0, false, "3", false,
                                "transposed"},
                      FusedCase{"SmallF32N64TransposedChunkOption", 1, 29, 64, f32, "fused", 5, true, "3", false,
                                "transposed"},
                      FusedCase{"SmallF32N64TransposedOneChunk", 2, 11, 64, f32, "fused", 0, true, "3", false,
                                "transposed"},
                      FusedCase{"SmallBf16N64Transposed", 1, 70, 64, bf16, "fused", 0, true, "4", false,
                                "transposed"},
                      FusedCase{"SmallBf16N48TransposedNoState", 3, 53, 48, bf16, "fused8", 0, false, "4", false,
                                "transposed"},
                      FusedCase{"F32ManyChunksTransposed", 16, 1500, 64, f32, "fused8", 0, true, "3", false,
                                "transposed"},
                      FusedCase{"Bf16ManyChunksTransposed", 16, 1500, 64, bf16, "fused8", 0, true, "4", false,
                                "transposed"},
                      // Its other step orders, and the shared-memory transfer it replaced as the default.
                      FusedCase{"SmallF32N64TransposedLate", 2, 100, 64, f32, "fused", 0, true, "3", false,
                                "transposed-late"},
                      FusedCase{"SmallF32N40TransposedMatvecFirst", 3, 53, 40, f32, "fused8", 0, false, "3", false,
                                "transposed-matvec-first"},
                      FusedCase{"SmallBf16N64TransposedEarly", 1, 70, 64, bf16, "fused", 0, true, "4", false,
                                "transposed-early"},
                      FusedCase{"SmallBf16N48TransposedLate", 3, 53, 48, bf16, "fused8", 0, false, "4", false,
                                "transposed-late"},
                      FusedCase{"SmallF32N64SharedTransfer", 2, 100, 64, f32, "fused", 0, true, "3", false, "shared"},
                      FusedCase{"SmallBf16N48SharedTransferNoState", 3, 53, 48, bf16, "fused8", 0, false, "4", false,
                                "shared"},
                      FusedCase{"F32ManyChunks", 16, 1500, 64, f32, "fused8"},
                      FusedCase{"Bf16ManyChunks", 16, 1500, 64, bf16, "fused8"},
                      FusedCase{"F32Long", 4, 4000, 64, f32, "fused32"},
                      FusedCase{"Bf16N32Long", 8, 3001, 32, bf16, "fused16"}),
    [](const ::testing::TestParamInfo<FusedCase>& info) { return std::string(info.param.name); });

// The sequential kernel's developer switches (sequential.cuh, NOTES.md version 12)
// against the oracle: SEQMIX_LINREC_SEQUENTIAL_RAW_B=1 (bf16 b held as raw bits until its
// step, the default) and =0 (held as floats), SEQMIX_LINREC_SEQUENTIAL_ROW_READS=1 (slices
// of 8 columns read their state rows with 16-byte loads, the default at n > 64) and =0,
// alone and together: the sequential method's forward and both
// backward chains, vector and matrix states, padded n, T = 1 and T not a multiple of the
// four steps of b in flight, and the chunked method's re-walk (its split forward at two
// blocks per SM, and slices of 8 columns). Matrix states with n ≤ 64 take the CUDA cores'
// walk there (SEQMIX_LINREC_SEQUENTIAL_WGMMA=0), since bf16 with 32 < n ≤ 64 defaults to the
// walk on tensor cores, whose own cases (any dtype and n ≤ 64) follow: SEQMIX_LINREC_SEQUENTIAL_WGMMA=1 (walk_wgmma.cuh), both
// dtypes, padded n (8, 32, 40, 56), several slices of 8 columns, T = 1, with and without an
// initial state or a final-state gradient, the chunked method's re-walk (8 columns), a
// long wide chain per dtype, and column counts off the slice of 8 (3, 11).
struct SwitchCase {
  GpuCase c;
  std::vector<std::pair<const char*, const char*>> environment;  // set for the case, then unset
};

void PrintTo(const SwitchCase& c, std::ostream* os) { *os << c.c.name; }

class LinearRecurrenceCudaSequentialSwitches : public ::testing::TestWithParam<SwitchCase> {};

TEST_P(LinearRecurrenceCudaSequentialSwitches, ForwardAndBackwardMatchOracle) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const SwitchCase& r = GetParam();
  LinearRecurrenceOptions o;
  o.method = r.c.method;
  for (const auto& [variable, value] : r.environment) setenv(variable, value, 1);
  expect_device_run_matches_oracle(r.c, o);
  for (const auto& [variable, value] : r.environment) unsetenv(variable);
}

const std::pair<const char*, const char*> kRawB{"SEQMIX_LINREC_SEQUENTIAL_RAW_B", "1"},
    kHeldFloats{"SEQMIX_LINREC_SEQUENTIAL_RAW_B", "0"}, kScalarReads{"SEQMIX_LINREC_SEQUENTIAL_ROW_READS", "0"},
    kRowReads{"SEQMIX_LINREC_SEQUENTIAL_ROW_READS", "1"}, kSplit{"SEQMIX_LINREC_CHUNKED_FORWARD", "split"},
    kTwoBlocks{"SEQMIX_LINREC_REWALK_BLOCKS", "2"}, kCudaCores{"SEQMIX_LINREC_SEQUENTIAL_WGMMA", "0"},
    kTensorCores{"SEQMIX_LINREC_SEQUENTIAL_WGMMA", "1"};

INSTANTIATE_TEST_SUITE_P(
    Cases, LinearRecurrenceCudaSequentialSwitches,
    ::testing::Values(SwitchCase{{"SmallRawBSequentialBf16N64Vector", 2, 37, 64, 1, bf16, seq}, {kRawB}},
                      SwitchCase{{"SmallRawBSequentialBf16N32", 3, 19, 32, 1, bf16, seq}, {kRawB}},
                      SwitchCase{{"SmallRawBSequentialBf16N40Matrix", 2, 21, 40, 11, bf16, seq}, {kCudaCores, kRawB}},
                      SwitchCase{{"SmallRawBSequentialBf16N128MatrixNoState", 1, 9, 128, 8, bf16, seq, false, false},
                                 {kRawB}},
                      SwitchCase{{"SmallRawBSequentialBf16N104Vector", 1, 14, 104, 1, bf16, seq}, {kRawB}},
                      SwitchCase{{"SmallRawBSequentialBf16T1", 2, 1, 16, 2, bf16, seq}, {kCudaCores, kRawB}},
                      SwitchCase{{"SmallHeldFloatsSequentialBf16N64Vector", 2, 37, 64, 1, bf16, seq}, {kHeldFloats}},
                      SwitchCase{{"SmallHeldFloatsSequentialBf16N40Matrix", 2, 21, 40, 11, bf16, seq}, {kCudaCores, kHeldFloats}},
                      SwitchCase{{"SmallRawBChunkedBf16Matrix", 2, 33, 64, 5, bf16, chunked, false, true}, {kCudaCores, kRawB}},
                      SwitchCase{{"SmallRawBChunkedBf16SplitTwoBlocks", 2, 70, 48, 1, bf16, chunked},
                                 {kRawB, kSplit, kTwoBlocks}},
                      SwitchCase{{"SmallRowReadsSequentialF32N40Matrix", 2, 21, 40, 11, f32, seq}, {kCudaCores, kRowReads}},
                      SwitchCase{{"SmallRowReadsSequentialF32N128", 1, 13, 128, 9, f32, seq}, {kRowReads}},
                      SwitchCase{{"SmallRowReadsSequentialF32T1", 2, 1, 16, 3, f32, seq}, {kCudaCores, kRowReads}},
                      SwitchCase{{"SmallRowReadsSequentialBf16N32", 2, 19, 32, 8, bf16, seq}, {kCudaCores, kRowReads}},
                      SwitchCase{{"SmallRowReadsRawBSequentialBf16N64NoState", 2, 37, 64, 16, bf16, seq, false, false},
                                 {kCudaCores, kRowReads, kRawB}},
                      SwitchCase{{"SmallRowReadsRawBSequentialBf16N128", 1, 9, 128, 8, bf16, seq},
                                 {kRowReads, kRawB}},
                      SwitchCase{{"SmallRowReadsChunkedF32Matrix", 2, 33, 64, 5, f32, chunked}, {kCudaCores, kRowReads}},
                      SwitchCase{{"SmallScalarReadsSequentialBf16N128", 1, 9, 128, 8, bf16, seq}, {kScalarReads}},
                      SwitchCase{{"SmallScalarReadsSequentialF32N128", 1, 13, 128, 9, f32, seq}, {kScalarReads}},
                      SwitchCase{{"RawBSequentialBf16Long", 4, 1001, 64, 1, bf16, seq}, {kRawB}},
                      SwitchCase{{"RawBSequentialBf16Wide", 2, 301, 64, 64, bf16, seq}, {kCudaCores, kRawB}},
                      SwitchCase{{"RowReadsSequentialF32Wide", 2, 301, 64, 64, f32, seq}, {kCudaCores, kRowReads}},
                      SwitchCase{{"RowReadsRawBSequentialBf16Wide", 2, 301, 128, 40, bf16, seq}, {kRowReads, kRawB}},
                      SwitchCase{{"SmallTensorWalkF32N40Matrix", 2, 21, 40, 24, f32, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkBf16N40Matrix", 2, 21, 40, 24, bf16, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkF32N8", 2, 50, 8, 8, f32, seq, true, false}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkBf16N64NoState", 2, 37, 64, 16, bf16, seq, false, false},
                                 {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkF32N56", 1, 30, 56, 8, f32, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkBf16N32", 2, 23, 32, 16, bf16, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkBf16T1", 2, 1, 16, 8, bf16, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkF32T1", 2, 1, 64, 16, f32, seq, false, true}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkBf16N40Columns11", 2, 21, 40, 11, bf16, seq}, {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkF32N24Columns3", 2, 19, 24, 3, f32, seq, true, false},
                                 {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkChunkedBf16Matrix", 2, 33, 64, 5, bf16, chunked, false, true},
                                 {kTensorCores}},
                      SwitchCase{{"SmallTensorWalkChunkedF32N40Columns8", 1, 53, 40, 8, f32, chunked},
                                 {kTensorCores}},
                      SwitchCase{{"TensorWalkF32Wide", 2, 301, 64, 64, f32, seq}, {kTensorCores}},
                      SwitchCase{{"TensorWalkBf16Wide", 3, 1001, 64, 64, bf16, seq}, {kTensorCores}}),
    [](const ::testing::TestParamInfo<SwitchCase>& info) { return std::string(info.param.c.name); });

// Relative error of the states in windows of time [T/2^(k+1), T/2^k) ... and the first
// window: how the error grows along the chain.
std::vector<double> window_errors(const std::vector<double>& got, const std::vector<double>& want, int64_t G,
                                  int64_t T, int64_t per_step, int windows) {
  std::vector<double> errors;
  int64_t from = 0;
  for (int w = 0; w < windows; ++w) {
    const int64_t to = w + 1 == windows ? T : T >> (windows - 1 - w);
    std::vector<double> g, r;
    for (int64_t group = 0; group < G; ++group)
      for (int64_t e = (group * T + from) * per_step; e < (group * T + to) * per_step; ++e)
        g.push_back(got[e]), r.push_back(want[e]);
    errors.push_back(rel_err(g, r));
    from = to;
  }
  return errors;
}

// Transitions 0.999·Q_t with Q_t orthogonal keep the state's norm over thousands of
// steps, so rounding errors are not damped. Every method and dtype at n = 32 (the
// mma.sync chunk transfer) and n = 64 (wgmma) over a long chain; prints the error of h
// in windows of time (its growth along the chain) and of dA and db, and asserts
// dtype-aware bounds: f32 1e-4 (the tensor-core chunked path, f32 as three tf32
// products, 1e-3), bf16 2e-2. bf16 matrix states with n = 64 walk on tensor cores
// (walk_wgmma.cuh), f32 ones on the CUDA cores.
struct RadiusCase {
  int64_t T, n, m;
};

class LinearRecurrenceCudaAccuracy : public ::testing::TestWithParam<RadiusCase> {};

TEST_P(LinearRecurrenceCudaAccuracy, SpectralRadiusNearOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const RadiusCase shape = GetParam();
  constexpr int kWindows = 5;
  for (DType dtype : {f32, bf16}) {
    const GpuCase base{"radius", 1, shape.T, shape.n, shape.m, dtype, seq};
    GpuData d(base);
    std::vector<double> A = d.A.values();
    const int64_t n = base.n;
    for (int64_t t = 0; t < base.T; ++t) {  // Gram–Schmidt on the rows, then scale
      double* Q = A.data() + t * n * n;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < i; ++k) {
          const double proj = std::inner_product(Q + i * n, Q + (i + 1) * n, Q + k * n, 0.0);
          for (int64_t j = 0; j < n; ++j) Q[i * n + j] -= proj * Q[k * n + j];
        }
        const double norm = std::sqrt(std::inner_product(Q + i * n, Q + (i + 1) * n, Q + i * n, 0.0));
        for (int64_t j = 0; j < n; ++j) Q[i * n + j] *= 0.999 / norm;
      }
    }
    d.A.set(A);  // stored in dtype: the oracle sees the same rounded transitions
    Results want(base);
    run_oracle(base, d, want);
    const std::vector<double> want_h = want.h.values();
    std::printf("  radius 0.999, T=%lld, n=%lld, m=%lld, %s: rel err of h in steps [0,T/16) [T/16,T/8) [T/8,T/4) "
                "[T/4,T/2) [T/2,T); dA; db\n",
                (long long)base.T, (long long)n, (long long)base.m, dtype_name(dtype));
    // The chunked method twice: as built by default, then its forward in one pass
    // (SEQMIX_LINREC_CHUNKED_FORWARD=fused; m = 1 only, its backward the same as before).
    const bool vector_state = base.m == 1;
    for (int variant = 0; variant < (vector_state ? 5 : 4); ++variant) {
      const Method method = variant < 4 ? std::array{seq, chunked, scan, cr}[variant] : chunked;
      const bool fused = variant == 4;
      if (fused) setenv("SEQMIX_LINREC_CHUNKED_FORWARD", "fused", 1);
      else unsetenv("SEQMIX_LINREC_CHUNKED_FORWARD");
      GpuCase c = base;
      c.method = method;
      Results got(c);
      DeviceTensor dA_in(d.A), b(d.b), h0(d.h0), dh(d.dh), d_final(d.d_final);
      DeviceTensor h(got.h), final_state(got.final_state), dA(got.dA), db(got.db), dh0(got.dh0);
      LinearRecurrenceOptions o;
      o.method = method;
      LinearRecurrenceInputs in{dA_in, b, h0.view};
      linear_recurrence_forward(in, {h, final_state.view}, o);
      linear_recurrence_backward(in, dh, d_final.view, {dA, db, dh0.view}, o);
      const std::vector<double> got_h = h.values(got.h);
      const double h_err = rel_err(got_h, want_h);
      const double dA_err = rel_err(dA.values(got.dA), want.dA.values());
      const double db_err = rel_err(db.values(got.db), want.db.values());
      std::printf("    %-16s h %.1e (", fused ? "chunked (fused)" : linear_recurrence_method_name(method), h_err);
      for (double e : window_errors(got_h, want_h, base.G, base.T, n * base.m, kWindows)) std::printf(" %.1e", e);
      std::printf(" ), dA %.1e, db %.1e\n", dA_err, db_err);
      const bool tensor_chunked = method == chunked && dtype == f32;
      const double bound = dtype == f32 ? (tensor_chunked ? 1e-3 : 1e-4) : 2e-2;
      EXPECT_LT(h_err, bound) << linear_recurrence_method_name(method);
      EXPECT_LT(dA_err, bound) << linear_recurrence_method_name(method);
      EXPECT_LT(db_err, bound) << linear_recurrence_method_name(method);
    }
    unsetenv("SEQMIX_LINREC_CHUNKED_FORWARD");
  }
}

INSTANTIATE_TEST_SUITE_P(Radius, LinearRecurrenceCudaAccuracy,
                         ::testing::Values(RadiusCase{2048, 32, 2}, RadiusCase{4096, 64, 2}, RadiusCase{4096, 64, 1}),
                         [](const ::testing::TestParamInfo<RadiusCase>& info) {
                           return "T" + std::to_string(info.param.T) + "N" + std::to_string(info.param.n) + "M" +
                                  std::to_string(info.param.m);
                         });

// The two gradient kernels (SEQMIX_LINREC_GRADIENT) form the same products in the same
// order, so for states of at most 8 columns their dA and db agree bit for bit: n = 40
// (100 tiles a step, so the stream kernel's items straddle steps) and n = 64, with and
// without an initial state.
TEST(LinearRecurrenceCudaGradients, SmallStreamAndTiledKernelsAgreeBitwise) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const GpuCase& c : {GpuCase{"g40", 2, 29, 40, 3, f32, seq}, GpuCase{"g64", 3, 17, 64, 1, bf16, seq, false},
                           GpuCase{"g64c", 1, 70, 64, 8, f32, chunked}}) {
    const GpuData d(c);
    DeviceTensor A(d.A), b(d.b), h0(d.h0), dh(d.dh), d_final(d.d_final);
    std::vector<std::vector<double>> dAs, dbs;
    for (const char* kernel : {"tiles", "stream"}) {
      setenv("SEQMIX_LINREC_GRADIENT", kernel, 1);
      Results got(c);
      DeviceTensor dA(got.dA), db(got.db), dh0(got.dh0);
      LinearRecurrenceOptions o;
      o.method = c.method;
      LinearRecurrenceInputs in{A, b};
      if (c.with_state) in.initial_state = h0.view;
      LinearRecurrenceGrads grads{dA, db};
      if (c.with_state) grads.d_initial_state = dh0.view;
      linear_recurrence_backward(in, dh, d_final.view, grads, o);
      cuda_ok(cudaDeviceSynchronize());
      dAs.push_back(dA.values(got.dA)), dbs.push_back(db.values(got.db));
    }
    unsetenv("SEQMIX_LINREC_GRADIENT");
    for (double x : dAs[1]) ASSERT_TRUE(std::isfinite(x)) << c.name;
    EXPECT_EQ(dAs[0], dAs[1]) << c.name << " dA";
    EXPECT_EQ(dbs[0], dbs[1]) << c.name << " db";
  }
}

TEST(LinearRecurrenceCudaErrors, SmallUnsupportedInputsNameTheArgument) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const GpuCase c{"errors", 1, 4, 12, 1, f32, seq};
  const GpuData d(c);
  Results r(c);
  DeviceTensor A(d.A), b(d.b), h(r.h);
  const char* op = "seqmix.linear_recurrence: ";
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({A, b}, {h}),
                      std::string(op) + "argument 'A': expected a state size n that is a multiple of 8");
  HostTensor A16 = uniform({1, 4, 16, 16}, DType::f16), b16 = uniform({1, 4, 16, 1}, DType::f16);
  HostTensor h16 = poisoned({1, 4, 16, 1}, DType::f16);
  DeviceTensor dA16(A16), db16(b16), dh16(h16);
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({dA16, db16}, {dh16}), "argument 'A': expected dtype bf16 or f32");
  HostTensor A8 = uniform({1, 4, 8, 8}, f32), b8 = uniform({1, 4, 8, 2}, f32), h8 = poisoned({1, 4, 8, 2}, f32);
  DeviceTensor dA8(A8), db8(b8), dh8(h8);
  Tensor column = db8.view;  // [1, 4, 8, 1] column of a [.., 2] tensor: not contiguous
  column.shape[3] = 1;
  Tensor h_column = dh8.view;
  h_column.shape[3] = 1;
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({dA8, column}, {h_column}),
                      "argument 'b': expected a contiguous tensor on a CUDA device");
  LinearRecurrenceOptions reference;
  reference.impl = Impl::reference;
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({dA8, db8}, {dh8}, reference),
                      "argument 'impl': expected fast or automatic on a CUDA device");
  LinearRecurrenceOptions scan_options;
  scan_options.method = scan;
  DeviceWorkspace tiny(1);
  EXPECT_SEQMIX_ERROR(linear_recurrence_forward({dA8, db8}, {dh8, std::nullopt, tiny.view()}, scan_options),
                      "argument 'workspace': expected at least");
}

// Host-side planning, no GPU needed: the in-place cyclic reduction never asks for more
// scratch than the double-buffered scan, and the automatic rule's two regimes.
TEST(LinearRecurrenceCudaPlan, CyclicReductionNeedsNoMoreWorkspaceThanTheScan) {
  for (int64_t G : {1, 16, 64})
    for (int64_t T : {1, 1024, 4096, 8192})
      for (int64_t n : {32, 64, 128})
        for (int64_t m : {1, 64})
          for (bool backward : {false, true}) {
            LinearRecurrenceOptions scan_o, cr_o, seq_o;
            scan_o.method = scan, cr_o.method = cr, seq_o.method = seq;
            const int64_t w_scan = linear_recurrence_workspace_size(G, T, n, m, DType::f32, backward, scan_o);
            const int64_t w_cr = linear_recurrence_workspace_size(G, T, n, m, DType::f32, backward, cr_o);
            EXPECT_LT(w_cr, w_scan) << G << " " << T << " " << n << " " << m << " " << backward;
            EXPECT_EQ(linear_recurrence_workspace_size(G, T, n, m, DType::f32, backward, seq_o),
                      backward ? 2 * G * T * n * m : 1);
          }
}

TEST(LinearRecurrenceCudaPlan, AutomaticMethodFollowsTheMeasuredTable) {
  const auto method = [](int64_t G, int64_t T, int64_t n, int64_t m, DType dtype = DType::f32) {
    return linear_recurrence_cuda_method(G, T, n, m, dtype);
  };
  // n ≤ 64, m ≤ 8: the chunked method on tensor cores, until the sequential walk (flat
  // in G) wins at 64 groups of n = 64 in f32; in bf16 the chunked chains still win there.
  EXPECT_EQ(method(16, 4096, 64, 1), chunked);
  EXPECT_EQ(method(1, 4096, 64, 1), chunked);
  EXPECT_EQ(method(64, 4096, 64, 1), seq);
  EXPECT_EQ(method(64, 4096, 64, 1, DType::bf16), chunked);
  EXPECT_EQ(method(64, 4096, 32, 1), chunked);
  EXPECT_EQ(method(1, 100, 64, 1), chunked);  // short: the nearest grid point's
  // Without tensor cores (n = 128, or m > 8 where the chunked method cannot walk whole
  // states): cyclic reduction at one group, sequential at many.
  const bool wide = cuda::chunked_wide(64, 64, cuda::RecurrenceDtype::f32);
  EXPECT_EQ(method(2, 4096, 64, 64), wide ? chunked : cr);
  EXPECT_EQ(method(16, 4096, 64, 64), wide ? chunked : seq);
  EXPECT_EQ(method(16, 4096, 64, 12), seq);
  EXPECT_EQ(method(16, 4096, 128, 1), seq);
  EXPECT_EQ(method(64, 4096, 128, 1, DType::bf16), seq);
  EXPECT_EQ(method(1, 4096, 128, 1), cr);
  EXPECT_EQ(method(1, 8192, 128, 1), chunked);  // long: chunked summaries win
  EXPECT_EQ(method(24, 1024, 40, 1), chunked);  // n 40 pads to 64, G 24 reads as 16
  // Only the 64-group n = 64 vector-state entry depends on the dtype; matrix states with
  // n ≤ 64 take the chunked method in both (built with the CUTLASS headers: whole states).
  for (int64_t G : {1, 16, 64})
    for (int64_t T : {1024, 8192})
      for (int64_t n : {32, 64, 128})
        for (int64_t m : {1, 64}) {
          if (!(G == 64 && n == 64 && m == 1))
            EXPECT_EQ(method(G, T, n, m, DType::bf16), method(G, T, n, m)) << G << " " << T << " " << n << " " << m;
          if (n <= 64 && m == 64 && wide) EXPECT_EQ(method(G, T, n, m), chunked) << G << " " << T << " " << n;
        }
#if defined(SEQMIX_HAS_CUTLASS)
  EXPECT_TRUE(wide);
  EXPECT_EQ(method(16, 4096, 64, 64, DType::bf16), chunked);
  EXPECT_EQ(method(16, 4096, 64, 12, DType::bf16), seq);  // m not a multiple of 8: the table's
#endif
}

// The chunked method on tensor cores keeps only chunk summaries: far less scratch than
// the float copies of every transition the composition path keeps (n = 128).
TEST(LinearRecurrenceCudaPlan, ChunkedOnTensorCoresKeepsOnlySummaries) {
  LinearRecurrenceOptions o;
  o.method = chunked;
  for (bool backward : {false, true}) {
    const int64_t G = 16, T = 4096, n = 64;
    const int64_t w = linear_recurrence_workspace_size(G, T, n, 1, DType::f32, backward, o);
    EXPECT_LT(w, G * T * n * n / 8) << backward;
    EXPECT_GE(w, backward ? 2 * G * T * n + 2 * G * (T / 64) * n * n : G * (T / 64) * n * n) << backward;
    EXPECT_GT(linear_recurrence_workspace_size(G, T, 128, 1, DType::f32, backward, o), G * T * 128 * 128) << backward;
  }
}

// Matrix states of the chunked method keep only chunk summaries where they walk whole
// states on tensor cores (built with the CUTLASS headers; SEQMIX_LINREC_CHUNKED_WIDE=0 sends
// them to the float copies, =bf16 only the f32 ones).
TEST(LinearRecurrenceCudaPlan, ChunkedWideKeepsOnlySummaries) {
  LinearRecurrenceOptions o;
  o.method = chunked;
  const int64_t G = 16, T = 4096, n = 64, m = 64, chunks = T / cuda::default_wide_chunk_size(G, T);
  EXPECT_EQ(chunks, 16);  // one wave of blocks: 16 groups × 16 chunks
  for (bool backward : {false, true}) {
    const int64_t summaries = G * chunks * (n * n + 2 * n * m) * (backward ? 2 : 1);
    const int64_t states = backward ? 2 * G * T * n * m : 0;
    const int64_t w = linear_recurrence_workspace_size(G, T, n, m, DType::bf16, backward, o);
#if defined(SEQMIX_HAS_CUTLASS)
    EXPECT_EQ(w, summaries + states) << backward;
#else
    EXPECT_GT(w, G * T * n * n) << backward;
#endif
#if defined(SEQMIX_HAS_CUTLASS)
    EXPECT_EQ(linear_recurrence_workspace_size(G, T, n, m, DType::f32, backward, o), summaries + states) << backward;
#endif
    EXPECT_GT(linear_recurrence_workspace_size(G, T, n, 12, DType::bf16, backward, o), G * T * n * n)
        << backward << ": m not a multiple of 8";
    setenv("SEQMIX_LINREC_CHUNKED_WIDE", "bf16", 1);
    EXPECT_GT(linear_recurrence_workspace_size(G, T, n, m, DType::f32, backward, o), G * T * n * n) << backward;
    setenv("SEQMIX_LINREC_CHUNKED_WIDE", "0", 1);
    EXPECT_GT(linear_recurrence_workspace_size(G, T, n, m, DType::bf16, backward, o), G * T * n * n) << backward;
    unsetenv("SEQMIX_LINREC_CHUNKED_WIDE");
  }
}

// The one-pass chunked chains of a vector state run in the chunked method's workspace,
// forward and backward, whatever chunk they take (the options', or at least kMinFusedChunk).
TEST(LinearRecurrenceCudaPlan, FusedForwardFitsTheChunkedWorkspace) {
  for (int64_t G : {1, 5, 16, 64})
    for (int64_t T : {1, 7, 100, 1024, 4096, 8192})
      for (int64_t n : {8, 32, 40, 64})
        for (int64_t chunk : {0, 1, 5, 8, 16, 64}) {
          LinearRecurrenceOptions o;
          o.method = chunked;
          o.chunk_size = chunk;
          const int64_t have = linear_recurrence_workspace_size(G, T, n, 1, DType::f32, false, o);
          const int64_t fused_chunk = chunk > 0 ? chunk : cuda::kMinFusedChunk;
          EXPECT_GE(have, cuda::fused_chunk_scratch_floats(G, T, n, std::min(fused_chunk, T)))
              << G << " " << T << " " << n << " " << chunk;
          // The backward: both chains' slots after the two float state arrays.
          const int64_t have_bwd = linear_recurrence_workspace_size(G, T, n, 1, DType::f32, true, o) - 2 * G * T * n;
          EXPECT_GE(have_bwd, 2 * cuda::fused_chunk_scratch_floats(G, T, n, std::min(fused_chunk, T)))
              << G << " " << T << " " << n << " " << chunk << " backward";
        }
}

// ---- timing (SEQMIX_LINREC_TIMING=1) ----

struct TimedShape {
  int64_t G, T, n, m;
  DType dtype;
};


// Fills a device buffer of `count` elements with copies of one random block (a host
// fill of gigabytes would take longer than the timing).
void fill_random(void* device, int64_t count, DType dtype, double scale) {
  const int64_t block = std::min<int64_t>(count, 1 << 22);
  HostTensor random = uniform({block}, dtype, -scale, scale);
  const size_t block_bytes = block * dtype_size(dtype);
  for (int64_t at = 0; at < count; at += block) {
    const size_t bytes = std::min<int64_t>(block, count - at) * dtype_size(dtype);
    cuda_ok(cudaMemcpy(static_cast<char*>(device) + at * dtype_size(dtype), random.storage.data(),
                       std::min(bytes, block_bytes), cudaMemcpyHostToDevice));
  }
}

// The shapes SEQMIX_LINREC_TIMING_SHAPES lists ("G,T,n,m,dtype;..."), or `fallback` when unset.
std::vector<TimedShape> timed_shapes(std::vector<TimedShape> fallback) {
  const char* only = std::getenv("SEQMIX_LINREC_TIMING_SHAPES");
  if (!only) return fallback;
  std::vector<TimedShape> chosen;
  const std::string text = only;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find(';', at), text.size());
    long long G, T, n, m;
    char dtype[8] = {};
    if (std::sscanf(text.substr(at, end - at).c_str(), "%lld,%lld,%lld,%lld,%7s", &G, &T, &n, &m, dtype) == 5)
      chosen.push_back({G, T, n, m, std::string(dtype) == "bf16" ? bf16 : f32});
    at = end + 1;
  }
  return chosen;
}

// Device inputs (random), outputs and gradients of one timed shape, with their views.
struct TimedBuffers {
  int64_t nA, nb, ns;
  void *A, *b, *h, *dh, *dA, *db, *fs;
  Tensor tA, tb, th, tdh, tdA, tdb, tfs;
  explicit TimedBuffers(const TimedShape& s)
      : nA(s.G * s.T * s.n * s.n), nb(s.G * s.T * s.n * s.m), ns(s.G * s.n * s.m) {
    const int e = dtype_size(s.dtype);
    for (void** p : {&A, &b, &h, &dh, &dA, &db}) cuda_ok(cudaMalloc(p, (p == &A || p == &dA ? nA : nb) * e));
    cuda_ok(cudaMalloc(&fs, ns * e));
    fill_random(A, nA, s.dtype, 1.2 / std::sqrt(double(s.n)));
    fill_random(b, nb, s.dtype, 1.0);
    fill_random(dh, nb, s.dtype, 1.0);
    auto view = [&](void* p, std::vector<int64_t> shape) {
      return Tensor::contiguous(p, s.dtype, std::move(shape), Device::cuda(0));
    };
    tA = view(A, {s.G, s.T, s.n, s.n}), tb = view(b, {s.G, s.T, s.n, s.m});
    th = view(h, {s.G, s.T, s.n, s.m}), tdh = view(dh, {s.G, s.T, s.n, s.m});
    tdA = view(dA, {s.G, s.T, s.n, s.n}), tdb = view(db, {s.G, s.T, s.n, s.m});
    tfs = view(fs, {s.G, s.n, s.m});
  }
  ~TimedBuffers() {
    for (void* p : {A, b, h, dh, dA, db, fs}) cudaFree(p);
  }
  // Milliseconds for A and b read and h written once at 3 TB/s.
  double floor_ms(DType dtype) const { return double((nA + 2 * nb) * dtype_size(dtype)) / 3.0e12 * 1e3; }
};

// The timing tests run only when SEQMIX_LINREC_TIMING=1.
bool timing_requested() {
  const char* flag = std::getenv("SEQMIX_LINREC_TIMING");
  return flag && std::string(flag) == "1";
}

std::string device_name() {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return prop.name;
}

TEST(LinearRecurrenceCudaTiming, MethodsOnTheGrid) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (!timing_requested()) GTEST_SKIP() << "set SEQMIX_LINREC_TIMING=1 to time the methods";
  std::cout << "device: " << device_name() << "\n";
  const std::vector<TimedShape> shapes = {
      {16, 4096, 64, 1, f32},  {16, 4096, 64, 1, bf16}, {16, 4096, 32, 1, f32},  {16, 4096, 128, 1, f32},
      {1, 4096, 64, 1, f32},   {1, 4096, 64, 1, bf16},  {1, 4096, 32, 1, f32},   {1, 4096, 128, 1, f32},
      {64, 4096, 64, 1, f32},  {64, 4096, 32, 1, bf16}, {16, 1024, 64, 1, f32},  {16, 8192, 64, 1, f32},
      {16, 4096, 64, 64, f32}, {16, 4096, 64, 64, bf16}, {1, 4096, 64, 64, f32}, {64, 2048, 128, 1, bf16},
  };
  const std::vector<TimedShape> chosen = timed_shapes(shapes);
  const char* only_methods = std::getenv("SEQMIX_LINREC_TIMING_METHODS");  // e.g. "sequential,chunked"
  std::cout << "| G | T | n | m | dtype | method | fwd ms | bwd ms | bwd/fwd | floor ms | fwd/floor | workspace MB |\n"
            << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& s : chosen) {
    const TimedBuffers buffers(s);
    const int e = dtype_size(s.dtype);
    const int64_t nA = buffers.nA;
    const Tensor &tA = buffers.tA, &tb = buffers.tb, &th = buffers.th, &tdh = buffers.tdh, &tdA = buffers.tdA,
                 &tdb = buffers.tdb, &tfs = buffers.tfs;
    const double floor_ms = buffers.floor_ms(s.dtype);
    // `label` names the row: the method, and for the chunked method the chunk-transfer
    // product when SEQMIX_LINREC_TIMING_TRANSFERS lists several ("mma,wgmma").
    auto time_method = [&](Method method, const std::string& label) {
      LinearRecurrenceOptions o;
      o.method = method;
      if (const char* chunk = std::getenv("SEQMIX_LINREC_TIMING_CHUNK"); chunk && method == chunked)
        o.chunk_size = std::atoll(chunk);
      const int64_t ws_fwd = linear_recurrence_workspace_size(s.G, s.T, s.n, s.m, s.dtype, false, o);
      const int64_t ws_bwd = linear_recurrence_workspace_size(s.G, s.T, s.n, s.m, s.dtype, true, o);
      const double work = double(s.G) * s.T * s.n * s.n * (s.n + s.m);  // a parallel method's n³ work
      if (method == scan && work * std::log2(double(s.T)) > 2e12) return;  // seconds per call
      if (method != seq && (ws_bwd * 4.0 + 2.0 * nA * e) > 60e9) return;
      DeviceWorkspace wf(ws_fwd), wb(ws_bwd);
      const double fwd = median_ms([&] { linear_recurrence_forward({tA, tb}, {th, tfs, wf.view()}, o); }, {.reps = 5});
      const double bwd = median_ms(
          [&] { linear_recurrence_backward({tA, tb}, tdh, tfs, {tdA, tdb, std::nullopt, wb.view()}, o); }, {.reps = 3});
      cuda_ok(cudaGetLastError());
      const auto row = [&](const std::string& name, double b) {
        std::printf("| %lld | %lld | %lld | %lld | %s | %s | %.4f | %.4f | %.2f | %.4f | %.2f | %.0f |\n",
                    (long long)s.G, (long long)s.T, (long long)s.n, (long long)s.m, dtype_name(s.dtype), name.c_str(),
                    fwd, b, b / fwd, floor_ms, fwd / floor_ms, ws_bwd * 4.0 / 1e6);
        std::fflush(stdout);
      };
      row(label, bwd);
      if (std::getenv("SEQMIX_LINREC_TIMING_STATES")) {  // the backward given the forward's h as well
        linear_recurrence_forward({tA, tb}, {th, tfs, wf.view()}, o);
        row(label + "[states]",
            median_ms([&] { linear_recurrence_backward({tA, tb}, tdh, tfs, {tdA, tdb, std::nullopt, wb.view()}, o, th); },
                      {.reps = 3}));
      }
    };
    // Runs `each(value)` with the environment variable `var` set to every value of the
    // comma-separated `list` in turn (the switches are read at every call), or once with
    // an empty value when the list is null.
    auto for_each_setting = [](const char* var, const char* list, const auto& each) {
      if (!list) return each(std::string());
      const std::string text = list;
      for (size_t at = 0; at < text.size();) {
        const size_t end = std::min(text.find(',', at), text.size());
        const std::string value = text.substr(at, end - at);
        setenv(var, value.c_str(), 1);
        each("[" + value + "]");
        at = end + 1;
      }
      unsetenv(var);
    };
    const char* transfers = std::getenv("SEQMIX_LINREC_TIMING_TRANSFERS");
    const char* gradients = std::getenv("SEQMIX_LINREC_TIMING_GRADIENTS");  // "tiles,stream"
    const char* rewalks = std::getenv("SEQMIX_LINREC_TIMING_REWALKS");      // "1,2" blocks per SM
    const char* forwards = std::getenv("SEQMIX_LINREC_TIMING_FORWARDS");    // "split,fused16,fused32"
    const char* fused_blocks = std::getenv("SEQMIX_LINREC_TIMING_FUSED_BLOCKS");  // "2,3" (f32, n ≤ 64)
    const char* bf16_blocks = std::getenv("SEQMIX_LINREC_TIMING_FUSED_BLOCKS_BF16");  // "3,4" (bf16 forward)
    const char* fused_transfers = std::getenv("SEQMIX_LINREC_TIMING_FUSED_TRANSFERS");  // "shared,transposed"
    const char* walks = std::getenv("SEQMIX_LINREC_TIMING_WALKS");  // "0,1": the walk on CUDA or tensor cores
    const char* chunks = std::getenv("SEQMIX_LINREC_TIMING_CHUNKS");  // "64,128": the chunked method's chunk
    for (Method method : {seq, chunked, cr, scan}) {
      if (only_methods && !std::strstr(only_methods, linear_recurrence_method_name(method))) continue;
      const std::string name = linear_recurrence_method_name(method);
      for_each_setting("SEQMIX_LINREC_SEQUENTIAL_WGMMA", walks, [&](const std::string& walk) {
      for_each_setting("SEQMIX_LINREC_GRADIENT", gradients, [&](const std::string& gradient) {
        for_each_setting("SEQMIX_LINREC_REWALK_BLOCKS", method == chunked ? rewalks : nullptr,
                         [&](const std::string& rewalk) {
          for_each_setting("SEQMIX_LINREC_CHUNK_TRANSFER", method == chunked ? transfers : nullptr,
                           [&](const std::string& product) {
            for_each_setting("SEQMIX_LINREC_CHUNKED_FORWARD", method == chunked ? forwards : nullptr,
                             [&](const std::string& forward) {
              for_each_setting("SEQMIX_LINREC_FUSED_BLOCKS", method == chunked ? fused_blocks : nullptr,
                               [&](const std::string& blocks) {
                for_each_setting("SEQMIX_LINREC_FUSED_BLOCKS_BF16", method == chunked ? bf16_blocks : nullptr,
                                 [&](const std::string& bf16) {
                  for_each_setting("SEQMIX_LINREC_FUSED_TRANSFER", method == chunked ? fused_transfers : nullptr,
                                   [&](const std::string& transfer) {
                    for_each_setting("SEQMIX_LINREC_TIMING_CHUNK", method == chunked ? chunks : nullptr,
                                     [&](const std::string& chunk) {
                      time_method(method, name + product + rewalk + forward + blocks + bf16 + transfer + chunk +
                                              gradient + (walk.empty() ? "" : "[wgmma=" + walk.substr(1)));
                    });
                  });
                });
              });
            });
          });
        });
      });
      });
    }
  }
}

// The sequential method with its developer switches off and on, side by side on the same
// inputs, the settings alternating call by call (L2 flushed before each), medians of the
// forward and the backward: in bf16 b held as floats or raw bits (SEQMIX_LINREC_SEQUENTIAL_RAW_B)
// times the state read as scalars or rows (SEQMIX_LINREC_SEQUENTIAL_ROW_READS, m > 1 only),
// in f32 the state reads alone. Shapes from SEQMIX_LINREC_TIMING_SHAPES as in
// MethodsOnTheGrid; when unset G16 T4096 n64 at m = 1 and 64 in both dtypes.
TEST(LinearRecurrenceCudaTiming, SequentialSwitchesSideBySide) {
  SKIP_WITHOUT_CUDA_DEVICE();
  if (!timing_requested()) GTEST_SKIP() << "set SEQMIX_LINREC_TIMING=1 to time the walks";
  std::cout << "device: " << device_name() << "\n"
            << "| G | T | n | m | dtype | b held as | state reads | fwd ms | bwd ms | floor ms | fwd/floor |\n"
            << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  constexpr int kReps = 7;
  for (const TimedShape& s : timed_shapes({{16, 4096, 64, 1, f32},
                                           {16, 4096, 64, 1, bf16},
                                           {16, 4096, 64, 64, f32},
                                           {16, 4096, 64, 64, bf16}})) {
    const TimedBuffers buffers(s);
    const Tensor &tA = buffers.tA, &tb = buffers.tb, &th = buffers.th, &tdh = buffers.tdh, &tdA = buffers.tdA,
                 &tdb = buffers.tdb, &tfs = buffers.tfs;
    LinearRecurrenceOptions o;
    o.method = seq;
    DeviceWorkspace wf(linear_recurrence_workspace_size(s.G, s.T, s.n, s.m, s.dtype, false, o));
    DeviceWorkspace wb(linear_recurrence_workspace_size(s.G, s.T, s.n, s.m, s.dtype, true, o));
    const auto forward = [&] { linear_recurrence_forward({tA, tb}, {th, tfs, wf.view()}, o); };
    const auto backward = [&] {
      linear_recurrence_backward({tA, tb}, tdh, tfs, {tdA, tdb, std::nullopt, wb.view()}, o);
    };
    std::vector<std::pair<const char*, const char*>> settings;  // RAW_B, ROW_READS
    for (const char* raw_b : {"0", "1"})
      for (const char* row_reads : {"0", "1"})
        if ((s.dtype == bf16 || raw_b[0] == '0') && (s.m > 1 || row_reads[0] == '0'))
          settings.emplace_back(raw_b, row_reads);
    std::vector<std::vector<float>> fwd(settings.size()), bwd(settings.size());
    setenv("SEQMIX_LINREC_SEQUENTIAL_WGMMA", "0", 1);  // the CUDA cores' walk, whose switches these are
    for (int rep = 0; rep < kReps; ++rep)
      for (size_t k = 0; k < settings.size(); ++k) {
        setenv("SEQMIX_LINREC_SEQUENTIAL_RAW_B", settings[k].first, 1);
        setenv("SEQMIX_LINREC_SEQUENTIAL_ROW_READS", settings[k].second, 1);
        fwd[k].push_back(event_times_ms(forward, {.reps = 1, .warmups = rep == 0 ? 1 : 0})[0]);
        bwd[k].push_back(event_times_ms(backward, {.reps = 1, .warmups = rep == 0 ? 1 : 0})[0]);
      }
    unsetenv("SEQMIX_LINREC_SEQUENTIAL_RAW_B");
    unsetenv("SEQMIX_LINREC_SEQUENTIAL_ROW_READS");
    unsetenv("SEQMIX_LINREC_SEQUENTIAL_WGMMA");
    const double floor_ms = buffers.floor_ms(s.dtype);
    for (size_t k = 0; k < settings.size(); ++k) {
      std::sort(fwd[k].begin(), fwd[k].end());
      std::sort(bwd[k].begin(), bwd[k].end());
      const double f = fwd[k][kReps / 2];
      std::printf("| %lld | %lld | %lld | %lld | %s | %s | %s | %.4f | %.4f | %.4f | %.2f |\n", (long long)s.G,
                  (long long)s.T, (long long)s.n, (long long)s.m, dtype_name(s.dtype),
                  settings[k].first[0] == '1' ? "raw bits" : "floats", settings[k].second[0] == '1' ? "rows" : "scalars",
                  f, double(bwd[k][kReps / 2]), floor_ms, f / floor_ms);
    }
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace seqmix::test
