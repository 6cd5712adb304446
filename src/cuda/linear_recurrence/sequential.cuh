// The sequential method: one block per (chain, slice of state columns) walks the T
// steps with the state on chip, while the transitions of the next steps stream into a
// ring of shared-memory stages (cp.async, several steps in flight). Each step is
// out = A·h (or Aᵀ·h for the reverse-time chain of the backward) + b, one barrier.
//
// Threads: 256 = 32 row groups × 8 lanes. Lane q of row group rg owns rows rg + 32·i
// (i < N/32) and the k-chunks q, q+8, ... of every row; the 8 lanes' partial sums are
// reduced with shuffles. The stage keeps A row-major with its 16-byte chunks XOR-swizzled
// by (row / chunk) mod 8, so both the row reads of A·h and the column reads of Aᵀ·h are
// free of bank conflicts.
#pragma once

#include <type_traits>

#include "cuda/linear_recurrence/common.cuh"

namespace seqmix::cuda::linrec {

// One chain walked by a block: step s reads A(s) = A + s·a_step (skipped for s = 0 when
// identity_first), b(s) = b + s·b_step (zero when b is null), and writes the state to
// out + s·out_step (float or the input type) and, after the last step, to `last`.
// Every pointer is offset by group·*_group for group g. A group may be cut into
// `sub_chains` consecutive pieces, one block each (the chunked method re-walks every
// chunk from its start state): piece k of a group is offset by k·sub_* more, walks
// `steps` steps (the last piece `last_steps` when given), and only the last writes `last`.
struct SeqChain {
  const void* A = nullptr;
  int64_t a_step = 0, a_group = 0;
  const void* b = nullptr;
  int64_t b_step = 0, b_group = 0;
  const void* start = nullptr;  // input type (float when start_float), [n, m] per group; null: zeros
  int64_t start_group = 0;
  bool start_float = false;
  void* out = nullptr;
  int64_t out_step = 0, out_group = 0;
  bool out_float = false;
  void* last = nullptr;  // input type, or null
  int64_t last_group = 0;
  int64_t steps = 0;
  bool transposed = false;
  bool identity_first = false;  // step 0 of the first piece applies the identity
  int64_t sub_chains = 1;
  int64_t sub_a = 0, sub_b = 0, sub_out = 0, sub_start = 0;
  int64_t last_steps = 0;
};

// Element `at` of a chain's start state, in its input type T or float (start_float); the
// caller checks that there is one (c.start).
template <class T>
__device__ __forceinline__ float start_element(const SeqChain& c, int64_t at) {
  return c.start_float ? static_cast<const float*>(c.start)[at] : to_float(static_cast<const T*>(c.start)[at]);
}

struct SeqParams {
  SeqChain chains[2];  // blockIdx.y picks one: the backward runs both chains in one launch
  int64_t n = 0, m = 0;
  int col_blocks = 1;  // blocks per group along the state columns
};

// kBlocks blocks share an SM: the ring of stages gets 192 KB / kBlocks. One block (the
// plain sequential method: a few long chains) keeps the most steps in flight; two (the
// chunked method's re-walk: many short sub-chains) let one block's ring fill and last
// steps overlap the other's walk.
template <class T, int N, int MC, int kBlocks = 1, bool kRowReads = false>
struct SeqConfig {
  static_assert(N == 32 || N == 64 || N == 128, "state sizes are padded to 32, 64 or 128");
  static_assert(MC == 1 || MC == 8, "one column (a vector state) or slices of 8");
  static_assert(!kRowReads || MC == 8, "row reads are for slices of 8 columns");
  static constexpr int kRowsPerThread = N / 32;
  static constexpr int kChunkBytes = N * int(sizeof(T)) / 8 < 16 ? N * int(sizeof(T)) / 8 : 16;
  static constexpr int kChunkElems = kChunkBytes / int(sizeof(T));  // V
  static constexpr int kChunksPerRow = N / kChunkElems;              // ≥ 8
  static constexpr int kChunksPerLane = kChunksPerRow / 8;
  static constexpr int kCopiesPerThread = N * kChunksPerRow / kThreads;
  static constexpr int kStageBytes = N * N * int(sizeof(T));
  static constexpr int kStagesRaw = (192 * 1024 / kBlocks) / kStageBytes;
  static constexpr int kStages = kStagesRaw > 16 ? 16 : (kStagesRaw < 2 ? 2 : kStagesRaw);
  static constexpr int kOwned = MC == 8 ? kRowsPerThread : 1;  // outputs a lane writes per step
  static constexpr int kPrefetchB = 4;                         // steps of b loaded ahead
  // Floats of one state buffer: N·MC, or with row reads N/8 blocks of 64 padded to 72.
  static constexpr int kStateFloats = kRowReads ? N / 8 * 72 : N * MC;
  static constexpr int smem_bytes() { return kStages * kStageBytes + 2 * kStateFloats * int(sizeof(float)); }
  static_assert(kChunksPerRow % 8 == 0, "eight lanes share a row");
  static_assert(N * kChunksPerRow % kThreads == 0, "copies spread evenly");
};

// Position of element (row, col) of a transition in a stage (chunk-swizzled).
template <int N, int V>
__device__ __forceinline__ int stage_index(int row, int col) {
  return row * N + (((col / V) ^ ((row / V) & 7)) * V) + col % V;
}

// Position of state element (row, col) in an H buffer. By default rows of MC columns,
// the columns swizzled by the lane that reads row `row` (its chunk index mod 8), each
// read as a scalar. With kRowReads (slices of 8 columns) a lane reads its state rows
// whole, two 16-byte loads a row: row (q + 8j)·V + v, read by lane q, lies in block
// j·V + v at q·8, so the 8 lanes of a row group read 256 contiguous bytes (two
// wavefronts a load, against one a scalar load now: 8 → 4 a row); blocks are padded from
// 64 to 72 floats so that the rows rg..rg+3 a warp writes (consecutive v) land in four
// different groups of 8 banks.
template <int MC, int V, bool kRowReads = false>
__device__ __forceinline__ int state_index(int row, int col) {
  if constexpr (MC == 1) return row;
  else if constexpr (kRowReads) return ((row / V / 8) * V + row % V) * 72 + (row / V % 8) * 8 + col;
  else return row * MC + (col ^ ((row / V) & 7));
}

// V elements of a stage chunk as floats (one vector load).
template <class T, int V>
__device__ __forceinline__ void load_chunk(const T* src, float (&a)[V]) {
  if constexpr (sizeof(T) == 4 && V == 4) {
    const float4 x = *reinterpret_cast<const float4*>(src);
    a[0] = x.x, a[1] = x.y, a[2] = x.z, a[3] = x.w;
  } else if constexpr (sizeof(T) == 2 && V == 8) {
    const uint4 x = *reinterpret_cast<const uint4*>(src);
    const unsigned words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[w]));
      a[2 * w] = f.x, a[2 * w + 1] = f.y;
    }
  } else if constexpr (sizeof(T) == 2 && V == 4) {
    const uint2 x = *reinterpret_cast<const uint2*>(src);
    const unsigned words[2] = {x.x, x.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[w]));
      a[2 * w] = f.x, a[2 * w + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int v = 0; v < V; ++v) a[v] = to_float(src[v]);
  }
}

// How the b values loaded kPrefetchB steps ahead are held until their step. As floats,
// a bf16 load is converted right where it is issued, and the compiler places that
// conversion next to the load: every step then waits a whole global round trip (SASS:
// LDG.E.U16 followed at once by IMAD.U32 ..., 0x10000, before the step's barrier; f32
// loads straight into its register and is only read four steps later). Held as the
// input's raw 16 bits (kHeldRaw) and widened where the step adds it, the load's latency
// hides behind the steps in flight as it does for f32. For f32 both are the same code.
template <class T, bool kHeldRaw>
struct HeldB {
  using Type = std::conditional_t<kHeldRaw && sizeof(T) == 2, unsigned short, float>;
  static __device__ __forceinline__ Type hold(T x) {
    if constexpr (std::is_same_v<Type, float>) return to_float(x);
    else return __bfloat16_as_ushort(x);
  }
  static __device__ __forceinline__ float widen(Type x) {
    if constexpr (std::is_same_v<Type, float>) return x;
    else return __uint_as_float(static_cast<unsigned>(x) << 16);  // bf16 is the top half of an f32
  }
};

template <class T, int N, int MC, int kBlocks, bool kHeldRaw = false, bool kRowReads = false>
__global__ void __launch_bounds__(kThreads, kBlocks) sequential_kernel(const SeqParams p) {
  using Cfg = SeqConfig<T, N, MC, kBlocks, kRowReads>;
  using Held = HeldB<T, kHeldRaw>;
  constexpr int V = Cfg::kChunkElems, R = Cfg::kRowsPerThread, D = Cfg::kStages, PB = Cfg::kPrefetchB;
  constexpr int O = Cfg::kOwned, CP = Cfg::kCopiesPerThread;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);                                       // [D][N·N]
  float* hbuf = reinterpret_cast<float*>(smem_raw + D * Cfg::kStageBytes);          // [2][kStateFloats]
  constexpr int H = Cfg::kStateFloats;

  const SeqChain c = p.chains[blockIdx.y];  // a copy: registers, not indexed parameter loads
  const int64_t chain_index = blockIdx.x / p.col_blocks;
  const int64_t group = chain_index / c.sub_chains, sub = chain_index % c.sub_chains;
  const bool last_sub = sub == c.sub_chains - 1;
  const bool identity_first = c.identity_first && sub == 0;
  const int col0 = (blockIdx.x % p.col_blocks) * MC;
  const int n = static_cast<int>(p.n), m = static_cast<int>(p.m);
  const int tid = threadIdx.x, q = tid & 7, rg = tid >> 3;
  const int64_t steps = last_sub && c.last_steps > 0 ? c.last_steps : c.steps;
  const T* A = static_cast<const T*>(c.A) + group * c.a_group + sub * c.sub_a;

  // The state before step 0, into the buffer step 0 reads.
  for (int e = tid; e < N * MC; e += kThreads) {
    const int row = e / MC, col = e % MC;
    float x = 0.f;
    if (c.start && row < n && col0 + col < m) {
      const int64_t at = group * c.start_group + sub * c.sub_start + row * m + col0 + col;
      x = start_element<T>(c, at);
    }
    hbuf[H + state_index<MC, V, kRowReads>(row, col)] = x;
  }

  // This thread's share of every stage copy: source offset within A_s, destination
  // within the stage, and whether the chunk lies inside n×n (else zeros are written).
  int copy_src[CP], copy_dst[CP];
  bool copy_ok[CP];
#pragma unroll
  for (int u = 0; u < CP; ++u) {
    const int idx = tid + u * kThreads, row = idx / Cfg::kChunksPerRow, col = (idx % Cfg::kChunksPerRow) * V;
    copy_ok[u] = row < n && col < n;
    copy_src[u] = copy_ok[u] ? row * n + col : 0;
    copy_dst[u] = stage_index<N, V>(row, col);
  }
  auto issue_copies = [&](const T* A_s, int slot, bool valid_step) {
    if (valid_step) {
      T* stage = stages + slot * N * N;
#pragma unroll
      for (int u = 0; u < CP; ++u) copy_async<Cfg::kChunkBytes>(stage + copy_dst[u], A_s + copy_src[u], copy_ok[u]);
    }
    copy_async_commit();
  };

  // The outputs this lane writes: (row, col) pairs; lanes q ≥ R own none when MC = 1.
  const bool owner = MC == 8 || q < R;
  int out_row[O], out_col[O];
  bool out_ok[O];
  int64_t out_off[O];
#pragma unroll
  for (int o = 0; o < O; ++o) {
    out_row[o] = MC == 8 ? rg + 32 * o : rg + 32 * (owner ? q : 0);
    out_col[o] = MC == 8 ? q : 0;
    out_ok[o] = owner && out_row[o] < n && col0 + out_col[o] < m;
    out_off[o] = static_cast<int64_t>(out_row[o]) * m + col0 + out_col[o];
  }
  const T* b = c.b ? static_cast<const T*>(c.b) + group * c.b_group + sub * c.sub_b : nullptr;
  auto load_b = [&](int64_t s, typename Held::Type (&dst)[O]) {
    const bool live = b && s < steps;
#pragma unroll
    for (int o = 0; o < O; ++o)
      dst[o] = (live && out_ok[o]) ? Held::hold(b[s * c.b_step + out_off[o]]) : typename Held::Type(0);
  };
  const int64_t out_at = group * c.out_group + sub * c.sub_out;
  float* out_f = c.out_float ? static_cast<float*>(c.out) + out_at : nullptr;
  T* out_t = !c.out_float && c.out ? static_cast<T*>(c.out) + out_at : nullptr;
  T* last = c.last && last_sub ? static_cast<T*>(c.last) + group * c.last_group : nullptr;

#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue_copies(A + d * c.a_step, d, d < steps && !(identity_first && d == 0));
  const T* A_issue = A + (D - 1) * c.a_step;  // the transition the next copies fetch
  typename Held::Type bring[PB][O];
#pragma unroll
  for (int d = 0; d < PB; ++d) load_b(d, bring[d]);

  int slot = 0;
  for (int64_t s0 = 0; s0 < steps; s0 += PB) {
#pragma unroll
    for (int d = 0; d < PB; ++d) {
      const int64_t s = s0 + d;
      if (s >= steps) break;
      copy_async_wait<D - 2>();
      __syncthreads();  // A(s) landed for everyone; the previous state is visible
      issue_copies(A_issue, slot == 0 ? D - 1 : slot - 1, s + D - 1 < steps);
      A_issue += c.a_step;
      const float* h_prev = hbuf + ((s + 1) & 1) * H;
      float* h_next = hbuf + (s & 1) * H;

      float result[O];
      if (identity_first && s == 0) {  // the identity step of the reverse-time chain
#pragma unroll
        for (int o = 0; o < O; ++o) result[o] = owner ? h_prev[state_index<MC, V, kRowReads>(out_row[o], out_col[o])] : 0.f;
      } else {
        const T* stage = stages + slot * N * N;
        float acc[R][MC];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
          for (int cc = 0; cc < MC; ++cc) acc[i][cc] = 0.f;
#pragma unroll
        for (int j = 0; j < Cfg::kChunksPerLane; ++j) {
          const int chunk = q + 8 * j;
          float hk[V][MC];  // the state rows k of this chunk
          if constexpr (MC == 1) {
            float x[V];
#pragma unroll
            for (int v0 = 0; v0 < V; v0 += 4) {
              const float4 y = *reinterpret_cast<const float4*>(h_prev + chunk * V + v0);
              x[v0] = y.x, x[v0 + 1] = y.y, x[v0 + 2] = y.z, x[v0 + 3] = y.w;
            }
#pragma unroll
            for (int v = 0; v < V; ++v) hk[v][0] = x[v];
          } else if constexpr (kRowReads) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
              const float* at = h_prev + state_index<MC, V, true>(chunk * V + v, 0);
              const float4 lo = *reinterpret_cast<const float4*>(at), hi = *reinterpret_cast<const float4*>(at + 4);
              hk[v][0] = lo.x, hk[v][1] = lo.y, hk[v][2] = lo.z, hk[v][3] = lo.w;
              hk[v][4] = hi.x, hk[v][5] = hi.y, hk[v][6] = hi.z, hk[v][7] = hi.w;
            }
          } else {
#pragma unroll
            for (int v = 0; v < V; ++v)
#pragma unroll
              for (int cc = 0; cc < MC; ++cc) hk[v][cc] = h_prev[state_index<MC, V>(chunk * V + v, cc)];
          }
#pragma unroll
          for (int i = 0; i < R; ++i) {
            const int row = rg + 32 * i;
            float a[V];
            if (!c.transposed) {  // A[row][chunk·V + v]: one vector load
              load_chunk<T, V>(stage + stage_index<N, V>(row, chunk * V), a);
            } else {  // A[chunk·V + v][row]
#pragma unroll
              for (int v = 0; v < V; ++v) a[v] = to_float(stage[stage_index<N, V>(chunk * V + v, row)]);
            }
#pragma unroll
            for (int v = 0; v < V; ++v)
#pragma unroll
              for (int cc = 0; cc < MC; ++cc) acc[i][cc] = fmaf(a[v], hk[v][cc], acc[i][cc]);
          }
        }
        if constexpr (MC == 1) {  // all-reduce over the 8 lanes, lane q keeps row group i = q
#pragma unroll
          for (int mask = 1; mask < 8; mask <<= 1)
#pragma unroll
            for (int i = 0; i < R; ++i) acc[i][0] += __shfl_xor_sync(0xffffffffu, acc[i][0], mask);
          result[0] = acc[0][0];
#pragma unroll
          for (int i = 1; i < R; ++i)
            if (q == i) result[0] = acc[i][0];
        } else {  // reduce-scatter over the 8 lanes: lane q ends with column q of each row
#pragma unroll
          for (int i = 0; i < R; ++i) {
#pragma unroll
            for (int half = 4; half >= 1; half >>= 1) {
              const bool upper = (q & half) != 0;
#pragma unroll
              for (int cc = 0; cc < half; ++cc) {
                const float lo = acc[i][cc], hi = acc[i][cc + half];
                const float send = upper ? lo : hi, keep = upper ? hi : lo;
                acc[i][cc] = keep + __shfl_xor_sync(0xffffffffu, send, half);
              }
            }
            result[i] = acc[i][0];
          }
        }
      }

      // out = result + b: into the next state buffer and to memory.
      const bool write_last = last && s == steps - 1;
#pragma unroll
      for (int o = 0; o < O; ++o) {
        if (!owner) continue;
        const float x = result[o] + Held::widen(bring[d][o]);
        h_next[state_index<MC, V, kRowReads>(out_row[o], out_col[o])] = x;
        if (out_ok[o]) {
          if (out_f) out_f[s * c.out_step + out_off[o]] = x;
          if (out_t) out_t[s * c.out_step + out_off[o]] = from_float<T>(x);
          if (write_last) last[out_off[o]] = from_float<T>(x);
        }
      }
      load_b(s + PB, bring[d]);
      slot = slot == D - 1 ? 0 : slot + 1;
    }
  }
  copy_async_wait<0>();
}

}  // namespace seqmix::cuda::linrec
