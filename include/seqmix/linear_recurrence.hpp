// Dense linear recurrence (DESIGN.md §1 "dense recurrence"), per group g:
//   h_t = A_t h_{t-1} + b_t,   t = 1..T,   h_0 = initial state (zeros when absent)
// with A_t a dense n×n transition and b_t, h_t n×m (m = 1: a vector state; m > 1:
// a matrix state whose columns evolve independently under the same A_t).
//
// Layouts: A              [G, T, n, n]
//          b, h           [G, T, n, m]   (h holds every state h_1..h_T)
//          initial_state, final_state  [G, n, m]   (final_state = h[:, T-1])
// A, b and initial_state share one dtype (bf16, f16, f32 or f64); outputs and
// gradients have that dtype too.
//
// Four methods compute the same h and must agree (their backward runs the same
// method on the reverse-time recurrence through A_tᵀ):
//   sequential        step by step, O(T·n²·m) work, parallel only over G and columns.
//   chunked           chunk-local prefix products and zero-start states, a short
//                     sequential pass over chunk summaries, then h = local + P·h_start.
//   scan              Hillis–Steele prefix scan of the affine maps (A_t, b_t):
//                     log2 T rounds, each composing every map with the one 2^k back.
//   cyclic_reduction  odd–even elimination: pair steps, solve the half-length
//                     system recursively, back-substitute the eliminated states.
#pragma once

#include <optional>
#include <string>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

// Which algorithm Impl::fast (or a CUDA call) runs. `automatic` picks the fastest one
// measured for the shape: on the CPU (bench/cpu_linear_recurrence.md), or on the GPU
// (linear_recurrence_cuda_method; src/cuda/linear_recurrence/NOTES.md). Impl::reference
// always runs the float64 sequential oracle, whatever the method.
enum class LinearRecurrenceMethod { automatic, sequential, chunked, scan, cyclic_reduction };

// "automatic", "sequential", "chunked", "scan", "cyclic_reduction".
const char* linear_recurrence_method_name(LinearRecurrenceMethod method);
// Inverse of linear_recurrence_method_name ("auto" is accepted for automatic);
// throws seqmix::Error on anything else.
LinearRecurrenceMethod parse_linear_recurrence_method(const std::string& name);

struct LinearRecurrenceOptions : CommonOptions {
  LinearRecurrenceMethod method = LinearRecurrenceMethod::automatic;
  // Steps per chunk of the chunked method; 0 picks one from T and the thread count.
  int64_t chunk_size = 0;
};

struct LinearRecurrenceInputs {
  Tensor A;                              // [G, T, n, n] transitions
  Tensor b;                              // [G, T, n, m] inputs
  std::optional<Tensor> initial_state;   // [G, n, m], zeros when absent
};

struct LinearRecurrenceOutputs {
  Tensor h;                              // [G, T, n, m] every state
  std::optional<Tensor> final_state;     // [G, n, m] the state after step T
  // CUDA only, optional: f32 scratch of linear_recurrence_workspace_size(...) elements on
  // the inputs' device. Without it a CUDA call that needs scratch takes it from the
  // device's stream-ordered memory pool for the duration of the call.
  std::optional<Tensor> workspace;
};

// Forward. Writes h and, when given, final_state.
void linear_recurrence_forward(const LinearRecurrenceInputs& in, const LinearRecurrenceOutputs& out,
                               const LinearRecurrenceOptions& options = {});

struct LinearRecurrenceGrads {
  Tensor dA;                             // [G, T, n, n]
  Tensor db;                             // [G, T, n, m]
  std::optional<Tensor> d_initial_state; // [G, n, m], required when initial_state is given
  // CUDA only, optional: as LinearRecurrenceOutputs::workspace (sized with backward = true).
  std::optional<Tensor> workspace;
};

// The method `automatic` resolves to for these sizes and input dtype on a CUDA device.
LinearRecurrenceMethod linear_recurrence_cuda_method(int64_t G, int64_t T, int64_t n, int64_t m, DType dtype);

// Elements of the f32 workspace a CUDA forward (backward = false) or backward call with
// these sizes, input dtype and options may use; at least 1. The CPU backend uses none.
// CUDA takes bf16 or f32 inputs with n a multiple of 8, at most 128, and contiguous tensors.
int64_t linear_recurrence_workspace_size(int64_t G, int64_t T, int64_t n, int64_t m, DType dtype, bool backward,
                                         const LinearRecurrenceOptions& options = {});

// Backward: from dh (the gradient with respect to every h_t) and, optionally, the
// gradient of the final state, runs g_T = dh_T + d_final, g_t = dh_t + A_{t+1}ᵀ g_{t+1}
// and writes dA_t = g_t h_{t-1}ᵀ, db_t = g_t, d_initial_state = A_1ᵀ g_1.
// Recomputes h from the inputs with the same method, unless `states` is given: the h
// [G, T, n, m] the forward wrote for these inputs (same dtype), which the CUDA backward of
// the sequential method and of the chunked method on tensor cores (n ≤ 64, m ≤ 8) then
// reads instead of recomputing it, skipping one of its two chains; elsewhere it is checked
// and unused.
void linear_recurrence_backward(const LinearRecurrenceInputs& in, const Tensor& dh,
                                const std::optional<Tensor>& d_final_state, const LinearRecurrenceGrads& grads,
                                const LinearRecurrenceOptions& options = {},
                                const std::optional<Tensor>& states = std::nullopt);

}  // namespace seqmix
