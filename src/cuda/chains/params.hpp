// Host-side description of the chains' CUDA path: plain pointers and sizes, no CUDA or
// CUTLASS types, so src/core can fill it in without their headers. Everything is bf16 on
// the device (fp32 accumulation); see NOTES.md for what is and is not covered.
#pragma once

#include <cstdint>
#include <vector>

namespace seqmix::cuda {

// A row-major matrix on the device: rows `stride` elements apart, unit column stride.
struct Rows {
  const void* data = nullptr;
  int64_t stride = 0;
};
struct MutableRows {
  void* data = nullptr;
  int64_t stride = 0;
};

// ---- the GEMMs (one CUTLASS instantiation each, *_bf16.cu; gemm_nt_bf16 and
// activation_gemm_bf16 pick a tile per shape in gemm_dispatch.cu, see gemm_tiles.hpp) ----

// Per-column f32 vectors of the activation epilogue, each [N] and 16-byte aligned; a
// nullptr stands for all zeros (bias), identity (code: seqmix::Activation as a float) or
// all ones (scale: 1/tau for logsigmoid, else 1).
struct ColumnEpilogue {
  const float* bias = nullptr;
  const float* code = nullptr;
  const float* scale = nullptr;
  // The code every column has, when the host knows them alike; −1 otherwise. Kernels that
  // compile a code in (the narrow-K forward) use it; the others read `code`.
  int uniform_code = -1;
};

// out [M, N] = act(x·weightᵀ + bias)·scale, column by column; x [M, K], weight [N, K].
void activation_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                          ColumnEpilogue columns, void* stream);
// The same with an f32 out (rows `out.stride` floats apart).
void activation_gemm_bf16_f32out(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, MutableRows out,
                                 ColumnEpilogue columns, void* stream);
// dz [M, N] = dy ⊙ act'(x·weightᵀ + bias)·scale; dy may be dz itself (in place).
void derivative_gemm_bf16(int64_t M, int64_t N, int64_t K, Rows x, Rows weight, Rows dy, MutableRows dz,
                          ColumnEpilogue columns, void* stream);
// out [M, N] = a·bᵀ with a [M, K], b [N, K] (both K-major: x and a weight in nn.Linear form).
// `programmatic`: launched as a programmatic dependent of the stream's previous kernel (its
// CTAs start and wait while that kernel finishes; dependent_launch.cuh).
void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream,
                  bool programmatic = false);
// out [M, N] = a·b with a [M, K], b [K, N].
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream);
// out [M, N] = aᵀ·b with a stored [K, M], b [K, N].
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, Rows a, Rows b, MutableRows out, void* stream,
                  bool programmatic = false);

// A matrix stored in pieces side by side (the segments' gradients where autograd left
// them): piece p holds [first[p], first[p + 1]) of the split dimension (first[count] is its
// extent), stored row-major at piece[p]. Each piece starts at a multiple of
// kPieceAlignment, has a 16-byte aligned base and a stride of a multiple of 8 elements.
constexpr int kMaxPieces = 8;
constexpr int64_t kPieceAlignment = 256;  // every chain GEMM tile's M and K steps divide it
struct RowPieces {
  int count = 0;
  Rows piece[kMaxPieces];
  int64_t first[kMaxPieces + 1] = {};
};
// gemm_nn_bf16 with a [M, K] in pieces along K (its columns): out = Σ_p a_p·b[first[p]:first[p + 1]].
void gemm_nn_bf16_pieces(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                         void* stream);
// gemm_tn_bf16 with a stored [K, M] in pieces along M (its columns): out's rows of piece p =
// a_pᵀ·b, in the tile backward_tn_schedule picks.
void gemm_tn_bf16_pieces(int64_t M, int64_t N, int64_t K, const RowPieces& a, Rows b, MutableRows out,
                         void* stream);

// ---- the chains (launch_projection.cu, launch_output.cu) ----

// Segments per chain the kernels' by-value tables hold.
constexpr int kMaxSegments = 32;

// One segment: columns [offset, offset + width), its activation code and scale.
struct SegmentColumns {
  int64_t offset = 0, width = 0;
  int code = 0;
  float scale = 1.f;
};

// x [tokens, d], weight [columns, d], bias [columns] (or nullptr), all bf16.
struct ProjectionChainProblem {
  int64_t tokens = 0, d = 0, columns = 0;
  Rows x, weight;
  const void* bias = nullptr;
  std::vector<SegmentColumns> segments;
  void* stream = nullptr;
  // The call comes right after a projection chain's call on the same stream (the low-rank
  // gate after its chain). That call's kernels let a dependent start only after their own
  // wait (the GEMMs, at their last tile) or at their exit, so every kernel before them has
  // finished by then, and none writes this call's weights: the narrow kernel may read them
  // before its wait.
  bool after_chain_gemm = false;
};

// Consecutive columns [first, first + width) written by one GEMM into out [tokens, width],
// bf16 or f32: a run of segments whose outputs are column views of one buffer.
struct OutputRun {
  int64_t first = 0, width = 0;
  MutableRows out;
  bool f32 = false;
};

// Writes act_s(x·weightᵀ + bias) for every run, one GEMM each (one in all when every
// segment is a bf16 view of one buffer).
void projection_chain_forward(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs);

// The gradient of one segment's output, [tokens, width], bf16 or f32.
struct SegmentGradient {
  const void* data = nullptr;
  int64_t stride = 0;
  bool f32 = false;
};
struct ProjectionChainGradients {
  std::vector<SegmentGradient> d_outputs;  // one per segment
  MutableRows dx, dweight;                 // [tokens, d], [columns, d], bf16
  void* dbias = nullptr;                   // [columns] bf16, or nullptr when there is no bias
};

// dz = gather(d_outputs) ⊙ act'(z) with z recomputed over the non-identity segments only,
// then dx = dz·weight, dweight = dzᵀ·x, dbias = Σ_tokens dz.
void projection_chain_backward(const ProjectionChainProblem& p, const ProjectionChainGradients& g);

// o, g [tokens, heads·dv] (each token's heads side by side), norm_weight [dv], out_weight
// [d_out, heads·dv], all bf16.
struct OutputChainProblem {
  int64_t tokens = 0, heads = 0, dv = 0, d_out = 0;
  float eps = 1e-5f;
  Rows o, g;
  const void* norm_weight = nullptr;
  Rows out_weight;
  void* stream = nullptr;
};

// y [tokens, d_out] = (RMSNorm(o)·SiLU(g)) · out_weightᵀ.
void output_chain_forward(const OutputChainProblem& p, MutableRows y);

struct OutputChainGradients {
  Rows dy;                       // [tokens, d_out]
  MutableRows d_o, dg;           // [tokens, heads·dv]
  void* dnorm_weight = nullptr;  // [dv]
  MutableRows dout_weight;       // [d_out, heads·dv]
};
void output_chain_backward(const OutputChainProblem& p, const OutputChainGradients& g);

}  // namespace seqmix::cuda
