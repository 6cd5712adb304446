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
// column vectors stand for no bias, identity, scale 1. weights_before_wait: the weights are
// complete when the kernel may start (ProjectionChainProblem::after_chain_gemm), so their
// loads overlap the previous kernel's end.
void narrow_projection_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                            ColumnEpilogue columns, void* stream, bool weights_before_wait = false);
// The same with an f32 out.
void narrow_projection_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                              ColumnEpilogue columns, void* stream, bool weights_before_wait = false);
// dz [M, N] ⊙= act'(x·weightᵀ + bias)·scale in place (bf16), as derivative_gemm_bf16 with dy
// = dz, for K ≤ kNarrowProjectionMaxK: the backward's recompute of the low-rank gate.
void narrow_derivative_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows dz,
                            ColumnEpilogue columns, void* stream);
// dx [M, K] = dz·weight and dweight [N, K] = dzᵀ·x (bf16, any row strides) for K ≤
// kNarrowProjectionMaxK: the backward's two GEMMs for the low-rank gate (narrow_backward.cuh).
void narrow_gradients_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dz, MutableRows dx,
                           MutableRows dweight, void* stream);

// The whole backward of a narrow-K run from its gradient dy in one pass
// (narrow_fused_backward.cuh): dz = dy ⊙ act'(x·weightᵀ + bias)·scale in registers, dx [M, K]
// = dz·weight, dweight [N, K] = dzᵀ·x, and dbias [N] = Σ dz when dbias is not null (all
// bf16). Takes K ≤ 16 and a bf16 dy whose base and row stride are even (4-byte pairs);
// narrow_fused_backward_fits says so.
inline bool narrow_fused_backward_fits(int64_t K, Rows dy) {
  return K >= 1 && K <= 16 && reinterpret_cast<uintptr_t>(dy.data) % 4 == 0 && dy.stride % 2 == 0;
}
void narrow_fused_backward_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy,
                                ColumnEpilogue columns, MutableRows dx, MutableRows dweight, void* dbias,
                                void* stream);
// Whether the chain's backward takes it: only with SEQMIX_CHAINS_NARROW_FUSED=1, as it was
// measured 1.3-1.8x slower than the separate narrow backward (gather, derivative, dx and dW
// kernels) on the H100.
bool narrow_fused_backward_enabled();

// ---- narrow N: a run of few columns over a deep K (narrow_columns.cuh) ----

// The widest run the narrow-column kernel takes; Gated DeltaNet's gates are 32 columns.
constexpr int64_t kNarrowColumnsMaxN = 64;

// Whether the narrow-column kernel takes these operands: N ≤ kNarrowColumnsMaxN, K a
// multiple of 8, x's and weight's bases and row strides 16-byte aligned (16-byte loads).
inline bool narrow_columns_fit(int64_t N, int64_t K, Rows x, Rows weight) {
  const auto aligned = [](Rows m) { return reinterpret_cast<uintptr_t>(m.data) % 16 == 0 && m.stride % 8 == 0; };
  return N >= 1 && N <= kNarrowColumnsMaxN && K >= 8 && K % 8 == 0 && aligned(x) && aligned(weight);
}

// out [M, N] = act(x·weightᵀ + bias)·scale as activation_gemm_bf16, for operands
// narrow_columns_fit takes (a seqmix::Error otherwise); out any row stride.
void narrow_columns_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                         ColumnEpilogue columns, void* stream);
// The same with an f32 out.
void narrow_columns_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                           ColumnEpilogue columns, void* stream);
// dz [M, N] ⊙= act'(x·weightᵀ + bias)·scale in place (bf16), as derivative_gemm_bf16 with
// dy = dz.
void narrow_columns_derivative_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows dz,
                                    ColumnEpilogue columns, void* stream);

// out [M, N] ← act(out + bias)·scale in place (bf16), column by column: the activation of
// columns the plain GEMM wrote (activate_columns.cu). N, out's base and row stride in whole
// 16-byte groups (a seqmix::Error otherwise).
void activate_columns_bf16(int64_t M, int64_t N, MutableRows out, ColumnEpilogue columns, void* stream);
// Whether a wide bf16 run's few activation columns go through the plain GEMM of the whole run
// and then activate_columns_bf16 (SEQMIX_CHAINS_GATES_IN_GEMM=1), instead of a kernel of
// their own beside a plain GEMM of the identity columns.
bool gates_in_plain_gemm_enabled();

// Whether the projection chain sends narrow activation runs to the narrow-column kernel
// (SEQMIX_CHAINS_NARROW_COLUMNS=0 turns it off: the CUTLASS activation GEMM then runs them,
// and a wide bf16 run is split around its gates only above 16384 tokens, as before).
bool narrow_columns_enabled();

}  // namespace seqmix::cuda
