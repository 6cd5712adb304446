// The gated-scan layer as one CUDA kernel: the projection u = x·Wᵀ, then the gated scan of
// gated_scan.hpp on u's three column blocks a, b, z (decay from a, input b, SiLU gate z):
//   h_t = decay(a_t) ⊙ h_{t-1} + b_t,   y_t = h_t ⊙ SiLU(z_t),   h_0 = 0.
// u never reaches memory. The same result as gated_scan_forward on the column views of
// x·Wᵀ (the "semi-fused" layer), up to rounding: here u stays in fp32.
//
// Layouts: x [B, T, d], weight [3·D, d] (rows: the a block, the b block, the z block),
//          y [B, T, D]; bf16 or f16, all the same dtype, on one CUDA device, the last
//          dimension contiguous and every row start 16-byte aligned (d a multiple of 8).
// The whole grid runs at once (a grid-wide barrier joins the chunks of a sequence):
// gated_scan_layer_fits says whether a shape does; larger layers use the semi-fused form.
#pragma once

#include "seqmix/common.hpp"
#include "seqmix/gated_scan.hpp"
#include "seqmix/tensor.hpp"

namespace seqmix {

struct GatedScanLayerOptions : CommonOptions {
  Decay decay = Decay::logit;
};

// Elements of the f32 workspace the layer needs for B sequences of T tokens and D channels.
int64_t gated_scan_layer_workspace_size(int64_t B, int64_t T, int64_t D);

// Whether the layer kernel's grid for [B, T, D] outputs of `dtype` fits on the current
// CUDA device at once. False without CUDA kernels for the gated scan.
bool gated_scan_layer_fits(int64_t B, int64_t T, int64_t D, DType dtype);

// Forward: writes y. workspace: f32, at least gated_scan_layer_workspace_size elements.
void gated_scan_layer_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& workspace,
                              const GatedScanLayerOptions& options = {});

}  // namespace seqmix
