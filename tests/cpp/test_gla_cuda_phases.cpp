// Where the GLA CUDA time goes: each launch of a forward (with either diagonal, with its
// median time over 20 runs) and of a backward timed with events, and the forward walk's chunk
// step split into its phases (SM cycles), and the backward's gradient kernel's phases, at the
// benchmark shapes (H 16, K = V = 128, bf16); the backward by each form of its gradient
// kernel (token walk, tail) side by side; and the forward walks by tiling and by walkers.
// Printed; run with --gtest_filter='*GlaCudaTiming*'. Asserts only that the phases were
// counted and the outputs are finite.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "cuda/gla/params.hpp"
#include "cuda/gla/profile.hpp"
#include "cuda_util.hpp"
#include "seqmix/gla.hpp"

namespace seqmix::test {
namespace {

using cuda::GlaProfile;

void print_launches(const char* what, const GlaProfile& profile) {
  double total = 0;
  for (const auto& l : profile.launches) total += l.ms;
  std::printf("  %s: %zu launches, %.4f ms in all\n", what, profile.launches.size(), total);
  for (const auto& l : profile.launches) std::printf("    %-40s %.4f ms\n", l.kernel.c_str(), l.ms);
}

// Cycles per chunk step of each phase (averaged over every block's steps), and its share.
void print_phases(const GlaProfile& profile) {
  const uint64_t* c = profile.phase_cycles;
  const double steps = static_cast<double>(c[cuda::kGlaPhaseSteps]);
  if (steps == 0) return;
  const char* names[] = {"load wait + barrier",
                         "walkers (decayed operands)",
                         "diagonal sub-chunks",
                         "sub-chunk pairs (mma)",
                         "output q_start·S + A·v (warp 0)",
                         "state advance (warp 0)"};
  double total = 0;
  for (int i = 0; i < cuda::kGlaPhaseSteps; ++i) total += static_cast<double>(c[i]);
  std::printf("  walk: %llu blocks, %.0f chunk steps, %.0f cycles a step:\n",
              static_cast<unsigned long long>(c[cuda::kGlaPhaseBlocks]), steps, total / steps);
  for (int i = 0; i < cuda::kGlaPhaseSteps; ++i)
    std::printf("    %-36s %8.0f cycles  %5.1f%%\n", names[i], static_cast<double>(c[i]) / steps,
                100.0 * static_cast<double>(c[i]) / std::max(total, 1.0));
}

// Cycles a chunk step of each side of the outputs pass with two chunks in flight.
void print_pipelined_phases(const GlaProfile& profile) {
  const uint64_t* c = profile.phase_cycles;
  const double steps = static_cast<double>(c[cuda::kGlaPipelinedSteps]);
  if (steps == 0) return;
  const char* names[] = {"chunk side: wait for an empty slot", "chunk side: copies issued, landed",
                         "chunk side: factored operands, vote", "chunk side: A",
                         "state side: S as operand",          "state side: wait for the chunk side",
                         "state side: o",                     "state side: S's update"};
  std::printf("  two chunks in flight: %.0f chunk steps\n", steps);
  for (int side = 0; side < 2; ++side) {
    const int first = cuda::kGlaPipelinedSlotWait + 4 * side;
    double total = 0;
    for (int i = first; i < first + 4; ++i) total += static_cast<double>(c[i]);
    for (int i = first; i < first + 4; ++i)
      std::printf("    %-40s %8.0f cycles  %5.1f%%\n", names[i - cuda::kGlaPipelinedSlotWait],
                  static_cast<double>(c[i]) / steps, 100.0 * static_cast<double>(c[i]) / std::max(total, 1.0));
  }
}

// One profiled run of `forward`: its launches (under `name`) and the walk's phases printed.
template <class Forward>
GlaProfile profiled_forward(const char* name, const Forward& forward) {
  cuda::gla_profile_start();
  forward();
  const GlaProfile profile = cuda::gla_profile_stop();
  print_launches(name, profile);
  print_phases(profile);
  print_pipelined_phases(profile);
  return profile;
}

// Cycles a block of each phase of the backward's gradient kernel, and its share.
void print_gradient_phases(const GlaProfile& profile) {
  const uint64_t* c = profile.phase_cycles;
  const double blocks = static_cast<double>(c[cuda::kGlaGradientBlocks]);
  if (blocks == 0) return;
  const char* names[] = {"loads q, k, g (+ zero A)",
                         "A: pairs inside quads (+ barrier)",
                         "A: walkers (+ barrier)",
                         "A: quad and sub-chunk pairs (thread 0)",
                         "wait for value slice 0 (+ barrier)",
                         "value loop (dA, dv, states)",
                         "dA stored, e^g, factors, quad operands",  // factored: the walk and vote
                         "dq, dk products (mma)",                   // factored: dq, dk written
                         "token walks (dq, dk written)",
                         "dg sums (thread 0)"};
  double total = 0;
  for (int i = cuda::kGlaGradientLoads; i < cuda::kGlaGradientBlocks; ++i) total += static_cast<double>(c[i]);
  std::printf("  gradient kernel: %.0f blocks (%llu factored whole), %.0f cycles a block:\n", blocks,
              static_cast<unsigned long long>(c[cuda::kGlaGradientFactored]), total / blocks);
  for (int i = cuda::kGlaGradientLoads; i < cuda::kGlaGradientBlocks; ++i)
    std::printf("    %-40s %8.0f cycles  %5.1f%%\n", names[i - cuda::kGlaGradientLoads],
                static_cast<double>(c[i]) / blocks, 100.0 * static_cast<double>(c[i]) / std::max(total, 1.0));
}

// Random bf16 inputs of a timing shape (H 16, K = V = 128 unless given) on the device, with output
// and gradient buffers, and the forward and backward over them (default options, scale K^-½).
struct TimingInputs {
  int64_t H, K, V;
  HostTensor q, k, v, g, d_out, o, hT, dq, dk, dv, dg;
  DeviceTensor d_q, d_k, d_v, d_g, d_do, d_o, d_hT, d_dq, d_dk, d_dv, d_dg;
  GlaOptions options;

  TimingInputs(int64_t B, int64_t T, int64_t H_ = 16, int64_t K_ = 128, int64_t V_ = 128)
      : H(H_), K(K_), V(V_),
        q(uniform({B, T, H, K}, DType::bf16)), k(uniform({B, T, H, K}, DType::bf16)),
        v(uniform({B, T, H, V}, DType::bf16)), g(uniform({B, T, H, K}, DType::bf16, -0.2, 0.0)),
        d_out(uniform({B, T, H, V}, DType::bf16)), o({B, T, H, V}, DType::bf16), hT({B, H, K, V}, DType::f32),
        dq({B, T, H, K}, DType::bf16), dk({B, T, H, K}, DType::bf16), dv({B, T, H, V}, DType::bf16),
        dg({B, T, H, K}, DType::bf16), d_q(q), d_k(k), d_v(v), d_g(g), d_do(d_out), d_o(o), d_hT(hT), d_dq(dq),
        d_dk(dk), d_dv(dv), d_dg(dg) {
    options.scale = 1.0 / std::sqrt(static_cast<double>(K));
  }
  GlaInputs inputs() const { return {d_q, d_k, d_v, d_g}; }
  // chunk_states, chunk_scores: the forward saves its chunk states (and scores) there, the
  // backward reads them.
  void forward(const std::optional<Tensor>& chunk_states = std::nullopt,
               const std::optional<Tensor>& chunk_scores = std::nullopt) {
    GlaOutputs out{d_o.view, d_hT.view, chunk_states};
    out.chunk_scores = chunk_scores;
    gla_forward(inputs(), out, options);
  }
  void backward(const std::optional<Tensor>& chunk_states = std::nullopt,
                const std::optional<Tensor>& chunk_scores = std::nullopt) {
    GlaInputs in = inputs();
    in.chunk_states = chunk_states;
    in.chunk_scores = chunk_scores;
    gla_backward(in, d_do.view, std::nullopt, {d_dq.view, d_dk.view, d_dv.view, d_dg.view}, options);
  }
};

void profile_shape(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  const int64_t H = in.H, K = in.K, V = in.V;
  auto forward = [&] { in.forward(); };
  auto backward = [&] { in.backward(); };
  for (int i = 0; i < 3; ++i) forward(), backward();  // warm-up
  std::printf("gla B%lld T%lld H%lld K%lld V%lld bf16, per launch:\n", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(K),
              static_cast<long long>(V));
  const cuda::GlaForwardDiagonal diagonal_before = cuda::gla_forward_diagonal();
  GlaProfile fwd;
  std::vector<double> cuda_core_out;  // the forwards agree at this size too
  struct Forward {
    const char* name;
    cuda::GlaForwardDiagonal diagonal;
  };
  for (const Forward f : {Forward{"CUDA-core diagonal", cuda::GlaForwardDiagonal::cuda_cores},
                          Forward{"tensor-core diagonal", cuda::GlaForwardDiagonal::tensor_cores}}) {
    cuda::gla_set_forward_diagonal(f.diagonal);
    const float ms = median_ms(forward, {.reps = 20, .warmups = 3, .flush_l2 = false});
    std::printf("  forward, %s: median %.4f ms\n", f.name, ms);
    fwd = profiled_forward(f.name, forward);
    EXPECT_GT(fwd.phase_cycles[cuda::kGlaPhaseSteps] + fwd.phase_cycles[cuda::kGlaPipelinedSteps], 0u);
    if (cuda_core_out.empty()) cuda_core_out = in.d_o.values(in.o);
    else
      EXPECT_LT(rel_err(in.d_o.values(in.o), cuda_core_out), tolerance(DType::bf16)) << f.name << " against CUDA cores";
  }
  cuda::gla_set_forward_diagonal(diagonal_before);
  // A split forward's pass 1 as one block a segment against in pieces (launch.cuh), side by
  // side on the same inputs; their outputs agree.
  if (B * H * 2 <= 132) {
    std::vector<double> whole;
    for (const bool pieces : {false, true, false, true}) {
      cuda::gla_set_forward_pieces(pieces);
      const float ms = median_ms(forward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      std::printf("  forward, pass 1 %s: median %.4f ms\n", pieces ? "in pieces" : "a block a segment", ms);
      if (!pieces) whole = in.d_o.values(in.o);
      else EXPECT_LT(rel_err(in.d_o.values(in.o), whole), tolerance(DType::bf16)) << "pieces against whole segments";
    }
    cuda::gla_set_forward_pieces(false);
    cuda::gla_profile_start();
    forward();
    print_launches("pass 1 a block a segment", cuda::gla_profile_stop());
    cuda::gla_set_forward_pieces(true);
  }
  cuda::gla_profile_start();
  backward();
  const GlaProfile bwd = cuda::gla_profile_stop();
  print_launches("backward", bwd);
  std::printf("  (the backward's chunk-state walk)\n");
  print_phases(bwd);
  print_gradient_phases(bwd);
  EXPECT_GT(bwd.phase_cycles[cuda::kGlaGradientBlocks], 0u);

  EXPECT_FALSE(fwd.launches.empty());
  EXPECT_FALSE(bwd.launches.empty());
  const std::vector<double> out = in.d_o.values(in.o), grad = in.d_dg.values(in.dg);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](double x) { return std::isfinite(x); }));
  EXPECT_TRUE(std::all_of(grad.begin(), grad.end(), [](double x) { return std::isfinite(x); }));
}

// The backward by each form of the gradient kernel (token walk by rows; by quads with the
// narrow tail; by quads with the wide tail), side by side on the same inputs, alternated
// twice: medians of 20 event-timed runs after 3 warm-ups, then one profiled run each
// (launches and the gradient kernel's phases). Asserts that their gradients agree within
// the bf16 bound.
void compare_backward_walks(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  auto backward = [&] { in.backward(); };
  const cuda::GlaBackwardDiagonal diagonal_before = cuda::gla_backward_diagonal();
  const cuda::GlaBackwardWalk walk_before = cuda::gla_backward_walk();
  const cuda::GlaBackwardTail tail_before = cuda::gla_backward_tail();
  cuda::gla_set_backward_diagonal(cuda::GlaBackwardDiagonal::tensor_cores);
  struct Form {
    const char* name;
    cuda::GlaBackwardWalk walk;
    cuda::GlaBackwardTail tail;
  };
  const Form forms[] = {{"rows", cuda::GlaBackwardWalk::rows, cuda::GlaBackwardTail::narrow},
                        {"quads, narrow tail", cuda::GlaBackwardWalk::quads, cuda::GlaBackwardTail::narrow},
                        {"quads, wide tail", cuda::GlaBackwardWalk::quads, cuda::GlaBackwardTail::wide}};
  std::printf("gla backward B%lld T%lld H16 K128 V128 bf16 by gradient kernel form, median of 20:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  std::vector<double> first[4];  // dq, dk, dv, dg of the first form
  for (int round = 0; round < 2; ++round)
    for (const Form& form : forms) {
      cuda::gla_set_backward_walk(form.walk);
      cuda::gla_set_backward_tail(form.tail);
      const float ms = median_ms(backward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      std::printf("  %-18s median %.4f ms\n", form.name, ms);
      if (round > 0) continue;
      cuda::gla_profile_start();
      backward();
      const GlaProfile profile = cuda::gla_profile_stop();
      print_launches(form.name, profile);
      print_gradient_phases(profile);
      const std::vector<double> got[4] = {in.d_dq.values(in.dq), in.d_dk.values(in.dk), in.d_dv.values(in.dv),
                                          in.d_dg.values(in.dg)};
      for (int i = 0; i < 4; ++i) {
        if (&form == forms) first[i] = got[i];
        else EXPECT_LT(rel_err(got[i], first[i]), tolerance(DType::bf16)) << "gradient " << i << ": " << form.name;
      }
    }
  cuda::gla_set_backward_diagonal(diagonal_before);
  cuda::gla_set_backward_walk(walk_before);
  cuda::gla_set_backward_tail(tail_before);
}

// The forward walks in the wide and the tall tiling (params.hpp GlaForwardTiling), side by side
// on the same inputs, alternated twice: forward and backward medians of 20 event-timed runs after
// 3 warm-ups, then one profiled forward each (launches and the outputs pass's phases) and the
// backward's launches (when split, its pass 1 takes the same tiling). Asserts that the outputs
// and gradients agree within the bf16 bound.
void compare_forward_tilings(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  auto forward = [&] { in.forward(); };
  auto backward = [&] { in.backward(); };
  const cuda::GlaForwardTiling tiling_before = cuda::gla_forward_tiling();
  std::printf("gla B%lld T%lld H16 K128 V128 bf16, forward walks by tiling, medians of 20:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  std::vector<double> first_out, first_dg;
  for (int round = 0; round < 2; ++round)
    for (const cuda::GlaForwardTiling tiling : {cuda::GlaForwardTiling::wide, cuda::GlaForwardTiling::tall}) {
      const char* name = tiling == cuda::GlaForwardTiling::wide ? "wide" : "tall";
      cuda::gla_set_forward_tiling(tiling);
      const float fwd_ms = median_ms(forward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      const float bwd_ms = median_ms(backward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      std::printf("  %-8s forward %.4f ms, backward %.4f ms\n", name, fwd_ms, bwd_ms);
      if (round > 0) continue;
      profiled_forward(name, forward);
      cuda::gla_profile_start();
      backward();
      print_launches("backward", cuda::gla_profile_stop());
      const std::vector<double> out = in.d_o.values(in.o), grad = in.d_dg.values(in.dg);
      if (first_out.empty()) first_out = out, first_dg = grad;
      else {
        EXPECT_LT(rel_err(out, first_out), tolerance(DType::bf16)) << "o: tall against wide";
        EXPECT_LT(rel_err(grad, first_dg), tolerance(DType::bf16)) << "dg: tall against wide";
      }
    }
  cuda::gla_set_forward_tiling(tiling_before);
}

// The backward with its dL/dS walk's copies two and three stages deep (params.hpp
// gla_backward_state_stages), side by side on the same inputs, alternated twice: medians of 20
// event-timed runs after 3 warm-ups, then one profiled run each (launches). Asserts that the
// gradients are the same (the same sums in the same order).
void compare_state_stages(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  auto backward = [&] { in.backward(); };
  const int before = cuda::gla_backward_state_stages();
  std::printf("gla backward B%lld T%lld H16 K128 V128 bf16 by dL/dS walk stages, medians of 20:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  std::vector<double> first_dq, first_dg;
  for (int round = 0; round < 2; ++round)
    for (const int stages : {2, 3}) {
      cuda::gla_set_backward_state_stages(stages);
      const float ms = median_ms(backward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      std::printf("  %d stages: backward %.4f ms\n", stages, ms);
      if (round > 0) continue;
      cuda::gla_profile_start();
      backward();
      print_launches(stages == 2 ? "2 stages" : "3 stages", cuda::gla_profile_stop());
      const std::vector<double> got_dq = in.d_dq.values(in.dq), got_dg = in.d_dg.values(in.dg);
      if (first_dq.empty()) first_dq = got_dq, first_dg = got_dg;
      else {
        EXPECT_EQ(rel_err(got_dq, first_dq), 0.0) << "dq: 3 stages against 2";
        EXPECT_EQ(rel_err(got_dg, first_dg), 0.0) << "dg: 3 stages against 2";
      }
    }
  cuda::gla_set_backward_state_stages(before);
}

// Two forms of one process-wide forward choice (params.hpp) side by side on the same inputs,
// with the tensor-core diagonal and the tall tiling, alternated three times: forward medians
// of 30 event-timed runs after 5 warm-ups, then one profiled forward each (launches, the
// outputs pass's phases). Asserts that the second form's o agrees with the first's: within
// the bf16 bound, or bit for bit where both compute the same values (`bitwise`).
template <class Choice>
struct ForwardForm {
  Choice choice;
  const char* name;
};

template <class Choice>
void compare_forward_forms(int64_t B, int64_t T, const char* what, Choice (*get)(), void (*set)(Choice),
                           ForwardForm<Choice> first, ForwardForm<Choice> second, bool bitwise) {
  TimingInputs in(B, T);
  auto forward = [&] { in.forward(); };
  const Chosen chosen(get, set, first.choice);
  const Chosen tiling(cuda::gla_forward_tiling, cuda::gla_set_forward_tiling, cuda::GlaForwardTiling::tall);
  const Chosen diagonal(cuda::gla_forward_diagonal, cuda::gla_set_forward_diagonal,
                        cuda::GlaForwardDiagonal::tensor_cores);
  std::printf("gla B%lld T%lld H16 K128 V128 bf16, forward by %s, medians of 30:\n", static_cast<long long>(B),
              static_cast<long long>(T), what);
  std::vector<double> first_out;
  for (int round = 0; round < 3; ++round)
    for (const ForwardForm<Choice>& form : {first, second}) {
      set(form.choice);
      const float ms = median_ms(forward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      std::printf("  %-8s forward %.4f ms\n", form.name, ms);
      if (round > 0) continue;
      cuda_ok(cudaMemset(in.d_o.ptr, 0xff, in.d_o.bytes));  // NaN: o must be written in full
      profiled_forward(form.name, forward);
      const std::vector<double> out = in.d_o.values(in.o);
      if (first_out.empty()) {
        first_out = out;
        continue;
      }
      if (bitwise) EXPECT_EQ(out, first_out) << "o: " << second.name << " against " << first.name;
      else EXPECT_LT(rel_err(out, first_out), tolerance(DType::bf16)) << "o: " << second.name << " against " << first.name;
    }
}

// The outputs pass's walkers, single and paired (the default; params.hpp GlaForwardWalkers).
void compare_forward_walkers(int64_t B, int64_t T) {
  compare_forward_forms<cuda::GlaForwardWalkers>(B, T, "walkers", cuda::gla_forward_walkers,
                                                 cuda::gla_set_forward_walkers,
                                                 {cuda::GlaForwardWalkers::single, "single"},
                                                 {cuda::GlaForwardWalkers::paired, "paired"}, false);
}

// The outputs pass's o by direct stores and through the staging boxes (the default;
// params.hpp GlaForwardOutput): the same values, so o must agree bit for bit.
void compare_forward_output(int64_t B, int64_t T) {
  compare_forward_forms<cuda::GlaForwardOutput>(B, T, "output path", cuda::gla_forward_output,
                                                cuda::gla_set_forward_output,
                                                {cuda::GlaForwardOutput::direct, "direct"},
                                                {cuda::GlaForwardOutput::staged, "staged"}, true);
}

// Forward+backward with the chunk-state pass (no table: off) and with the forward's saved
// chunk states (GlaOutputs::chunk_states: on), side by side on the same inputs, alternated
// off on off on: medians of 20 event-timed forward+backward runs and of 20 forwards after 3
// warm-ups, then one profiled forward+backward each (launches). Asserts that o and the
// gradients agree within the bf16 bound and that the saved run launched no chunk-state pass.
void compare_saved_states(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  DeviceTensor table(HostTensor(gla_chunk_states_shape(in.inputs()), DType::bf16));
  bool on = false;
  auto chunk_states = [&] { return on ? std::optional<Tensor>(table.view) : std::nullopt; };
  auto forward = [&] { in.forward(chunk_states()); };
  auto forward_backward = [&] { in.forward(chunk_states()), in.backward(chunk_states()); };
  std::printf("gla B%lld T%lld H16 K128 V128 bf16 by saved chunk states, medians of 20:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  std::vector<double> off_o, off_dq, off_dk, off_dv, off_dg;
  for (int round = 0; round < 2; ++round)
    for (const bool saving : {false, true}) {
      on = saving;
      const float both = median_ms(forward_backward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      const float fwd = median_ms(forward, {.reps = 20, .warmups = 3, .flush_l2 = false});
      std::printf("  saved states %-3s: forward+backward %.4f ms, forward %.4f ms\n", on ? "on" : "off", both, fwd);
      if (round > 0) continue;
      cuda::gla_profile_start();
      forward_backward();
      const GlaProfile profile = cuda::gla_profile_stop();
      print_launches(on ? "saved states on" : "saved states off", profile);
      if (on)
        for (const auto& l : profile.launches) EXPECT_NE(l.kernel, "gla chunk states") << "walked despite the saved table";
      const std::vector<double> o = in.d_o.values(in.o), dq = in.d_dq.values(in.dq), dk = in.d_dk.values(in.dk),
                                dv = in.d_dv.values(in.dv), dg = in.d_dg.values(in.dg);
      if (!on) {
        off_o = o, off_dq = dq, off_dk = dk, off_dv = dv, off_dg = dg;
        continue;
      }
      std::printf("  on against off, relative differences: o %.2e dq %.2e dk %.2e dv %.2e dg %.2e\n",
                  rel_err(o, off_o), rel_err(dq, off_dq), rel_err(dk, off_dk), rel_err(dv, off_dv),
                  rel_err(dg, off_dg));
      const double tol = tolerance(DType::bf16);
      EXPECT_LT(rel_err(o, off_o), tol) << "o";
      EXPECT_LT(rel_err(dq, off_dq), tol) << "dq";
      EXPECT_LT(rel_err(dk, off_dk), tol) << "dk";
      EXPECT_LT(rel_err(dv, off_dv), tol) << "dv";
      EXPECT_LT(rel_err(dg, off_dg), tol) << "dg";
    }
}

// The two settings of one of the backward's switches (`get`, `set`), side by side on the same
// inputs with the forward's saved chunk states, alternated three times: medians of 30
// event-timed forward+backward runs and of 30 backwards after 5 warm-ups; then, in the first
// round, one profiled backward (its launches), kept apart from the timed runs because the
// profiler's events between the launches keep the gradient kernel from starting early.
// Asserts that the gradients are the same bit for bit (both settings sum the same terms in the
// same blocks).
void compare_backward_switch(int64_t B, int64_t T, const char* what, bool (*get)(), void (*set)(bool)) {
  TimingInputs in(B, T);
  DeviceTensor table(HostTensor(gla_chunk_states_shape(in.inputs()), DType::bf16));
  auto backward = [&] { in.backward(table.view); };
  auto forward_backward = [&] { in.forward(table.view), in.backward(table.view); };
  const Chosen chosen(get, set, false);
  std::printf("gla B%lld T%lld H16 K128 V128 bf16 by the %s, saved states, medians of 30:\n",
              static_cast<long long>(B), static_cast<long long>(T), what);
  std::vector<double> first[4];  // dq, dk, dv, dg after the first form
  for (int round = 0; round < 3; ++round)
    for (const bool on : {false, true}) {
      set(on);
      const float both = median_ms(forward_backward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      const float back = median_ms(backward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      std::printf("  %s %-3s: forward+backward %.4f ms, backward %.4f ms\n", what, on ? "on" : "off", both, back);
      if (round > 0) continue;
      for (DeviceTensor* t : {&in.d_dq, &in.d_dk, &in.d_dv, &in.d_dg}) cuda_ok(cudaMemset(t->ptr, 0xff, t->bytes));
      forward_backward();
      const std::vector<double> got[4] = {in.d_dq.values(in.dq), in.d_dk.values(in.dk), in.d_dv.values(in.dv),
                                          in.d_dg.values(in.dg)};
      for (int i = 0; i < 4; ++i) {
        if (!on) first[i] = got[i];
        else EXPECT_EQ(got[i], first[i]) << "gradient " << i << " (dq, dk, dv, dg): " << what << " on against off";
      }
      cuda::gla_profile_start();
      backward();
      print_launches(on ? "on" : "off", cuda::gla_profile_stop());
    }
}

// Forward+backward by two forms side by side on the same inputs (the forward saving its chunk
// states, which the backward reads), alternated three times: medians of 30 event-timed
// forward+backward runs, of 30 forwards and of 30 backwards (on the tables of the forward before)
// after 5 warm-ups, then one profiled forward+backward each (launches and the gradient kernel's
// phases). `scores(on)`: whether the forward also saves its chunk scores (GlaOutputs::
// chunk_scores), which the backward then reads instead of forming A; `choose(on)` sets any other
// switch of the form. Asserts that the gradients agree within the bf16 bound (the two forms may
// round apart).
void compare_training_forms(int64_t B, int64_t T, const char* what, bool (*scores)(bool), void (*choose)(bool),
                            int64_t H = 16, int64_t K = 128, int64_t V = 128) {
  TimingInputs in(B, T, H, K, V);
  DeviceTensor states(HostTensor(gla_chunk_states_shape(in.inputs()), DType::bf16));
  DeviceTensor saved_scores(HostTensor(gla_chunk_scores_shape(in.inputs()), DType::bf16));
  bool on = false;
  auto chunk_scores = [&] { return scores(on) ? std::optional<Tensor>(saved_scores.view) : std::nullopt; };
  auto forward = [&] { in.forward(states.view, chunk_scores()); };
  auto backward = [&] { in.backward(states.view, chunk_scores()); };
  auto forward_backward = [&] { forward(), backward(); };
  std::printf("gla B%lld T%lld H%lld K%lld V%lld bf16 by the %s (states saved), medians of 30:\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
              static_cast<long long>(K), static_cast<long long>(V), what);
  std::vector<double> off[4];  // dq, dk, dv, dg by the first form
  for (int round = 0; round < 3; ++round)
    for (const bool second : {false, true}) {
      on = second;
      choose(on);
      const float both = median_ms(forward_backward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      const float fwd = median_ms(forward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      const float back = median_ms(backward, {.reps = 30, .warmups = 5, .flush_l2 = false});
      std::printf("  %s %-3s: forward+backward %.4f ms, forward %.4f ms, backward %.4f ms\n", what,
                  on ? "on" : "off", both, fwd, back);
      if (round > 0) continue;
      for (DeviceTensor* t : {&in.d_dq, &in.d_dk, &in.d_dv, &in.d_dg}) cuda_ok(cudaMemset(t->ptr, 0xff, t->bytes));
      cuda::gla_profile_start();
      forward_backward();
      const GlaProfile profile = cuda::gla_profile_stop();
      print_launches(on ? "on" : "off", profile);
      print_gradient_phases(profile);
      const std::vector<double> got[4] = {in.d_dq.values(in.dq), in.d_dk.values(in.dk), in.d_dv.values(in.dv),
                                          in.d_dg.values(in.dg)};
      for (int i = 0; i < 4; ++i) {
        if (!on) {
          off[i] = got[i];
          continue;
        }
        const double difference = rel_err(got[i], off[i]);
        std::printf("  gradient %d (dq, dk, dv, dg): on against off, relative difference %.2e\n", i, difference);
        EXPECT_LT(difference, tolerance(DType::bf16)) << "gradient " << i << " (dq, dk, dv, dg)";
      }
    }
}

// The forward with and without the final state (GlaOutputs::final_state, which the Python op
// leaves out without output_final_state), inference and with the chunk tables saved, alternated
// three times: medians of 30 event-timed forwards after 5 warm-ups. Asserts that o is the same
// bit for bit.
void compare_final_state(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  DeviceTensor states(HostTensor(gla_chunk_states_shape(in.inputs()), DType::bf16));
  DeviceTensor scores(HostTensor(gla_chunk_scores_shape(in.inputs()), DType::bf16));
  std::printf("gla forward B%lld T%lld H16 K128 V128 bf16 with and without the final state, medians of 30:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  std::vector<double> kept_o;
  for (int round = 0; round < 3; ++round)
    for (const bool keep : {true, false}) {
      const std::optional<Tensor> final_state = keep ? std::optional<Tensor>(in.d_hT.view) : std::nullopt;
      auto infer = [&] { gla_forward(in.inputs(), GlaOutputs{in.d_o.view, final_state}, in.options); };
      auto train = [&] {
        GlaOutputs out{in.d_o.view, final_state, states.view};
        out.chunk_scores = scores.view;
        gla_forward(in.inputs(), out, in.options);
      };
      const float infer_ms = median_ms(infer, {.reps = 30, .warmups = 5, .flush_l2 = false});
      const float train_ms = median_ms(train, {.reps = 30, .warmups = 5, .flush_l2 = false});
      std::printf("  final state %-4s: inference %.4f ms, with the chunk tables %.4f ms\n", keep ? "kept" : "none",
                  infer_ms, train_ms);
      if (round > 0) continue;
      cuda_ok(cudaMemset(in.d_o.ptr, 0xff, in.d_o.bytes));  // NaN: o must be written in full
      train();
      const std::vector<double> o = in.d_o.values(in.o);
      if (keep) kept_o = o;
      else EXPECT_EQ(o, kept_o) << "o without the final state against o with it";
    }
}

// The training forward (chunk states and scores saved, by tensor copies) beside the inference
// forward (no tables), alternated three times: medians of 30 event-timed inference forwards,
// training forwards and forward+backward runs after 5 warm-ups; in the first round one profiled
// forward of each (launches and the walk's phases a chunk step). Asserts that both write the
// same o bit for bit.
void compare_training_forward(int64_t B, int64_t T) {
  TimingInputs in(B, T);
  DeviceTensor states(HostTensor(gla_chunk_states_shape(in.inputs()), DType::bf16));
  DeviceTensor scores(HostTensor(gla_chunk_scores_shape(in.inputs()), DType::bf16));
  auto infer = [&] { gla_forward(in.inputs(), GlaOutputs{in.d_o.view}, in.options); };
  auto train = [&] { in.forward(states.view, scores.view); };
  auto forward_backward = [&] { train(), in.backward(states.view, scores.view); };
  std::printf("gla B%lld T%lld H16 K128 V128 bf16, inference and training forwards, medians of 30:\n",
              static_cast<long long>(B), static_cast<long long>(T));
  for (int round = 0; round < 3; ++round) {
    const float inference = median_ms(infer, {.reps = 30, .warmups = 5, .flush_l2 = false});
    const float training = median_ms(train, {.reps = 30, .warmups = 5, .flush_l2 = false});
    const float both = median_ms(forward_backward, {.reps = 30, .warmups = 5, .flush_l2 = false});
    std::printf("  inference forward %.4f ms, training forward %.4f ms, forward+backward %.4f ms\n", inference,
                training, both);
    if (round > 0) continue;
    profiled_forward("inference forward", infer);
    const std::vector<double> inferred = in.d_o.values(in.o);
    cuda_ok(cudaMemset(in.d_o.ptr, 0xff, in.d_o.bytes));
    profiled_forward("training forward", train);
    EXPECT_EQ(in.d_o.values(in.o), inferred) << "o of the training forward against the inference forward's";
  }
}

TEST(GlaCudaTiming, TrainingForward) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_training_forward(B, T);
}

TEST(GlaCudaTiming, FinalState) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {1, 32768}}) compare_final_state(B, T);
}

TEST(GlaCudaTiming, SavedScores) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_training_forms(B, T, "saved scores", [](bool on) { return on; }, [](bool) {});
}

// The gradient kernel given the saved scores with chunks factored whole where their decays allow
// and by the sub-chunks and quads everywhere (params.hpp gla_backward_factored).
TEST(GlaCudaTiming, BackwardFactored) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Chosen<bool> restore(cuda::gla_backward_factored, cuda::gla_set_backward_factored, true);
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_training_forms(B, T, "factored chunks", [](bool) { return true; }, cuda::gla_set_backward_factored);
  // The seed's configuration: H 32, K = V = 64.
  compare_training_forms(4, 2048, "factored chunks", [](bool) { return true; }, cuda::gla_set_backward_factored, 32,
                         64, 64);
}

// The gradient kernel started while the dL/dS walk runs (its blocks of the last chunks first,
// launched as the walk's programmatic dependent; params.hpp gla_backward_early_start) and after it.
TEST(GlaCudaTiming, BackwardEarlyStart) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_backward_switch(B, T, "early start", cuda::gla_backward_early_start, cuda::gla_set_backward_early_start);
}

// The gradient kernel's value slices of S_0 and dL/dS by the copy engine and as cp.async pieces
// (params.hpp gla_backward_table_copies).
TEST(GlaCudaTiming, BackwardTableCopies) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_backward_switch(B, T, "table copies", cuda::gla_backward_table_copies, cuda::gla_set_backward_table_copies);
}

// The value loop's operands held (k_end's fragments for all slices, do's for both of its
// products) and read at each product (params.hpp gla_backward_held_operands).
TEST(GlaCudaTiming, BackwardHeldOperands) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const auto& [B, T] : {std::pair<int64_t, int64_t>{8, 2048}, {16, 1024}, {1, 32768}})
    compare_backward_switch(B, T, "held operands", cuda::gla_backward_held_operands,
                            cuda::gla_set_backward_held_operands);
}

TEST(GlaCudaTiming, SavedStatesB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_saved_states(8, 2048);
}

TEST(GlaCudaTiming, SavedStatesB1T32768) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_saved_states(1, 32768);
}

// The three benchmark shapes in one run (one process, one machine state).
TEST(GlaCudaTiming, ForwardOutput) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_forward_output(8, 2048);
  compare_forward_output(1, 32768);
  compare_forward_output(4, 4096);
}

TEST(GlaCudaTiming, ForwardWalkers) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_forward_walkers(8, 2048);
  compare_forward_walkers(1, 32768);
  compare_forward_walkers(4, 4096);
}

TEST(GlaCudaTiming, BackwardStateStagesB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_state_stages(8, 2048);
}

TEST(GlaCudaTiming, BackwardStateStagesB1T32768) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_state_stages(1, 32768);
}

TEST(GlaCudaTiming, ForwardTilingsB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_forward_tilings(8, 2048);
}

TEST(GlaCudaTiming, ForwardTilingsB4T4096) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_forward_tilings(4, 4096);
}

TEST(GlaCudaTiming, ForwardTilingsB1T32768) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_forward_tilings(1, 32768);
}

TEST(GlaCudaTiming, BackwardWalksB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_backward_walks(8, 2048);
}

TEST(GlaCudaTiming, BackwardWalksB4T4096) {
  SKIP_WITHOUT_CUDA_DEVICE();
  compare_backward_walks(4, 4096);
}

TEST(GlaCudaTiming, PhasesB8T2048) {
  SKIP_WITHOUT_CUDA_DEVICE();
  profile_shape(8, 2048);
}

// The split forward at the shape where it ties with causal attention (2 segments of 32
// chunks a (sequence, head)): the segment pass, chain and outputs pass apart.
TEST(GlaCudaTiming, PhasesB4T4096) {
  SKIP_WITHOUT_CUDA_DEVICE();
  profile_shape(4, 4096);
}

TEST(GlaCudaTiming, PhasesB1T32768) {
  SKIP_WITHOUT_CUDA_DEVICE();
  profile_shape(1, 32768);
}

}  // namespace
}  // namespace seqmix::test
