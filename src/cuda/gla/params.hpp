// Host-side description of a gated-linear-attention launch: plain pointers and strides,
// no CUDA types, so src/core can fill it in without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace seqmix::cuda {

// A [B, T, H, D] operand: element (b, t, h, d) at data + b·stride_batch + t·stride_time
// + h·stride_head + d (the last dimension is contiguous).
struct GlaTokens {
  void* data = nullptr;
  int64_t stride_batch = 0, stride_time = 0, stride_head = 0;
};

struct GlaParams {
  // Sequences: B rows of length T, or with cu_seqlens (B = 1) N variable-length ones.
  int64_t num_sequences = 0;  // N
  int64_t T = 0;
  const void* cu_seqlens = nullptr;  // device pointer or nullptr
  bool cu_seqlens_int64 = false;
  int64_t max_chunks = 0;  // chunks of the longest sequence
  int64_t H = 0, K = 0, V = 0;
  float scale = 1.0f;
  GlaTokens q, k, v, g, o;
  // [N, H, K, V] float32, contiguous; nullptr when absent.
  const float* initial_state = nullptr;
  float* final_state = nullptr;
  void* stream = nullptr;
  // Set by the launcher. When few (sequence, head) pairs would leave SMs idle, each
  // sequence's chunks are cut into `segments` runs of `segment_chunks`: a first pass finds
  // each run's own end state and decay, a second chains them, a third computes the outputs
  // of every run from its entering state. workspace: [N, H, segments, K, V] states, then
  // [N, H, segments, K] decays (floats).
  int64_t segments = 1, segment_chunks = 0;
  float* workspace = nullptr;
  // Set by the launcher. K = 256 runs as key_blocks = 2 blocks of 128 key channels each
  // (forward.cuh, KeyBlock); their shares of o (forward) and dv (backward) go to `partial`,
  // float [key_blocks, partial_rows, H, V] with partial_rows = B·T, and are summed after.
  int64_t key_blocks = 1, partial_rows = 0;
  float* partial = nullptr;
  // Set by the launcher after the outputs pass with two chunks in flight (forward_pipelined.cuh):
  // per block (segment slot · value blocks + value block) the chunk it stopped at (its end when
  // it walked them all), and [N, H, segments, K, V] the state entering that chunk; the outputs
  // pass after it walks each block's rest from there. nullptr otherwise.
  int64_t* resume_chunks = nullptr;
  float* resume_states = nullptr;
  // Set by the launchers while profiling (profile.hpp): device counters [kGlaPhaseCount]
  // the chunk walks add their phase cycles to; nullptr otherwise.
  unsigned long long* phase_cycles = nullptr;

  // Backward only. do, dq, dk, dv, dg: the layouts of o, q, k, v, g.
  GlaTokens d_o, dq, dk, dv, dg;
  const float* d_final_state = nullptr;  // [N, H, K, V] or nullptr (zero)
  float* d_initial_state = nullptr;      // [N, H, K, V] or nullptr (not wanted)
  // Caller's scratch for the backward (gla_backward_workspace_bytes), or nullptr: then the
  // launcher takes it from the stream-ordered pool for the duration of the call.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // Set by the launchers: every chunk's entering state S and dL/dS at its end, rounded to
  // the input type, [N, H, max_chunks, K, V] each.
  void* chunk_states = nullptr;
  void* chunk_state_grads = nullptr;
  // Set by the backward's launcher when split: e^{Σ g} per key channel from each chunk's end to
  // its segment's end, [N, H, max_chunks, K] floats (backward.cuh state_grad_kernel).
  float* decay_to_segment_end = nullptr;
  // Set by the backward's launcher (gla_backward_early_start): the gradient kernel's blocks
  // take every sequence's last chunk first, and those whose dL/dS is zero (unsplit, no d
  // final state) read nothing the dL/dS walk writes, so, launched as the walk's programmatic
  // dependent, they run on the SMs the walk leaves free while it runs (backward.cuh
  // GradientBlock; NOTES.md v45).
  bool last_chunks_first = false;

  // The state entering every chunk, rounded to the input type, [N, H, max_chunks, K, V]
  // contiguous (the backward's chunk_states layout), or nullptr. Forward: written as well as
  // o (the default outputs pass copies its state operand out; NOTES.md v19). Backward: read
  // instead of walking the chunk-state pass; it must be the forward's on these same inputs.
  void* saved_chunk_states = nullptr;
  // Every chunk's scores A (the causal, decay-weighted q·kᵀ block, zero above the diagonal, as
  // the outputs pass forms it), rounded to the input type, [N, H, max_chunks, 64, 64]
  // contiguous, or nullptr; only with saved_chunk_states and one key block (K ≤ 128).
  // Forward: written by the form that saves the states (else the launcher throws). Backward:
  // read instead of forming A again (NOTES.md v48); it must be the forward's on these inputs.
  void* saved_chunk_scores = nullptr;
  // Set by the launchers (gla_forward_factored, gla_backward_factored): the default outputs pass
  // (bf16) forms a chunk's A, and the gradient kernel given the saved scores (bf16) a chunk's dq
  // and dk, as products factored through the chunk's start wherever the chunk's decays allow
  // (forward.cuh factored_operands, backward.cuh factored_gradients), and by the sub-chunks and
  // quads elsewhere.
  bool factored_chunks = false;
};

enum class GlaDtype { bf16, f16 };

// Tokens per chunk: the state is carried from chunk to chunk.
inline constexpr int64_t kGlaChunk = 64;

// Head dimensions the CUDA kernels cover: K in {64, 128, 256} (256 as two key blocks of
// 128), V a multiple of 64.
inline constexpr bool gla_cuda_supports(int64_t K, int64_t V) {
  return (K == 64 || K == 128 || K == 256) && V % 64 == 0;
}

// How the forward's outputs pass forms the diagonal 16-token sub-chunks of A:
// cuda_cores sums every token pair of a sub-chunk on the CUDA cores; tensor_cores cuts each
// sub-chunk into 4-token quads, forms the pairs of different quads on the tensor cores
// (factored at the later quad's first token, every factor ≤ 1) and sums only the pairs
// inside a quad on the CUDA cores (forward.cuh, quad_*). The state passes form no diagonal.
enum class GlaForwardDiagonal { cuda_cores, tensor_cores };
// Tensor cores by default: on the H100 the forward took 0.288 ms with them
// against 0.499 ms with the CUDA-core diagonal (B8 T2048 H16 K=V=128 bf16; NOTES.md).
inline constexpr GlaForwardDiagonal kDefaultForwardDiagonal = GlaForwardDiagonal::tensor_cores;

// The diagonal in use: process-wide, kDefaultForwardDiagonal unless the environment variable
// SEQMIX_GLA_FORWARD_DIAGONAL is "cuda_cores" or "tensor_cores" when first asked, or a
// caller (the tests) set it.
GlaForwardDiagonal gla_forward_diagonal();
void gla_set_forward_diagonal(GlaForwardDiagonal diagonal);

// How the backward's gradient kernel forms the pairs inside each 16-token sub-chunk (A's
// diagonal blocks, and the in-sub-chunk sums of dq and dk that dg is built from):
// cuda_cores sums every such pair on the CUDA cores; tensor_cores cuts the sub-chunks into
// 4-token quads as the forward's tensor-core diagonal does (forward.cuh quad_*; backward.cuh
// quad_gradient_*), pairs of different quads on the tensor cores, only the pairs inside a
// quad on the CUDA cores.
enum class GlaBackwardDiagonal { cuda_cores, tensor_cores };
// Tensor cores by default: on the H100 the backward took 2.13 ms with them against 2.37 ms
// with the CUDA-core pairs (medians of 30, same inputs, B8 T2048 H16 K=V=128 bf16; NOTES.md).
inline constexpr GlaBackwardDiagonal kDefaultBackwardDiagonal = GlaBackwardDiagonal::tensor_cores;

// The backward's diagonal in use: process-wide, kDefaultBackwardDiagonal unless the
// environment variable SEQMIX_GLA_BACKWARD_DIAGONAL is "cuda_cores" or "tensor_cores" when
// first asked, or a caller (the tests) set it.
GlaBackwardDiagonal gla_backward_diagonal();
void gla_set_backward_diagonal(GlaBackwardDiagonal diagonal);

// How the gradient kernel's token walks (the pairs inside each quad, tensor-core diagonal
// only) read their shared tiles: rows walks a row at a time, each of its three partners'
// dA, e^{g}, q or k read again for every row; quads reads a quad's 4 × 4 dA block as four
// 16-byte rows and its e^{g}, q and k once, then forms its four rows (backward.cuh
// quad_token_walks). quads also reads H and S_0 eight elements a load in the value loop's
// Σ H ⊙ S_0 (a lane per channel: 2-byte loads there conflict four ways).
enum class GlaBackwardWalk { rows, quads };
// Quads by default: on the H100 the gradient kernel took 0.986 ms with them against 1.178 ms
// by rows (B8 T2048 H16 K=V=128 bf16, one process; NOTES.md v8).
inline constexpr GlaBackwardWalk kDefaultBackwardWalk = GlaBackwardWalk::quads;

// The token walk in use: process-wide, kDefaultBackwardWalk unless the environment variable
// SEQMIX_GLA_BACKWARD_WALK is "rows" or "quads" when first asked, or a caller set it.
GlaBackwardWalk gla_backward_walk();
void gla_set_backward_walk(GlaBackwardWalk walk);

// The gradient kernel's tail with the quad walk: narrow sums dg on one thread a key channel
// (4 warps at K = 128) over the chunk's 64 tokens, and walks the quad operands reading each
// token as it goes; wide sums dg on every thread (runs of 32 tokens at K = 128, 16 at K = 64,
// joined through shared totals) and reads each sub-chunk before the quad operands' stores.
enum class GlaBackwardTail { narrow, wide };
// Wide by default: on the H100 the gradient kernel took 0.9125 ms with it against 0.9748 ms
// with the narrow tail (B8 T2048 H16 K=V=128 bf16, one process; NOTES.md v9).
inline constexpr GlaBackwardTail kDefaultBackwardTail = GlaBackwardTail::wide;

// The tail in use: process-wide, kDefaultBackwardTail unless the environment variable
// SEQMIX_GLA_BACKWARD_TAIL is "narrow" or "wide" when first asked, or a caller set it.
GlaBackwardTail gla_backward_tail();
void gla_set_backward_tail(GlaBackwardTail tail);

// How the 8 warps of a forward walk tile the state and o (forward.cuh StateTile, chunk_output):
// wide gives each warp 16 rows (of keys; of tokens) and a half (o) or all (the state) of the
// value columns; tall gives each warp 32 rows and half as many columns, so that each fragment
// of v and of the state operand is read by half as many warps (shared-memory wavefronts a chunk
// step: ≈ 8.8 k at B8 T2048 K = V = 128, ≈ 0.7 k fewer with tall). The outputs pass and the
// split's pass 1 (the forward's and the backward's); the backward's chunk-state and dL/dS walks
// keep the wide tiling.
enum class GlaForwardTiling { wide, tall };
// Tall by default: on the H100 the forward took 0.95× the time at B8 T2048 and 0.96× at
// B1 T32768 (H16 K = V = 128 bf16, one process, alternated; NOTES.md v13).
inline constexpr GlaForwardTiling kDefaultForwardTiling = GlaForwardTiling::tall;

// The tiling in use: process-wide, kDefaultForwardTiling unless the environment variable
// SEQMIX_GLA_FORWARD_TILING is "wide" or "tall" when first asked, or a caller set it.
GlaForwardTiling gla_forward_tiling();
void gla_set_forward_tiling(GlaForwardTiling tiling);

// The outputs pass's walkers (forward.cuh; tensor-core diagonal and tall tiling only): single
// gives each of 2·KD threads one channel and the whole chunk (2-byte shared accesses);
// paired gives each a channel pair and half the chunk (4-byte accesses, chains of 32 tokens),
// half the walkers' shared wavefronts (≈ 2.8 k of ≈ 8.8 k a chunk step; NOTES.md v15).
enum class GlaForwardWalkers { single, paired };
// Paired: measured 1.5–3 % faster on the H100 at B8 T2048, B1 T32768 and B4 T4096 (NOTES.md v15).
inline constexpr GlaForwardWalkers kDefaultForwardWalkers = GlaForwardWalkers::paired;

// The walkers in use: process-wide, kDefaultForwardWalkers unless the environment variable
// SEQMIX_GLA_FORWARD_WALKERS is "single" or "paired" when first asked, or a caller set it.
GlaForwardWalkers gla_forward_walkers();
void gla_set_forward_walkers(GlaForwardWalkers walkers);

// How the outputs pass's default form (tensor-core diagonal, tall tiling, paired walkers) writes
// o: direct, every thread's 4-byte stores from its fragments (16 a thread a chunk step, each
// warp store touching 8 rows); staged, a whole chunk's o into free shared tiles in the
// 128-byte swizzle, then one thread's tensor copies (NOTES.md v17). A sequence's last, partial
// chunk, the key blocks' float partials (K = 256) and views the copy engine cannot write keep
// the direct stores.
enum class GlaForwardOutput { direct, staged };
inline constexpr GlaForwardOutput kDefaultForwardOutput = GlaForwardOutput::staged;

// The output path in use: process-wide, kDefaultForwardOutput unless the environment variable
// SEQMIX_GLA_FORWARD_OUTPUT is "direct" or "staged" when first asked, or a caller set it.
GlaForwardOutput gla_forward_output();
void gla_set_forward_output(GlaForwardOutput output);

// Stages of copies in the backward's dL/dS walk (backward.cuh state_grad_kernel): 2 (each
// chunk's q, g, do issued one chunk ahead) or 3 (two ahead). ncu saw that walk waiting on its
// copies (long-scoreboard stalls 2.8 a issue at B8 T2048; NOTES.md, the forward profiled).
// 2 by default until 3 is measured faster on the H100.
inline constexpr int kDefaultBackwardStateStages = 2;

// The stages in use: process-wide, kDefaultBackwardStateStages unless the environment variable
// SEQMIX_GLA_BACKWARD_STATE_STAGES is "2" or "3" when first asked, or a caller set it.
int gla_backward_state_stages();
void gla_set_backward_state_stages(int stages);

// Whether the backward's gradient kernel starts its blocks of the sequences' last chunks
// while the dL/dS walk still runs (GlaParams::last_chunks_first, a programmatic dependent
// launch): process-wide, on unless the environment variable SEQMIX_GLA_BACKWARD_EARLY_START
// is "0" when first asked, or a caller (the timing tests) set it.
bool gla_backward_early_start();
void gla_set_backward_early_start(bool on);

// Whether the gradient kernel's value slices of S_0 and dL/dS come from their tables by the
// copy engine (one tensor copy a table a slice, backward.cuh TableSlices) or as 16-byte
// cp.async pieces from every thread: process-wide, on unless the environment variable
// SEQMIX_GLA_BACKWARD_TABLE_COPIES is "0" when first asked, or a caller (the timing tests) set
// it. Tables the copy engine cannot read (a base not 16-byte aligned) take the pieces.
bool gla_backward_table_copies();
void gla_set_backward_table_copies(bool on);

// Whether the gradient kernel's value loop (with the table copies) holds k_end's fragments in
// registers for all slices and reads do's once a slice for both its products (backward.cuh
// gradient_kernel kHeldOperands): process-wide, on unless the environment variable
// SEQMIX_GLA_BACKWARD_HELD_OPERANDS is "0" when first asked, or a caller set it.
bool gla_backward_held_operands();
void gla_set_backward_held_operands(bool on);

// Whether the default outputs pass (bf16) factors a chunk's A through the chunk's first token,
// A = (q ⊙ 2^{b})·(k ⊙ 2^{−b})ᵀ masked to j ≤ i (b the running log2 decay from the chunk's start),
// one product instead of the sub-chunk pairs, the quad pairs and the pairs inside each quad, in
// every chunk whose |b| stays within kFactoredRange at every token and channel (a vote of the
// block; the others take the sub-chunks and quads as before; forward.cuh factored_operands,
// NOTES.md v61): process-wide, on unless the environment variable SEQMIX_GLA_FORWARD_FACTORED
// is "0" when first asked, or a caller (the tests) set it.
bool gla_forward_factored();
void gla_set_forward_factored(bool on);

// The outputs pass with two chunks in flight (forward_pipelined.cuh: a state side and a chunk
// side on two slots) in place of the default form where it applies (bf16, K = 128, V a multiple
// of 128, no states saved; chunks it cannot factor whole go to the default form after it):
// process-wide, on unless the environment variable SEQMIX_GLA_FORWARD_PIPELINED is "0" when
// first asked, or a caller (the tests) set it.
bool gla_forward_pipelined();
void gla_set_forward_pipelined(bool on);

// The same for the backward's gradient kernel given the forward's saved scores (bf16): a chunk's
// dq and dk as two products through the factors 2^{±b} instead of the sub-chunk pairs, the quad
// pairs and the token walks, in every chunk that passes the same vote (backward.cuh
// factored_gradients, NOTES.md v62): process-wide, on unless the environment variable
// SEQMIX_GLA_BACKWARD_FACTORED is "0" when first asked, or a caller (the tests) set it.
bool gla_backward_factored();
void gla_set_backward_factored(bool on);

// Whether the forward's split (launch.cuh) walks its pass 1 in pieces (only the segments
// before the last, cut to fill the SMs) or, as the backward does, one block a segment:
// process-wide, on unless the environment variable SEQMIX_GLA_FORWARD_PIECES is "0" when
// first asked, or a caller (the timing tests) set it.
bool gla_forward_pieces();
void gla_set_forward_pieces(bool on);

template <GlaDtype dtype>
void gla_forward(const GlaParams& p);

// Bytes of scratch the backward needs for these parameters (shapes and sequences set).
size_t gla_backward_workspace_bytes(const GlaParams& p);

template <GlaDtype dtype>
void gla_backward(const GlaParams& p);

}  // namespace seqmix::cuda
