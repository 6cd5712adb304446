// Gated diagonal scan with an optional fused SiLU output gate (DESIGN.md §1 "gated scan"):
//   h_t = a_t ⊙ h_{t-1} + b_t,   y_t = h_t ⊙ SiLU(z_t)   (y_t = h_t without z)
// elementwise over D channels. The decay a_t is given directly, as its log (the scan
// uses exp(a_t)), or as a logit (the scan uses sigmoid(a_t), so a projection's raw output
// can feed the scan with the activation fused).
//
// Layouts: a, b, z, y  [B, T, D] (bf16, f16, f32 or f64, all the same dtype);
//          initial_state, final_state  [N, D] f32 (f64 allowed with f64 inputs),
//          N = B, or N = len(cu_seqlens) - 1 with B = 1 for variable length.
#pragma once

#include <optional>

#include "seqmix/common.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

// How the decay input a_t becomes the factor of h_{t-1}.
enum class Decay {
  direct,  // a_t itself, in (0, 1)
  log,     // exp(a_t), a_t ≤ 0
  logit,   // sigmoid(a_t)
};
// "direct", "log", "logit"; throws seqmix::Error on anything else.
Decay parse_decay(const std::string& name);

struct GatedScanOptions : CommonOptions {
  Decay decay = Decay::direct;
};

struct GatedScanInputs {
  Tensor a;                              // [B, T, D] decay (or log decay)
  Tensor b;                              // [B, T, D] input
  std::optional<Tensor> z;               // [B, T, D] output gate, optional
  std::optional<Tensor> initial_state;   // [N, D]
  std::optional<Tensor> cu_seqlens;      // [N + 1] int32/int64 offsets, B must be 1; on the
                                         // CPU or the inputs' device (copied to the host to check)
};

struct GatedScanOutputs {
  Tensor y;                              // [B, T, D], dtype of b
  std::optional<Tensor> final_state;     // [N, D]
  // CUDA only, optional: f32 scratch of gated_scan_workspace_size(...) elements on the
  // inputs' device. With it, short batches are split along time to fill the GPU.
  std::optional<Tensor> workspace;
  // CUDA only, optional: f32 [rows, D] (gated_scan_tile_states_shape) receiving the
  // state entering each tile of the scan; given to the backward, it saves that pass.
  std::optional<Tensor> tile_states;
};

// Forward. Writes y and, when given, final_state.
void gated_scan_forward(const GatedScanInputs& in, const GatedScanOutputs& out,
                        const GatedScanOptions& options = {});

struct GatedScanGrads {
  Tensor da, db;                         // [B, T, D], dtype of the inputs
  std::optional<Tensor> dz;              // required when z is given
  std::optional<Tensor> d_initial_state; // required when initial_state is given
  // CUDA only, required there: f32 scratch of gated_scan_workspace_size(...) elements on
  // the inputs' device (states recomputed by the backward, split maps).
  std::optional<Tensor> workspace;
  // CUDA only, optional: the tile_states a forward on the same inputs wrote.
  std::optional<Tensor> tile_states;
};

// Shape {rows, D} of the tile_states tensor for inputs [B, T, D] holding N sequences
// (N = B, or len(cu_seqlens) - 1).
std::vector<int64_t> gated_scan_tile_states_shape(int64_t B, int64_t T, int64_t N, int64_t D);

// Elements of the f32 workspace a CUDA call may use for inputs [B, T, D] holding N
// sequences; at least 1. The CPU backend uses none.
int64_t gated_scan_workspace_size(int64_t B, int64_t T, int64_t N, int64_t D);

// Backward: from dy (and the gradient of the final state, optional) to the gradient
// of every differentiable input. Recomputes h from the inputs.
void gated_scan_backward(const GatedScanInputs& in, const Tensor& dy,
                         const std::optional<Tensor>& d_final_state,
                         const GatedScanGrads& grads, const GatedScanOptions& options = {});

}  // namespace seqmix
