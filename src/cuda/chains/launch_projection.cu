// The projection chain on the device: small kernels that build the per-column epilogue
// vectors and gather the segments' gradients, then the launchers that put them together
// with the GEMMs (projection_gemm.cuh, plain_gemm.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/chains/narrow_projection.hpp"
#include "cuda/chains/params.hpp"
#include "cuda/chains/scratch.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda::chains {
namespace {

// The segments by value (kernel parameters), with what each kernel needs of them.
struct SegmentTable {
  int count = 0;
  int64_t offset[kMaxSegments];  // first column
  int code[kMaxSegments];
  float scale[kMaxSegments];
  const void* gradient[kMaxSegments];
  int64_t gradient_stride[kMaxSegments];
  bool gradient_f32[kMaxSegments];
  bool vector[kMaxSegments];  // bf16, offset, stride and base at 8-element (16-byte) multiples
};

// The segment holding column c, searching forward from segment s (segments tile the
// columns in order).
__device__ int segment_from(const SegmentTable& t, int s, int64_t c) {
  while (s + 1 < t.count && c >= t.offset[s + 1]) ++s;
  return s;
}

// bias (f32 copy, 0 when absent), code and scale for every column < padded; the padding
// columns get identity.
__global__ void fill_columns(SegmentTable t, const bf16* bias, int64_t columns, int64_t padded, float* bias_out,
                             float* code, float* scale) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < padded; c += int64_t(gridDim.x) * blockDim.x) {
    const bool inside = c < columns;
    const int s = segment_from(t, 0, c);
    bias_out[c] = inside && bias ? __bfloat162float(bias[c]) : 0.f;
    code[c] = inside ? float(t.code[s]) : 0.f;
    scale[c] = inside ? t.scale[s] : 1.f;
  }
}

// dz [tokens, ld] bf16 = the segments' gradients over columns [first_column, first_column + ld)
// side by side; 8 columns (one 16-byte store) per step; the columns from `columns` on get 0.
__global__ void gather_gradients(SegmentTable t, int64_t tokens, int64_t first_column, int64_t columns, int64_t ld,
                                 bf16* dz) {
  const int64_t groups = ld / 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < tokens * groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / groups, at_dz = (i % groups) * 8, first = first_column + at_dz;
    int s = segment_from(t, 0, first);
    // The whole group inside one bf16 segment at a 16-byte aligned address (segment widths
    // and gradient strides multiples of 8, as in every layer of issue 6): one 16-byte copy.
    // The element loop below left the gather at about a third of the copy rate.
    const int64_t vector_at = row * t.gradient_stride[s] + first - t.offset[s];
    if (t.vector[s] && first + 8 <= (s + 1 < t.count ? t.offset[s + 1] : columns)) {
      *reinterpret_cast<uint4*>(dz + row * ld + at_dz) =
          *reinterpret_cast<const uint4*>(static_cast<const bf16*>(t.gradient[s]) + vector_at);
      continue;
    }
    alignas(16) bf16 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t c = first + j;
      s = segment_from(t, s, c);
      const int64_t at = row * t.gradient_stride[s] + c - t.offset[s];
      const float value = c >= columns ? 0.f
                          : t.gradient_f32[s] ? static_cast<const float*>(t.gradient[s])[at]
                                              : __bfloat162float(static_cast<const bf16*>(t.gradient[s])[at]);
      v[j] = __float2bfloat16(value);
    }
    *reinterpret_cast<uint4*>(dz + row * ld + at_dz) = *reinterpret_cast<const uint4*>(v);
  }
}

// sums[c] += Σ over this block's rows of dz[row, c]; blocks of 32 columns × 8 rows.
__global__ void column_sum(const bf16* dz, int64_t ld, int64_t tokens, int64_t columns, float* sums) {
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float sum = 0.f;
  if (c < columns)
    for (int64_t row = blockIdx.y * 8 + threadIdx.y; row < tokens; row += gridDim.y * 8)
      sum += __bfloat162float(dz[row * ld + c]);
  __shared__ float partial[8][33];
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < columns) {
    for (int r = 1; r < 8; ++r) sum += partial[r][threadIdx.x];
    atomicAdd(&sums[c], sum);
  }
}

SegmentTable segment_table(const ProjectionChainProblem& p) {
  SegmentTable t{};
  t.count = static_cast<int>(p.segments.size());
  for (int s = 0; s < t.count; ++s) {
    t.offset[s] = p.segments[s].offset;
    t.code[s] = p.segments[s].code;
    t.scale[s] = p.segments[s].scale;
  }
  return t;
}

// The activation code of every segment over columns [first, last), or −1 where they differ.
int uniform_code(const ProjectionChainProblem& p, int64_t first, int64_t last) {
  int code = -2;
  for (const auto& s : p.segments)
    if (s.offset < last && s.offset + s.width > first) {
      if (code != -2 && code != s.code) return -1;
      code = s.code;
    }
  return code < 0 ? -1 : code;
}

bool has_activation(const ProjectionChainProblem& p) {
  for (const auto& s : p.segments)
    if (s.code != 0) return true;
  return false;
}

// The vectors of a chain without bias depend on its segments only: kept per device and
// segment list, filled once (a synchronous copy outside any stream capture), so that a call
// launches no fill_columns (one kernel and launch gap less per call; the low-rank gate's
// whole forward is two kernels). Entries live as long as the process, one per distinct
// chain. SEQMIX_CHAINS_CACHED_COLUMNS=0 fills them per call, as before.
bool cached_columns_enabled() { return flag_from_environment("SEQMIX_CHAINS_CACHED_COLUMNS", true); }

const float* cached_vectors(const ProjectionChainProblem& p, int64_t padded, cudaStream_t stream) {
  if (p.bias || !cached_columns_enabled()) return nullptr;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::vector<double> key{double(device), double(p.columns)};
  for (const auto& s : p.segments) key.insert(key.end(), {double(s.offset), double(s.width), double(s.code), s.scale});
  static std::mutex mutex;
  static std::map<std::vector<double>, float*> known;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  // A capture may not allocate or copy synchronously: that call fills its own.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capturing), "projection chain: capture status");
  if (capturing != cudaStreamCaptureStatusNone) return nullptr;
  std::vector<float> host(3 * padded, 0.f);  // bias 0; padding columns identity, scale 1
  std::fill(host.begin() + 2 * padded, host.end(), 1.f);
  for (const auto& s : p.segments)
    for (int64_t c = s.offset; c < s.offset + s.width; ++c) {
      host[padded + c] = float(s.code);
      host[2 * padded + c] = s.scale;
    }
  float* data = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&data), host.size() * sizeof(float)), "projection chain: column vectors");
  check(cudaMemcpy(data, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
        "projection chain: column vectors");
  known.emplace(std::move(key), data);
  return data;
}

// The epilogue's per-column vectors, padded to a multiple of 8 columns so that a sub-range
// starting at a multiple of 8 is 16-byte aligned: the kept ones, or scratch filled per call.
class ColumnVectors {
 public:
  ColumnVectors(const ProjectionChainProblem& p, cudaStream_t stream)
      : padded_(round_up(p.columns, 8)), data_(cached_vectors(p, padded_, stream)) {
    if (data_) return;
    scratch_.emplace(3 * padded_, stream);
    data_ = scratch_->get();
    fill_columns<<<grid_for(padded_, 256), 256, 0, stream>>>(segment_table(p), static_cast<const bf16*>(p.bias),
                                                             p.columns, padded_, scratch_->get(),
                                                             scratch_->get() + padded_, scratch_->get() + 2 * padded_);
    check_launch("projection chain: fill_columns");
  }
  ColumnEpilogue from(int64_t column) const {
    return {data_ + column, data_ + padded_ + column, data_ + 2 * padded_ + column};
  }

 private:
  int64_t padded_;
  const float* data_;
  std::optional<Scratch<float>> scratch_;
};

const bf16* element(Rows m, int64_t row, int64_t column) {
  return static_cast<const bf16*>(m.data) + row * m.stride + column;
}

// A bf16 run without bias whose activation columns are a small part of it (Gated DeltaNet:
// 32 gate columns of 12320): the plain GEMM over the identity columns and the gates apart,
// each piece widened to multiples of 8 columns (the run starts at one and spans a multiple
// of 8; identity columns inside an activation piece get factor 1). The activation GEMM's
// tree over the whole run cost 1.13× the plain GEMM at 32768 tokens, the split 0.99× (H100,
// NOTES.md "Gated DeltaNet's forward"). Up to kNarrowColumnsMaxTokens a gate piece the
// narrow-column kernel takes runs there; one that needs the activation GEMM is split off
// only above kSplitMinTokens (below, its own full-depth GEMM, 35–55 µs, cost as much as the
// tree).
// Runs that are mostly activations stay one activation GEMM.
constexpr int64_t kSplitMinTokens = 16384;

// The activation column ranges of `run`, widened to multiples of 8 and merged.
std::vector<std::pair<int64_t, int64_t>> activation_pieces(const ProjectionChainProblem& p, const OutputRun& run) {
  const int64_t end = run.first + run.width;
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (const auto& s : p.segments) {
    const int64_t a = std::max(s.offset, run.first), b = std::min(s.offset + s.width, end);
    if (s.code == 0 || a >= b) continue;
    const int64_t first = a / 8 * 8, last = std::min(round_up(b, 8), end);
    if (!pieces.empty() && first <= pieces.back().second) pieces.back().second = std::max(pieces.back().second, last);
    else pieces.emplace_back(first, last);
  }
  return pieces;
}

// The most tokens the narrow-column kernel runs for: at 32768 tokens (H100, Gated
// DeltaNet's 32 gates) it took 75-100 µs against the activation GEMM's 82-87 µs, and the
// chain with it was not faster (NOTES.md, "Narrow columns"); at 2048 and 8192 tokens it
// took 13 / 22-27 µs against 35 / 39-40 µs.
constexpr int64_t kNarrowColumnsMaxTokens = 16384;

// Whether the narrow-column kernel takes columns [first, last) of the weight over x.
bool narrow_fits(const ProjectionChainProblem& p, int64_t first, int64_t last) {
  return narrow_columns_enabled() && p.tokens <= kNarrowColumnsMaxTokens &&
         narrow_columns_fit(last - first, p.d, p.x, Rows{element(p.weight, first, 0), p.weight.stride});
}

bool worth_splitting(const ProjectionChainProblem& p, const OutputRun& run) {
  if (p.bias) return false;
  const auto pieces = activation_pieces(p, run);
  int64_t activation_columns = 0;
  bool all_narrow = true;
  for (const auto& [a, b] : pieces) {
    activation_columns += b - a;
    all_narrow = all_narrow && narrow_fits(p, a, b);
  }
  if (4 * activation_columns > run.width) return false;
  return p.tokens > kSplitMinTokens || all_narrow;
}

// A bf16 run without bias whose activation columns (widened to multiples of 8) are at most a
// quarter of it, with SEQMIX_CHAINS_GATES_IN_GEMM=1: the plain GEMM over the whole run, then
// activate_columns over the activation pieces. At Gated DeltaNet's width 32 gate columns
// add one 128-wide column tile to the GEMM, which at 2048 and 8192 tokens costs no extra
// round of tiles on 132 SMs (776 tiles against 768, both 6 rounds at 2048 tokens).
bool gates_in_plain_gemm(const ProjectionChainProblem& p, const OutputRun& run) {
  if (p.bias || run.f32 || !gates_in_plain_gemm_enabled()) return false;
  int64_t activation_columns = 0;
  for (const auto& [a, b] : activation_pieces(p, run)) activation_columns += b - a;
  return activation_columns > 0 && 4 * activation_columns <= run.width;
}

void plain_gemm_then_activate(const ProjectionChainProblem& p, const OutputRun& run, const ColumnVectors& vectors) {
  gemm_nt_bf16(p.tokens, run.width, p.d, p.x, Rows{element(p.weight, run.first, 0), p.weight.stride}, run.out,
               p.stream);
  for (const auto& [a, b] : activation_pieces(p, run))
    activate_columns_bf16(p.tokens, b - a,
                          MutableRows{static_cast<bf16*>(run.out.data) + (a - run.first), run.out.stride},
                          vectors.from(a), p.stream);
}

void split_at_activations(const ProjectionChainProblem& p, const OutputRun& run, const ColumnVectors& vectors) {
  const auto gemm = [&](int64_t first, int64_t last, bool activation) {
    if (first >= last) return;
    const Rows weight{element(p.weight, first, 0), p.weight.stride};
    const MutableRows out{static_cast<bf16*>(run.out.data) + (first - run.first), run.out.stride};
    if (!activation) gemm_nt_bf16(p.tokens, last - first, p.d, p.x, weight, out, p.stream);
    else if (narrow_fits(p, first, last))
      narrow_columns_bf16(p.tokens, last - first, p.d, p.x, weight, out, vectors.from(first), p.stream);
    else activation_gemm_bf16(p.tokens, last - first, p.d, p.x, weight, out, vectors.from(first), p.stream);
  };
  int64_t at = run.first;
  for (const auto& [a, b] : activation_pieces(p, run)) {
    gemm(at, a, false);
    gemm(a, b, true);
    at = b;
  }
  gemm(at, run.first + run.width, false);
}

// ---- the backward ----

// The segments' gradients as gather_gradients reads them.
SegmentTable gradient_table(const ProjectionChainProblem& p, const ProjectionChainGradients& g) {
  SegmentTable table = segment_table(p);
  for (int s = 0; s < table.count; ++s) {
    table.gradient[s] = g.d_outputs[s].data;
    table.gradient_stride[s] = g.d_outputs[s].stride;
    table.gradient_f32[s] = g.d_outputs[s].f32;
    table.vector[s] = !g.d_outputs[s].f32 && table.offset[s] % 8 == 0 && g.d_outputs[s].stride % 8 == 0 &&
                      reinterpret_cast<uintptr_t>(g.d_outputs[s].data) % 16 == 0;
  }
  return table;
}

// dz ⊙= act'(z) over each run of consecutive non-identity segments that starts in columns
// [first_column, end_column), dz holding those columns from first_column on (ld elements a
// row), z recomputed over the run's columns only. A run is widened to multiples of 8 columns
// (16-byte TMA bases, widths the GEMM accepts); the identity columns it takes in keep dz
// (factor 1).
void apply_derivatives(const ProjectionChainProblem& p, const ColumnVectors& vectors, int64_t first_column,
                       int64_t end_column, bf16* dz, int64_t ld) {
  for (size_t s = 0; s < p.segments.size();) {
    if (p.segments[s].code == 0 || p.segments[s].offset < first_column || p.segments[s].offset >= end_column) {
      ++s;
      continue;
    }
    size_t end = s;
    while (end < p.segments.size() && p.segments[end].code != 0) ++end;
    const int64_t first = p.segments[s].offset / 8 * 8;
    const int64_t last =
        std::min(round_up(p.segments[end - 1].offset + p.segments[end - 1].width, 8), first_column + ld);
    const Rows dy{dz + (first - first_column), ld}, weight{element(p.weight, first, 0), p.weight.stride};
    const MutableRows dz_run{dz + (first - first_column), ld};
    // Narrow K: the recompute on the tensor cores without a GEMM pipeline (NOTES.md, "Narrow K").
    // Few columns over a deep K (Gated DeltaNet's gates): the narrow-column kernel.
    if (p.d <= kNarrowProjectionMaxK)
      narrow_derivative_bf16(p.tokens, last - first, p.d, p.x, weight, dz_run, vectors.from(first), p.stream);
    else if (narrow_fits(p, first, last))
      narrow_columns_derivative_bf16(p.tokens, last - first, p.d, p.x, weight, dz_run, vectors.from(first),
                                     p.stream);
    else derivative_gemm_bf16(p.tokens, last - first, p.d, p.x, weight, dy, dz_run, vectors.from(first), p.stream);
    s = end;
  }
}

// dbias: f32 column sums of dz, added piece by piece, then written as bf16.
class BiasSums {
 public:
  BiasSums(int64_t columns, cudaStream_t stream) : columns_(columns), sums_(columns, stream) {
    check(cudaMemsetAsync(sums_.get(), 0, columns * sizeof(float), stream), "projection chain: dbias");
  }
  // Columns [first_column, first_column + width) from dz (its column 0 is first_column).
  void add(Rows dz, int64_t first_column, int64_t width, int64_t tokens, cudaStream_t stream) const {
    const dim3 grid(static_cast<unsigned>((width + 31) / 32),
                    static_cast<unsigned>(std::clamp<int64_t>((tokens + 255) / 256, 1, 64)));
    column_sum<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const bf16*>(dz.data), dz.stride, tokens, width,
                                                  sums_.get() + first_column);
    check_launch("projection chain: dbias");
  }
  void write(void* dbias, cudaStream_t stream) const {
    to_bf16<<<grid_for(columns_, 256), 256, 0, stream>>>(sums_.get(), columns_, static_cast<bf16*>(dbias));
    check_launch("projection chain: dbias");
  }

 private:
  int64_t columns_;
  Scratch<float> sums_;
};

bool backward_pieces_enabled() { return flag_from_environment("SEQMIX_CHAINS_BACKWARD_PIECES", true); }

// The gradient GEMMs' operand dz in pieces (NOTES.md, "The backward without the gather"):
// an identity segment whose bf16 gradient TMA can read (16-byte base and stride) and whose
// first column is a multiple of kPieceAlignment is a piece of its own, read where autograd
// left it; every other segment joins the gathered piece before it, or starts one at such a
// column. None when a piece would have to start elsewhere or there are over kMaxPieces.
struct PiecePlan {
  RowPieces pieces;
  bool gathered[kMaxPieces] = {};
};

std::optional<PiecePlan> plan_pieces(const ProjectionChainProblem& p, const ProjectionChainGradients& g) {
  PiecePlan plan;
  RowPieces& r = plan.pieces;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentGradient& gradient = g.d_outputs[s];
    const bool aligned = p.segments[s].offset % kPieceAlignment == 0;
    const bool direct = aligned && p.segments[s].code == 0 && !gradient.f32 && gradient.stride % 8 == 0 &&
                        reinterpret_cast<uintptr_t>(gradient.data) % 16 == 0;
    if (!direct && r.count > 0 && plan.gathered[r.count - 1]) continue;
    if (!aligned || r.count == kMaxPieces) return std::nullopt;
    r.piece[r.count] = direct ? Rows{gradient.data, gradient.stride} : Rows{};
    r.first[r.count] = p.segments[s].offset;
    plan.gathered[r.count++] = !direct;
  }
  r.first[r.count] = p.columns;
  return plan;
}

// The backward with dz in pieces: the gathered pieces copied into scratch and their
// activations' derivatives applied there, dbias from every piece, then the two GEMMs reading
// the pieces where they are.
void backward_in_pieces(const ProjectionChainProblem& p, const ProjectionChainGradients& g, PiecePlan plan) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  RowPieces& r = plan.pieces;
  int64_t gathered_elements = 0;
  for (int q = 0; q < r.count; ++q)
    if (plan.gathered[q]) gathered_elements += p.tokens * round_up(r.first[q + 1] - r.first[q], 8);
  const Scratch<bf16> gathered(gathered_elements, stream);
  std::optional<ColumnVectors> vectors;
  if (has_activation(p)) vectors.emplace(p, stream);
  const SegmentTable table = gradient_table(p, g);
  bf16* next = gathered.get();
  for (int q = 0; q < r.count; ++q) {
    if (!plan.gathered[q]) continue;
    const int64_t ld = round_up(r.first[q + 1] - r.first[q], 8);
    gather_gradients<<<grid_for(p.tokens * (ld / 8), 256), 256, 0, stream>>>(table, p.tokens, r.first[q],
                                                                           r.first[q + 1], ld, next);
    check_launch("projection chain: gather_gradients");
    if (vectors) apply_derivatives(p, *vectors, r.first[q], r.first[q + 1], next, ld);
    r.piece[q] = Rows{next, ld};
    next += p.tokens * ld;
  }
  if (g.dbias) {
    const BiasSums sums(p.columns, stream);
    for (int q = 0; q < r.count; ++q) sums.add(r.piece[q], r.first[q], r.first[q + 1] - r.first[q], p.tokens, stream);
    sums.write(g.dbias, stream);
  }
  gemm_nn_bf16_pieces(p.tokens, p.d, p.columns, r, p.weight, g.dx, p.stream);
  gemm_tn_bf16_pieces(p.columns, p.d, p.tokens, r, p.x, g.dweight, p.stream);
}

}  // namespace
}  // namespace seqmix::cuda::chains

namespace seqmix::cuda {

void projection_chain_forward(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs) {
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // Nothing to apply (identity, no bias): the plain GEMM for bf16 runs, no tree, nothing
  // filled; an f32 run takes the activation GEMM with null vectors (its only f32 output).
  const bool plain = !p.bias && !chains::has_activation(p);
  std::optional<chains::ColumnVectors> vectors;
  if (!plain) vectors.emplace(p, stream);
  for (const OutputRun& run : runs) {
    const Rows weight{chains::element(p.weight, run.first, 0), p.weight.stride};
    ColumnEpilogue columns = plain ? ColumnEpilogue{} : vectors->from(run.first);
    // Narrow K (GLA's rank-16 gate): the CUDA-core kernel; a GEMM tile's mainloop costs far
    // more than the output writes there (NOTES.md, "Narrow K").
    if (p.d <= kNarrowProjectionMaxK) {
      columns.uniform_code = chains::uniform_code(p, run.first, run.first + run.width);
      if (run.f32)
        narrow_projection_f32out(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream, p.after_chain_gemm);
      else narrow_projection_bf16(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream, p.after_chain_gemm);
    } else if (run.f32) {
      // A few f32 gate columns (seqmix.nn's Gated DeltaNet decay input): the narrow-column kernel.
      if (chains::narrow_fits(p, run.first, run.first + run.width))
        narrow_columns_f32out(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream);
      else activation_gemm_bf16_f32out(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream);
    } else if (plain) gemm_nt_bf16(p.tokens, run.width, p.d, p.x, weight, run.out, p.stream);
    else if (chains::gates_in_plain_gemm(p, run)) chains::plain_gemm_then_activate(p, run, *vectors);
    else if (chains::worth_splitting(p, run)) chains::split_at_activations(p, run, *vectors);
    else if (chains::narrow_fits(p, run.first, run.first + run.width))
      narrow_columns_bf16(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream);
    else activation_gemm_bf16(p.tokens, run.width, p.d, p.x, weight, run.out, columns, p.stream);
  }
}

void projection_chain_backward(const ProjectionChainProblem& p, const ProjectionChainGradients& g) {
  using chains::bf16;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // Narrow K ≤ 16 (GLA's rank-16 gate) with one bf16 segment, when selected: the one-pass
  // backward straight from the segment's gradient, no gather (NOTES.md, "Narrow K: one pass";
  // measured slower, so off by default).
  const SegmentGradient& first_gradient = g.d_outputs.front();
  const Rows dy_direct{first_gradient.data, first_gradient.stride};
  if (p.segments.size() == 1 && !first_gradient.f32 && narrow_fused_backward_enabled() &&
      narrow_fused_backward_fits(p.d, dy_direct)) {
    std::optional<chains::ColumnVectors> vectors;
    if (p.bias || chains::has_activation(p)) vectors.emplace(p, stream);
    narrow_fused_backward_bf16(p.tokens, p.columns, p.d, p.x, p.weight, dy_direct,
                               vectors ? vectors->from(0) : ColumnEpilogue{}, g.dx, g.dweight, g.dbias, p.stream);
    return;
  }
  if (p.d > kNarrowProjectionMaxK && chains::backward_pieces_enabled())
    if (const auto plan = chains::plan_pieces(p, g)) return chains::backward_in_pieces(p, g, *plan);

  const int64_t ld = chains::round_up(p.columns, 8);
  const chains::Scratch<bf16> dz(p.tokens * ld, stream);
  chains::gather_gradients<<<chains::grid_for(p.tokens * (ld / 8), 256), 256, 0, stream>>>(
      chains::gradient_table(p, g), p.tokens, 0, p.columns, ld, dz.get());
  check_launch("projection chain: gather_gradients");
  // Narrow K ≤ 16 with several segments, when selected: the one-pass backward from the
  // gathered gradient.
  if (narrow_fused_backward_enabled() && narrow_fused_backward_fits(p.d, Rows{dz.get(), ld})) {
    std::optional<chains::ColumnVectors> vectors;
    if (p.bias || chains::has_activation(p)) vectors.emplace(p, stream);
    narrow_fused_backward_bf16(p.tokens, p.columns, p.d, p.x, p.weight, Rows{dz.get(), ld},
                               vectors ? vectors->from(0) : ColumnEpilogue{}, g.dx, g.dweight, g.dbias, p.stream);
    return;
  }
  if (chains::has_activation(p))
    chains::apply_derivatives(p, chains::ColumnVectors(p, stream), 0, p.columns, dz.get(), ld);
  if (g.dbias) {
    const chains::BiasSums sums(p.columns, stream);
    sums.add(Rows{dz.get(), ld}, 0, p.columns, p.tokens, stream);
    sums.write(g.dbias, stream);
  }
  if (p.d <= kNarrowProjectionMaxK) {
    narrow_gradients_bf16(p.tokens, p.columns, p.d, p.x, p.weight, Rows{dz.get(), ld}, g.dx, g.dweight, p.stream);
    return;
  }
  gemm_nn_bf16(p.tokens, p.d, p.columns, Rows{dz.get(), ld}, p.weight, g.dx, p.stream);
  gemm_tn_bf16(p.columns, p.d, p.tokens, Rows{dz.get(), ld}, p.x, g.dweight, p.stream);
}

}  // namespace seqmix::cuda
