// GLA's chain with its low-rank gate beside the main GEMM (gate_beside.hpp; NOTES.md, "The
// low-rank gate beside the GEMM"). One side kernel, one block of 16 warps a SM on a few SMs,
// does per 16-row tile:
//   u = x·W_codeᵀ (rank ≤ 16 columns over K = d): the tile of x arrives in shared memory by
//     cp.async into one of two buffers, fetched during the previous tile; the warps split K in
//     32-deep chunks with the k permutation of narrow_columns.cuh, W_code staged once per
//     block in shared memory in fragment order; the partials are summed once through shared
//     memory, in warp order;
//   u is rounded to bf16 (what the two-call path reads back), written by one warp, and the
//     summed tile is already the A fragment of the gate's single m16n8k16 step;
//   gate = logsigmoid(u·W_gateᵀ + b)·scale: each warp owns two 32-column slabs of the gate
//     (their B fragments in registers for the whole walk), the epilogue is the narrow-K
//     kernel's (narrow_projection.cuh: finish, 16-byte row stores).
// The main GEMM is launched first on the caller's stream with its persistent grid on the
// other SMs; the side kernel on a stream forked from it by an event, joined back by another,
// so a CUDA-graph capture records two branches.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "cuda/chains/gate_beside.hpp"
#include "cuda/chains/gemm_tiles.hpp"
#include "cuda/chains/narrow_columns.cuh"
#include "cuda/common/environment.hpp"

namespace seqmix::cuda {

namespace gate_beside {

using narrow::bf16;
using narrow_columns::word;

constexpr int kWarps = 16, kThreads = 32 * kWarps;
constexpr int kChunk = 32;          // k per warp step: 4 lanes × 8
constexpr int kGateSlabs = 2;       // 32-column gate slabs a warp holds
constexpr int64_t kMaxRank = 16;    // one m16n8k16 step for the gate, two n8 tiles for u
constexpr int64_t kMaxGateWidth = int64_t(kWarps) * kGateSlabs * narrow::kSlabColumns;  // 1024
constexpr int64_t kMaxD = 2048;     // W_code's fragments and two x tiles in shared memory
constexpr int kRowPad = 32;         // bf16 after each x row: the two rows of an 8-lane phase in other banks

struct Args {
  int64_t M, d, rank, width;
  Rows x, code_weight;  // x [M, d], code_weight [rank, d]
  MutableRows code;     // u [M, rank] bf16
  Rows gate_weight;     // [width, rank]
  const bf16* gate_bias;
  float scale;
  MutableRows gate;  // [M, width]
};

// Shared memory, in bytes: W_code's fragments [chunk][n8 tile][lane] (lane (g, t) holds row
// 8·tile + g at k = 32·chunk + 8t..8t+7, 16 bytes); two x tiles [16][d + kRowPad]; the
// warps' partial u tiles [warp][value][lane] and the summed one [value][lane] (f32).
struct Layout {
  int64_t chunks, x_row, fragments, x, partial, u, bytes;
  __host__ __device__ explicit Layout(int64_t d) {
    chunks = (d + kChunk - 1) / kChunk;
    x_row = d + kRowPad;
    fragments = 0;
    x = chunks * 64 * 16;
    partial = x + 2 * 16 * x_row * 2;
    u = partial + int64_t(kWarps) * 8 * 32 * 4;
    bytes = u + 8 * 32 * 4;
  }
};

// log σ(z)·scale in ~10 instructions and 2 MUFU operations: the hardware ex2 and lg2 with
// denormals flushed (without .ftz each takes a range fix-up of ~3 instructions; here e
// underflows to 0 only for |z| > 87, where log1p(e) is 0 anyway), log1p(e) by three series
// terms below 2⁻⁷ as narrow::log1p_unit, the scale folded into both branches. The gate's
// epilogue was ~21 instructions an output with narrow::finish (SASS), the kernel issue bound.
struct LogSigmoid {
  float scale, half_scale, third_scale, ln2_scale;
  __device__ explicit LogSigmoid(float s) : scale(s), half_scale(0.5f * s), third_scale(s / 3.f),
                                            ln2_scale(0.69314718f * s) {}
  __device__ __forceinline__ float operator()(float z) const {
    const float e = narrow::ex2_fast(fabsf(z) * -1.44269504f), lg = narrow::lg2_fast(1.f + e);
    const float series = e * (scale - e * (half_scale - e * third_scale));
    return fminf(z, 0.f) * scale - (e < 0.0078125f ? series : lg * ln2_scale);
  }
};

__device__ __forceinline__ void copy_16(void* shared, const void* global, bool inside) {
  const auto to = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global), "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void copies_committed() { asm volatile("cp.async.commit_group;\n" ::); }
// All but the latest commit group arrived.
__device__ __forceinline__ void copies_arrived_but_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// This thread's 16-byte pieces of a 16-row x tile: the first (row, 8-column group) and the
// step between its pieces, divided once (a 64-bit division per piece cost as much issue
// time as the gate's epilogue).
struct Pieces {
  int row, group, row_step, group_step, groups;
  __device__ explicit Pieces(int64_t d) {
    groups = static_cast<int>(d / 8);
    row = threadIdx.x / groups, group = threadIdx.x % groups;
    row_step = kThreads / groups, group_step = kThreads % groups;
  }
};

// The 16 rows of x from row0 into shared memory (rows past M zero-filled), asynchronously,
// as one commit group.
__device__ __forceinline__ void fetch_x(bf16* x_shared, const Args& a, int64_t row0, int64_t x_row, Pieces p) {
  const auto* xg = static_cast<const bf16*>(a.x.data);
  if (p.group_step == 0 && row0 + 16 <= a.M) {  // whole rows a step (d a divisor of 8·512), no row past M
    const bf16* from = xg + (row0 + p.row) * a.x.stride + p.group * 8;
    bf16* to = x_shared + p.row * x_row + p.group * 8;
    const int64_t from_step = p.row_step * a.x.stride, to_step = p.row_step * x_row;
    for (int r = p.row; r < 16; r += p.row_step, from += from_step, to += to_step) copy_16(to, from, true);
    return;
  }
  while (p.row < 16) {
    const int64_t row = row0 + p.row, k = int64_t(p.group) * 8;
    copy_16(x_shared + p.row * x_row + k, xg + std::min(row, a.M - 1) * a.x.stride + k, row < a.M);
    p.row += p.row_step, p.group += p.group_step;
    if (p.group >= p.groups) p.group -= p.groups, ++p.row;
  }
}

// One block a SM, 16 warps. Per 16-row tile: the next tile's x is fetched into the other
// buffer, this tile's (fetched during the previous tile) is waited for, the warps split K
// for u, the partials are summed once, then each warp writes its two gate slabs.
template <class Out>
__global__ void __launch_bounds__(kThreads, 1) code_and_gate(Args a) {
  extern __shared__ uint4 shared[];
  const Layout layout(a.d);
  char* base = reinterpret_cast<char*>(shared);
  const uint4* code_fragments = reinterpret_cast<const uint4*>(base + layout.fragments);
  bf16* x_buffers = reinterpret_cast<bf16*>(base + layout.x);
  const Pieces pieces(a.d);
  auto* partial = reinterpret_cast<float(*)[8][32]>(base + layout.partial);
  auto* u_shared = reinterpret_cast<float(*)[32]>(base + layout.u);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t tiles = (a.M + 15) / 16;
  if (int64_t(blockIdx.x) < tiles) fetch_x(x_buffers, a, int64_t(blockIdx.x) * 16, layout.x_row, pieces);
  copies_committed();

  const auto* wc = static_cast<const bf16*>(a.code_weight.data);
  auto* fragments = reinterpret_cast<uint4*>(base + layout.fragments);
  for (int64_t i = threadIdx.x; i < layout.chunks * 64; i += kThreads) {
    const int64_t c = i / 64, row = 8 * ((i / 32) % 2) + (i % 32) / 4, k = c * kChunk + 8 * (i % 4);
    fragments[i] = row < a.rank && k < a.d ? __ldg(reinterpret_cast<const uint4*>(wc + row * a.code_weight.stride + k))
                                           : zero;
  }
  // This warp's gate slabs: B fragments (k16 × n8, as the narrow-K kernel deals the columns),
  // and the bias of the lane's 8 columns of each, the products' starting value.
  const auto* wg = static_cast<const bf16*>(a.gate_weight.data);
  uint32_t b[kGateSlabs][4][2];
  float bias[kGateSlabs][narrow::kColumnsPerLane];
#pragma unroll
  for (int s = 0; s < kGateSlabs; ++s) {
    const int64_t slab = int64_t(warp + kWarps * s) * narrow::kSlabColumns;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int64_t column = slab + narrow::slab_column(n, g);
      b[s][n][0] = narrow::pair(wg, a.gate_weight.stride, column, a.width, 2 * t, static_cast<int>(a.rank));
      b[s][n][1] = narrow::pair(wg, a.gate_weight.stride, column, a.width, 2 * t + 8, static_cast<int>(a.rank));
    }
    const int64_t first = slab + t * narrow::kColumnsPerLane;
#pragma unroll
    for (int j = 0; j < narrow::kColumnsPerLane; ++j)
      bias[s][j] = a.gate_bias && first + j < a.width ? __bfloat162float(a.gate_bias[first + j]) : 0.f;
  }
  const LogSigmoid log_sigmoid(a.scale);

  int buffer = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x, buffer ^= 1) {
    const int64_t row0 = tile * 16;
    // The other buffer was last read before the previous tile's second barrier.
    if (tile + gridDim.x < tiles)
      fetch_x(x_buffers + (buffer ^ 1) * 16 * layout.x_row, a, (tile + gridDim.x) * 16, layout.x_row, pieces);
    copies_committed();  // possibly empty: one group a tile
    copies_arrived_but_one();
    __syncthreads();  // x of this tile (and, the first time, the fragments) visible
    const bf16* x_shared = x_buffers + buffer * 16 * layout.x_row;
    // u's partial over this warp's chunks: warp, warp + 16, ...; lane (g, t) reads rows g and
    // g + 8 at its 8 k of each chunk, the same k permutation as the fragments.
    float acc[2][4] = {};
    for (int64_t c = warp; c < layout.chunks; c += kWarps) {
      const int64_t k = c * kChunk + 8 * t;
      const bool inside = k < a.d;
      const uint4 x0 = inside ? *reinterpret_cast<const uint4*>(x_shared + g * layout.x_row + k) : zero;
      const uint4 x1 = inside ? *reinterpret_cast<const uint4*>(x_shared + (g + 8) * layout.x_row + k) : zero;
      const uint4 w0 = code_fragments[(c * 2) * 32 + lane], w1 = code_fragments[(c * 2 + 1) * 32 + lane];
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        const uint32_t x4[4] = {word(x0, 2 * step), word(x1, 2 * step), word(x0, 2 * step + 1), word(x1, 2 * step + 1)};
        narrow::mma_bf16(acc[0], x4, word(w0, 2 * step), word(w0, 2 * step + 1));
        narrow::mma_bf16(acc[1], x4, word(w1, 2 * step), word(w1, 2 * step + 1));
      }
    }
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][n * 4 + e][lane] = acc[n][e];
    __syncthreads();  // partials visible; every read of this x tile done
    if (threadIdx.x < 8 * 32) {  // the warps' partials summed once, in warp order
      const int value = threadIdx.x / 32;
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += partial[w][value][lane];
      u_shared[value][lane] = sum;
    }
    __syncthreads();
    // The u tile rounded to bf16. The C layout of the two n8 tiles (rows g, g + 8; columns
    // 2t, 2t + 1 of each) is the A layout of one m16n8k16 step over k = the code's columns.
    __nv_bfloat162 pairs[4];
    uint32_t gate_a[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      pairs[i] = __floats2bfloat162_rn(u_shared[(i / 2) * 4 + 2 * (i % 2)][lane],
                                       u_shared[(i / 2) * 4 + 2 * (i % 2) + 1][lane]);
      gate_a[i] = *reinterpret_cast<const uint32_t*>(&pairs[i]);
    }
    if (warp == kWarps - 1) {  // u: rows g, g + 8; columns 8n + 2t, 8n + 2t + 1
      auto* out = static_cast<bf16*>(a.code.data);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row0 + g + 8 * (i % 2), column = 8 * (i / 2) + 2 * t;
        if (row >= a.M) continue;
        if (column < a.rank) out[row * a.code.stride + column] = pairs[i].x;
        if (column + 1 < a.rank) out[row * a.code.stride + column + 1] = pairs[i].y;
      }
    }
    auto* gate_out = static_cast<Out*>(a.gate.data);
#pragma unroll
    for (int s = 0; s < kGateSlabs; ++s) {
      const int64_t slab = int64_t(warp + kWarps * s) * narrow::kSlabColumns;
      if (slab >= a.width) break;
      // Accumulator (n, e) is column 2n + e % 2 of the lane's 8 (rows g, g + 8 by e / 2).
      float z_acc[4][4];
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) z_acc[n][e] = bias[s][2 * n + e % 2];
        narrow::mma_bf16(z_acc[n], gate_a, b[s][n][0], b[s][n][1]);
      }
      const int64_t first = slab + t * narrow::kColumnsPerLane;
      const int valid = static_cast<int>(std::clamp<int64_t>(a.width - first, 0, narrow::kColumnsPerLane));
      if (valid == 0) continue;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = row0 + g + 8 * half;
        if (row >= a.M) break;
        float v[narrow::kColumnsPerLane];
#pragma unroll
        for (int j = 0; j < narrow::kColumnsPerLane; ++j) v[j] = log_sigmoid(z_acc[j / 2][2 * half + j % 2]);
        narrow::store_row(gate_out + row * a.gate.stride + first, v, valid);
      }
    }
  }
}

// Side kernel blocks: one a SM on `sms` SMs.
template <class Out>
void launch(const Args& args, int sms, cudaStream_t stream) {
  static const bool configured = [] {
    check(cudaFuncSetAttribute(code_and_gate<Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(Layout(kMaxD).bytes)),
          "low-rank gate beside the GEMM: shared memory");
    return true;
  }();
  (void)configured;
  const int64_t tiles = (args.M + 15) / 16;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(tiles, sms));
  code_and_gate<Out><<<blocks, kThreads, Layout(args.d).bytes, stream>>>(args);
  check_launch("projection chain: low-rank gate beside the GEMM");
}

// One non-blocking stream per device for the side branch, created on first use.
cudaStream_t side_stream() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::array<cudaStream_t, 64> streams{};
  const std::lock_guard<std::mutex> lock(mutex);
  if (device >= static_cast<int>(streams.size())) throw Error("seqmix: chain side stream: device index above 63");
  if (!streams[device]) check(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking), "chain side stream");
  return streams[device];
}

}  // namespace gate_beside

void gate_side_kernel(const ProjectionChainProblem& p, MutableRows chain_out, size_t code,
                      const LowRankGateProblem& gate, int sms, void* stream) {
  using namespace gate_beside;
  const int64_t rank = p.segments[code].width, first = p.segments[code].offset;
  if (code + 1 != p.segments.size() || rank > kMaxRank || gate.rank != rank || gate.width > kMaxGateWidth ||
      p.d > kMaxD || p.d % 8 != 0)
    throw Error("seqmix: low-rank gate beside the GEMM: a shape its kernel does not take");
  const Args args{p.tokens,
                  p.d,
                  rank,
                  gate.width,
                  p.x,
                  Rows{static_cast<const bf16*>(p.weight.data) + first * p.weight.stride, p.weight.stride},
                  MutableRows{static_cast<bf16*>(chain_out.data) + first, chain_out.stride},
                  gate.weight,
                  static_cast<const bf16*>(gate.bias),
                  gate.scale,
                  gate.out};
  if (gate.f32) launch<float>(args, sms, static_cast<cudaStream_t>(stream));
  else launch<bf16>(args, sms, static_cast<cudaStream_t>(stream));
}

int gate_beside_sms() {
  const char* value = std::getenv("SEQMIX_CHAINS_GATE_SMS");
  const int sms = value ? std::atoi(value) : 4;
  return sms > 0 ? sms : 4;
}

bool projection_chain_with_gate_beside(const ProjectionChainProblem& p, const std::vector<OutputRun>& runs,
                                       size_t code, const LowRankGateProblem& gate) {
  using namespace gate_beside;
  // Off by default: measured slower than the two calls at every size on the H100 (NOTES.md).
  if (!flag_from_environment("SEQMIX_CHAINS_GATE_BESIDE", false)) return false;
  if (runs.size() != 1 || runs[0].f32 || runs[0].first != 0 || runs[0].width != p.columns || p.bias) return false;
  for (const SegmentColumns& s : p.segments)
    if (s.code != 0) return false;
  const int64_t rank = p.segments[code].width, main = p.columns - rank;
  if (code + 1 != p.segments.size() || rank > kMaxRank || gate.rank != rank || main < 8 || main % 8 != 0 ||
      gate.width > kMaxGateWidth || p.d > kMaxD || p.d % 8 != 0)
    return false;
  // The forward's schedule for the main columns, in the one tile built for fewer SMs (above
  // 16k tokens the dispatch may take 128 × 256, which makes as many tiles of 6144 columns).
  GemmSchedule schedule = forward_schedule(p.tokens, main, p.d);
  if (schedule.tile != GemmTile::cooperative_256x128_cluster2x1)
    schedule = {GemmTile::cooperative_256x128_cluster2x1, Raster::along_n, 1};
  // The GEMM's SMs: the rest after the side kernel's, even (clusters of 2); only where that
  // costs no round of tiles against the whole width on every SM (the two-call path's GEMM).
  const int sms = multiprocessor_count(), side = gate_beside_sms(), gemm_sms = (sms - side) / 2 * 2;
  if (gemm_sms < 2 ||
      schedule_rounds(schedule, p.tokens, main, gemm_sms) >
          schedule_rounds(forward_schedule(p.tokens, p.columns, p.d), p.tokens, p.columns, sms))
    return false;

  const auto stream = static_cast<cudaStream_t>(p.stream);
  const cudaStream_t side_stream = gate_beside::side_stream();
  cudaEvent_t fork = nullptr, join = nullptr;
  check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "low-rank gate beside the GEMM: event");
  check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), "low-rank gate beside the GEMM: event");
  check(cudaEventRecord(fork, stream), "low-rank gate beside the GEMM: fork");
  check(cudaStreamWaitEvent(side_stream, fork, 0), "low-rank gate beside the GEMM: fork");
  // The GEMM first, so its CTAs (one a SM, the whole register file) are placed before the
  // side blocks, which then find only the SMs the GEMM left.
  gemm_nt_bf16_on_sms(gemm_sms, schedule, p.tokens, main, p.d, p.x, p.weight, runs[0].out, p.stream);
  gate_side_kernel(p, runs[0].out, code, gate, side, side_stream);
  check(cudaEventRecord(join, side_stream), "low-rank gate beside the GEMM: join");
  check(cudaStreamWaitEvent(stream, join, 0), "low-rank gate beside the GEMM: join");
  check(cudaEventDestroy(fork), "low-rank gate beside the GEMM: event");
  check(cudaEventDestroy(join), "low-rank gate beside the GEMM: event");
  return true;
}

}  // namespace seqmix::cuda
