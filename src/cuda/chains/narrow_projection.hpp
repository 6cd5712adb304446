// The projection chain's forward for a narrow depth (K ≤ kNarrowProjectionMaxK, e.g. the
// rank-16 input of GLA's low-rank gate): a CUDA-core kernel instead of the CUTLASS GEMM,
// whose 64-deep K tiles and per-tile mainloop cost far more than the output writes there
// (NOTES.md, "Narrow K"). Host declarations only; the kernel is narrow_projection.cuh.
#pragma once

#include <cstdint>

#include "cuda/chains/params.hpp"

namespace seqmix::cuda {

// The deepest K the narrow kernel takes; the launcher sends every forward run with K at
// most this to it.
constexpr int64_t kNarrowProjectionMaxK = 32;

// out [M, N] = act(x·weightᵀ + bias)·scale, column by column, as activation_gemm_bf16, for
// K ≤ kNarrowProjectionMaxK. x and weight may have any row stride and alignment; null
// column vectors stand for no bias, identity, scale 1.
void narrow_projection_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                            ColumnEpilogue columns, void* stream);
// The same with an f32 out.
void narrow_projection_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                              ColumnEpilogue columns, void* stream);
// dz [M, N] ⊙= act'(x·weightᵀ + bias)·scale in place (bf16), as derivative_gemm_bf16 with dy
// = dz, for K ≤ kNarrowProjectionMaxK: the backward's recompute of the low-rank gate.
void narrow_derivative_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows dz,
                            ColumnEpilogue columns, void* stream);
// dx [M, K] = dz·weight and dweight [N, K] = dzᵀ·x (bf16, any row strides) for K ≤
// kNarrowProjectionMaxK: the backward's two GEMMs for the low-rank gate (narrow_backward.cuh).
void narrow_gradients_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dz, MutableRows dx,
                           MutableRows dweight, void* stream);

}  // namespace seqmix::cuda
