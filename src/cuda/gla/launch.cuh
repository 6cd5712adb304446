// Launchers of the GLA forward: the split decision, the segment passes, the shapes.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "cuda/common/tensor_map.hpp"
#include "cuda/gla/forward.cuh"
#include "cuda/gla/forward_pipelined.cuh"
#include "cuda/gla/profile.cuh"
#include "seqmix/error.hpp"

namespace seqmix::cuda::gla {

// The chains below give each thread four adjacent state elements of one row (V is a multiple
// of 64): 16-byte loads and stores, and a quarter of the threads and blocks that one element a
// thread took (NOTES.md v64b).
constexpr int kChainElements = 4;

__device__ __forceinline__ float4 decayed_plus(float decay, float4 S, float4 own) {
  return make_float4(decay * S.x + own.x, decay * S.y + own.y, decay * S.z + own.z, decay * S.w + own.w);
}

// The initial state's four elements from `element` of pair `pair` (zeros without one); read a
// float at a time, since the caller's tensor need not be 16-byte aligned.
__device__ __forceinline__ float4 initial_elements(const GlaParams& p, int64_t pair, int64_t element) {
  if (!p.initial_state) return make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float* at = p.initial_state + pair * p.K * p.V + element;
  return make_float4(at[0], at[1], at[2], at[3]);
}

// (state elements / 4 / 256, heads, sequences): a chain's grid.
inline dim3 chain_grid(const GlaParams& p) {
  const int64_t threads = p.K * p.V / kChainElements;
  return dim3(static_cast<unsigned>((threads + 255) / 256), static_cast<unsigned>(p.H),
              static_cast<unsigned>(p.num_sequences));
}

// Chains the segments of each (sequence, head): slot s of the workspace holds segment s's
// own end state on entry and the state entering it on exit,
//   S_in(0) = initial state,  S_in(s+1) = e^{Σg over s} ⊙ S_in(s) + own(s).
// Each thread walks its four elements through the segments in order.
static __global__ void chain_segments_kernel(const GlaParams p) {
  const int64_t element = kChainElements * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (element >= p.K * p.V) return;
  const int64_t pair = static_cast<int64_t>(blockIdx.z) * p.H + blockIdx.y;  // n·H + h
  const int64_t row = element / p.V;
  const float* decays = segment_decay_table(p);
  float4 S = initial_elements(p, pair, element);
  for (int64_t seg = 0; seg < p.segments; ++seg) {
    const int64_t slot = pair * p.segments + seg;
    float4* at = reinterpret_cast<float4*>(p.workspace + slot * p.K * p.V + element);
    const float4 own = *at;
    *at = S;
    S = decayed_plus(decays[slot * p.K + row], S, own);
  }
}

// The forward's split without the last segment's pass 1 (launch_forward): slot s of
// p.workspace gets the state entering segment s from `pieces`, the own end states and decays
// of the pieces that cut the segments before the last one, `per_segment` a segment
// ([N, H, (segments − 1)·per_segment, K, V] states, then [.., K] decays),
//   S_in(0) = initial state,  S_in(s+1) = the pieces of s applied in order to S_in(s),
// a piece applied as S ← e^{Σg over it} ⊙ S + own. Four elements a thread, as above.
static __global__ void chain_pieces_kernel(const GlaParams p, const float* pieces, int64_t per_segment) {
  const int64_t element = kChainElements * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (element >= p.K * p.V) return;
  const int64_t pair = static_cast<int64_t>(blockIdx.z) * p.H + blockIdx.y;  // n·H + h
  const int64_t row = element / p.V, piece_count = (p.segments - 1) * per_segment;
  const float* decays = pieces + p.num_sequences * p.H * piece_count * p.K * p.V;
  float4 S = initial_elements(p, pair, element);
  for (int64_t seg = 0; seg < p.segments; ++seg) {
    *reinterpret_cast<float4*>(p.workspace + (pair * p.segments + seg) * p.K * p.V + element) = S;
    if (seg + 1 == p.segments) break;
    for (int64_t i = 0; i < per_segment; ++i) {
      const int64_t slot = pair * piece_count + seg * per_segment + i;
      S = decayed_plus(decays[slot * p.K + row], S,
                       *reinterpret_cast<const float4*>(pieces + slot * p.K * p.V + element));
    }
  }
}

// The key blocks' float partials of o or dv (p.partial) summed and rounded to E into `out`;
// a thread per two adjacent columns.
template <class E>
__global__ void sum_key_blocks_kernel(const GlaParams p, const GlaTokens out) {
  const int64_t block_elements = p.partial_rows * p.H * p.V;
  for (int64_t e = 2 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x); e < block_elements;
       e += 2 * static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float2 sum = make_float2(0.0f, 0.0f);
    for (int64_t kb = 0; kb < p.key_blocks; ++kb) {
      const float2 x = *reinterpret_cast<const float2*>(p.partial + kb * block_elements + e);
      sum.x += x.x, sum.y += x.y;
    }
    const int64_t col = e % p.V, h = e / p.V % p.H, row = e / (p.V * p.H), b = row / p.T, t = row % p.T;
    *reinterpret_cast<uint32_t*>(static_cast<E*>(out.data) + b * out.stride_batch + t * out.stride_time +
                                 h * out.stride_head + col) = pack2<E>(sum.x, sum.y);
  }
}

// Bytes of the key blocks' partials (zero without key blocks).
inline size_t partial_bytes(const GlaParams& p) {
  const int64_t rows = p.cu_seqlens ? p.T : p.num_sequences * p.T;
  return p.key_blocks > 1 ? static_cast<size_t>(p.key_blocks * rows * p.H * p.V) * sizeof(float) : 0;
}

// Points p.partial at `at` (partial_bytes(p) bytes) and zeroes it: tokens outside every
// sequence (cu_seqlens ending before T) then sum to zero.
inline void use_partial(GlaParams& p, void* at, cudaStream_t stream) {
  p.partial_rows = p.cu_seqlens ? p.T : p.num_sequences * p.T;
  p.partial = static_cast<float*>(at);
  check(cudaMemsetAsync(at, 0, partial_bytes(p), stream), "gla key-block partials");
}

// Launches through `launch`, checks the launch, and brackets it with the profiling events
// (profile.hpp; nothing while profiling is off).
template <class Launch>
void timed_launch(cudaStream_t stream, const char* kernel, Launch&& launch) {
  launch_began(stream);
  launch();
  check_launch(kernel);
  launch_ended(stream, kernel);
}

// Segments per sequence: one block per SM at most (a block fills an SM's shared memory),
// so split only when the unsplit grid leaves at least half the SMs idle.
inline void plan_segments(GlaParams& p, int64_t value_blocks) {
  const int64_t blocks = p.num_sequences * p.H * value_blocks, sms = multiprocessor_count();
  p.segments = 1, p.segment_chunks = 0;
  if (2 * blocks > sms || p.max_chunks < 4) return;
  const int64_t segments = std::min<int64_t>(sms / blocks, p.max_chunks / 2);
  p.segment_chunks = (p.max_chunks + segments - 1) / segments;
  p.segments = (p.max_chunks + p.segment_chunks - 1) / p.segment_chunks;
}

// Blocks across V: value blocks times key blocks (blockIdx.x, forward.cuh KeyBlock).
template <int VB>
unsigned column_blocks(const GlaParams& p) {
  return static_cast<unsigned>(p.V / VB * p.key_blocks);
}

template <class E>
void sum_key_blocks(const GlaParams& p, const GlaTokens& out, cudaStream_t stream) {
  const int64_t threads = p.partial_rows * p.H * p.V / 2;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((threads + 255) / 256, 8 * multiprocessor_count()));
  timed_launch(stream, "gla sum key blocks", [&] { sum_key_blocks_kernel<E><<<blocks, 256, 0, stream>>>(p, out); });
}

// The copy engine's element type for E.
template <class E>
constexpr CUtensorMapDataType map_dtype() {
  return std::is_same_v<E, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// The [B, T, H, V] (or varlen [T, H, V]) map of o that the staged output's copies write
// through (forward.cuh copy_staged_output), or nullopt where the copy engine cannot write o
// (a base or a stride that is not a multiple of 16 bytes).
template <class E>
std::optional<CUtensorMap> output_map(const GlaParams& p) {
  const GlaTokens& o = p.o;
  const bool aligned = reinterpret_cast<uintptr_t>(o.data) % 16 == 0 && o.stride_time % 8 == 0 &&
                       o.stride_head % 8 == 0 && o.stride_batch % 8 == 0;
  if (!aligned) return std::nullopt;
  const HeadRowsShape shape{map_dtype<E>(), p.V, p.T, p.H, p.cu_seqlens ? 1 : p.num_sequences,
                            o.stride_time, o.stride_head, p.cu_seqlens ? 0 : o.stride_batch};
  return make_head_rows_map(o.data, shape, static_cast<int>(kGlaChunk), "gla output");
}

// Rows of the [N, H, max_chunks, K, V] state tables seen as [rows, V] (state_table_map, and
// the gradient kernel's TableSlices).
__host__ __device__ inline int64_t state_table_rows(const GlaParams& p) {
  return p.num_sequences * p.H * p.max_chunks * p.K;
}

// The map through which a walk sends each chunk's [KD, VB] state tile (pitch VB + 8) to a
// state table [slots·K rows, V] by one tensor copy (NOTES.md v52): the table seen as (a value
// block's columns, value blocks, rows), written in boxes of the padded tile, VB + 8 columns ×
// KD rows; the 8 columns past the value block lie outside the map, so the copy engine skips
// them. `what` names the table in the error thrown where the copy engine cannot write it (a
// base not 16-byte aligned, or more than 2^31 rows).
template <class E, int KD, int VB>
CUtensorMap state_table_map(const void* table, const GlaParams& p, const char* what) {
  const int64_t rows = state_table_rows(p);
  const TensorMapShape shape{map_dtype<E>(), sizeof(E), {VB, p.V / VB, rows}, VB, p.V, {VB + 8, 1, KD}};
  if (rows > INT32_MAX || !tensor_map_supported(table, shape))
    throw Error(std::string("seqmix.chunk_gla: the ") + what +
                " cannot be written by the copy engine (a base not 16-byte aligned, or more than 2^31 rows)");
  return make_tensor_map(table, shape);
}

// The maps through which a walk that copies out its chunk states (and A) sends each chunk's
// tiles: the states by state_table_map, A's table [slots·64 rows, 64] likewise in boxes of 72
// columns × 64 rows (an empty map without that table).
template <class E, int KD, int VB>
std::pair<CUtensorMap, CUtensorMap> chunk_table_maps(const GlaParams& p) {
  const int64_t score_rows = p.num_sequences * p.H * p.max_chunks * kGlaChunk;
  const TensorMapShape scores{map_dtype<E>(),         sizeof(E), {kGlaChunk, score_rows, 1}, kGlaChunk,
                              score_rows * kGlaChunk, {Smem<E, KD, VB>::PA, kGlaChunk, 1}};
  if (p.saved_chunk_scores && (score_rows > INT32_MAX || !tensor_map_supported(p.saved_chunk_scores, scores)))
    throw Error("seqmix.chunk_gla: the chunk scores cannot be written by the copy engine (a base not 16-byte aligned)");
  return {state_table_map<E, KD, VB>(p.chunk_states, p, "chunk states"),
          p.saved_chunk_scores ? make_tensor_map(p.saved_chunk_scores, scores) : CUtensorMap{}};
}

template <class E, int KD, int VB, Pass kPass, bool kQuads, int kRowBlocks, bool kPairedWalk = false,
          bool kSaveStates = false, bool kStagedOutput = false>
void launch_walk(GlaParams p, cudaStream_t stream, const CUtensorMap& o_map = CUtensorMap{}) {
  const size_t smem = sizeof(Smem<E, KD, VB>);
  auto kernel = forward_kernel<E, KD, VB, kPass, kQuads, kRowBlocks, kPairedWalk, kSaveStates, kStagedOutput>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "gla forward shared memory");
  const dim3 grid(column_blocks<VB>(p), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences * p.segments));
  p.phase_cycles = profile_counters();
  constexpr bool kCopyStates = kSaveStates || kPass == Pass::chunk_states;
  const std::pair<CUtensorMap, CUtensorMap> tables =
      kCopyStates ? chunk_table_maps<E, KD, VB>(p) : std::pair<CUtensorMap, CUtensorMap>{};
  timed_launch(stream,
               kSaveStates                   ? "gla forward (staged output, chunk states saved)"
               : kStagedOutput               ? "gla forward (paired walkers, staged output)"
               : kPairedWalk                 ? "gla forward (tensor-core diagonal, paired walkers)"
               : kQuads                      ? "gla forward (tensor-core diagonal)"
               : kPass == Pass::outputs      ? "gla forward"
               : kPass == Pass::segment_ends ? "gla forward segment states"
                                             : "gla chunk states",
               [&] {
                 // After the outputs pass with two chunks in flight, as its programmatic dependent:
                 // most blocks find nothing left and exit, so the launch's own gap is what it costs.
                 launch_maybe_programmatic(p.resume_chunks != nullptr, kernel, grid, dim3(kThreads), smem, stream,
                                           "gla forward walk", p, o_map, tables.first, tables.second);
               });
}

// A walk in the tiling gla_forward_tiling() asks for (params.hpp): 16-row blocks a warp of the
// state and of o, two (tall) or one (wide). The backward's chunk-state walk stays wide: tall
// measured no faster there (its per-chunk state stores hold it; NOTES.md v13).
template <class E, int KD, int VB, Pass kPass, bool kQuads = false>
void launch_pass(const GlaParams& p, cudaStream_t stream) {
  if constexpr (kPass != Pass::chunk_states) {
    if (gla_forward_tiling() == GlaForwardTiling::tall) return launch_walk<E, KD, VB, kPass, kQuads, 2>(p, stream);
  }
  launch_walk<E, KD, VB, kPass, kQuads, 1>(p, stream);
}

// The outputs pass with two chunks in flight (forward_pipelined.cuh).
template <class E, int KD, int VB>
void launch_pipelined(GlaParams p, cudaStream_t stream) {
  const size_t smem = sizeof(PipelinedSmem<E, KD, VB>);
  auto kernel = pipelined_forward_kernel<E, KD, VB>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "gla pipelined forward shared memory");
  const dim3 grid(column_blocks<VB>(p), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences * p.segments));
  p.phase_cycles = profile_counters();
  timed_launch(stream, "gla forward (two chunks in flight)",
               [&] { kernel<<<grid, kPipelinedThreads, smem, stream>>>(p); });
}

// The outputs pass as gla_forward_diagonal, gla_forward_walkers, gla_forward_tiling and
// gla_forward_output ask (params.hpp; launch_outputs reads them: tensor_cores, paired_tall, o_map),
// then the chunk-state pass where the chosen form saves no states.
template <class E, int KD, int VB>
void launch_default_outputs(const GlaParams& p, cudaStream_t stream, bool save, bool tensor_cores, bool paired_tall,
                            const std::optional<CUtensorMap>& o_map) {
  if (o_map) {
    if (save) return launch_walk<E, KD, VB, Pass::outputs, true, 2, true, true, true>(p, stream, *o_map);
    return launch_walk<E, KD, VB, Pass::outputs, true, 2, true, false, true>(p, stream, *o_map);
  }
  if (paired_tall) launch_walk<E, KD, VB, Pass::outputs, true, 2, true>(p, stream);
  else if (tensor_cores) launch_pass<E, KD, VB, Pass::outputs, true>(p, stream);
  else launch_pass<E, KD, VB, Pass::outputs>(p, stream);
  if (save) launch_pass<E, KD, VB, Pass::chunk_states>(p, stream);
}

// The outputs pass, forming A's diagonal sub-chunks as gla_forward_diagonal says (params.hpp).
// The paired walkers (gla_forward_walkers) only with the tensor-core diagonal and the tall
// tiling, the defaults: one more kernel a shape and dtype.
// The default form writes o through the staging boxes (gla_forward_output) where there are no
// key blocks (their float partials are summed after) and the copy engine can write o. With
// p.chunk_states set (GlaParams::saved_chunk_states) that form also copies out every chunk's
// entering state, and with p.saved_chunk_scores every chunk's A; the other forms are followed
// by the chunk-state pass (the same table, the same cost as the backward's: correct, not
// faster) and cannot save A, so they refuse the scores table.
// The paired walkers' kernels (bf16) factor each chunk whole where its decays allow
// (gla_forward_factored).
template <class E, int KD, int VB>
void launch_outputs(GlaParams p, cudaStream_t stream) {
  p.factored_chunks = gla_forward_factored();
  const bool save = p.chunk_states != nullptr;
  const bool tensor_cores = gla_forward_diagonal() == GlaForwardDiagonal::tensor_cores;
  const bool paired_tall = tensor_cores && gla_forward_walkers() == GlaForwardWalkers::paired &&
                           gla_forward_tiling() == GlaForwardTiling::tall;
  const bool staged = paired_tall && gla_forward_output() == GlaForwardOutput::staged && p.key_blocks == 1;
  const std::optional<CUtensorMap> o_map = staged ? output_map<E>(p) : std::nullopt;
  if (p.saved_chunk_scores && !(save && o_map))
    throw Error(
        "seqmix.chunk_gla: argument 'chunk_scores': expected none with this forward (the chunk scores are saved "
        "only with chunk_states by the default outputs pass: tensor-core diagonal, paired walkers, tall tiling, "
        "staged output, K <= 128, o writable by the copy engine), got a tensor");
  // In place of the default form (inference, bf16, K = 128): the outputs pass with two chunks in
  // flight, then the default form for the chunks it refused (none where every chunk factors).
  void* resume_scratch = nullptr;
  if constexpr (std::is_same_v<E, __nv_bfloat16> && KD == 128 && VB == 128) {
    if (gla_forward_pipelined() && paired_tall && !save && p.key_blocks == 1 && p.factored_chunks) {
      const int64_t slots = p.num_sequences * p.H * p.segments;
      const size_t chunk_bytes = slots * column_blocks<VB>(p) * sizeof(int64_t);
      resume_scratch = stream_scratch(chunk_bytes + slots * p.K * p.V * sizeof(float), stream, "gla resume tables");
      p.resume_chunks = static_cast<int64_t*>(resume_scratch);
      p.resume_states = reinterpret_cast<float*>(static_cast<unsigned char*>(resume_scratch) + chunk_bytes);
      launch_pipelined<E, KD, VB>(p, stream);
    }
  }
  launch_default_outputs<E, KD, VB>(p, stream, save, tensor_cores, paired_tall, o_map);
  if (resume_scratch) check(cudaFreeAsync(resume_scratch, stream), "gla resume tables");
}

// Floats of the segment tables in p.workspace: states, then decays.
inline size_t segment_table_floats(const GlaParams& p) {
  return p.segments > 1 ? static_cast<size_t>(p.num_sequences * p.H * p.segments * p.K * (p.V + 1)) : 0;
}

// With p.segments > 1: the state entering each segment, into p.workspace (each segment's own
// end state, then the chain).
template <class E, int KD, int VB>
void segment_entering_states(const GlaParams& p, cudaStream_t stream) {
  launch_pass<E, KD, VB, Pass::segment_ends>(p, stream);
  timed_launch(stream, "gla chain segments",
               [&] { chain_segments_kernel<<<chain_grid(p), 256, 0, stream>>>(p); });
}

// The forward's pass 1 when split. Only the segments before the last need their own end
// states (the last one's outputs pass ends in the final state), so pass 1 walks just those
// chunks, cut into `per_segment` pieces a segment so that its blocks fill the SMs: at B 4,
// T 4096, H 16 (64 (sequence, head) pairs, 2 segments of 32 chunks) 128 blocks of 16 chunks
// instead of 128 blocks of 32, half of them for the unread last segment. The pieces need
// per_segment · piece_chunks = segment_chunks, so the segments may get a chunk or two longer.
struct PiecePlan {
  int64_t per_segment = 1, piece_chunks = 0;
};

inline PiecePlan plan_pieces(GlaParams& p, int64_t value_blocks) {
  PiecePlan plan;
  plan.piece_chunks = p.segment_chunks;
  const int64_t pairs = p.num_sequences * p.H * value_blocks, sms = multiprocessor_count();
  const int64_t per_segment = std::min<int64_t>(sms / (pairs * (p.segments - 1)), p.segment_chunks);
  if (per_segment < 2) return plan;
  const int64_t piece_chunks = (p.segment_chunks + per_segment - 1) / per_segment;
  const int64_t segment_chunks = piece_chunks * per_segment;
  const int64_t segments = (p.max_chunks + segment_chunks - 1) / segment_chunks;
  if (segments < 2) return plan;  // keep the split the outputs pass needs
  p.segment_chunks = segment_chunks, p.segments = segments;
  return {per_segment, piece_chunks};
}

// Floats of the pieces' tables (states, then decays).
inline size_t piece_table_floats(const GlaParams& p, const PiecePlan& plan) {
  return static_cast<size_t>(p.num_sequences * p.H * (p.segments - 1) * plan.per_segment * p.K * (p.V + 1));
}

// With p.segments > 1: the state entering each segment, into p.workspace, from the pieces'
// own end states (a segment-ends walk over the pieces, into `pieces`) and a chain.
template <class E, int KD, int VB>
void piece_entering_states(const GlaParams& p, const PiecePlan& plan, float* pieces, cudaStream_t stream) {
  GlaParams walk = p;
  walk.segments = (p.segments - 1) * plan.per_segment;
  walk.segment_chunks = plan.piece_chunks;
  walk.workspace = pieces;
  launch_pass<E, KD, VB, Pass::segment_ends>(walk, stream);
  timed_launch(stream, "gla chain segments",
               [&] { chain_pieces_kernel<<<chain_grid(p), 256, 0, stream>>>(p, pieces, plan.per_segment); });
}

template <class E, int KD, int VB>
void launch_forward(GlaParams p) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  p.key_blocks = p.K / KD;
  plan_segments(p, column_blocks<VB>(p));
  const bool in_pieces = p.segments > 1 && gla_forward_pieces();
  const PiecePlan pieces = in_pieces ? plan_pieces(p, column_blocks<VB>(p)) : PiecePlan{};
  // The segment and piece tables and the key blocks' partials live only for these launches:
  // stream-ordered scratch (the public API has no workspace argument for them yet).
  const size_t table_bytes = segment_table_floats(p) * sizeof(float);
  const size_t piece_bytes = in_pieces ? piece_table_floats(p, pieces) * sizeof(float) : 0;
  const size_t bytes = table_bytes + piece_bytes + partial_bytes(p);
  void* workspace = nullptr;
  if (bytes) workspace = stream_scratch(bytes, stream, "gla forward workspace");
  auto* const base = static_cast<unsigned char*>(workspace);
  p.workspace = p.segments > 1 ? reinterpret_cast<float*>(base) : nullptr;
  if (p.key_blocks > 1) use_partial(p, base + table_bytes + piece_bytes, stream);
  p.chunk_states = p.saved_chunk_states;
  if (in_pieces) piece_entering_states<E, KD, VB>(p, pieces, reinterpret_cast<float*>(base + table_bytes), stream);
  else if (p.segments > 1) segment_entering_states<E, KD, VB>(p, stream);
  launch_outputs<E, KD, VB>(p, stream);
  if (p.key_blocks > 1) sum_key_blocks<E>(p, p.o, stream);
  if (workspace) check(cudaFreeAsync(workspace, stream), "gla forward workspace");
}

// The value block: 128 columns when V allows (the state then takes 64 registers a thread).
// K = 256: the K = 128 kernels over two key blocks.
template <class E>
void forward_for_shape(const GlaParams& p) {
  if (p.K >= 128) {
    if (p.V % 128 == 0) launch_forward<E, 128, 128>(p);
    else launch_forward<E, 128, 64>(p);
  } else {
    if (p.V % 128 == 0) launch_forward<E, 64, 128>(p);
    else launch_forward<E, 64, 64>(p);
  }
}

}  // namespace seqmix::cuda::gla
