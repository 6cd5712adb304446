// Chunkwise GLA forward: one block per (value block, head, sequence) walks the sequence's
// chunks of 64 tokens in order, the [K, VB] state in registers (tensor-core accumulator
// fragments), and per chunk computes (b = cumulative log decay from the chunk's start,
// every factor below a product of e^{g} ≤ 1, so nothing overflows):
//   o_i   = scale·[(q_i ⊙ e^{b_i}) S_0 + Σ_{j≤i} A_ij v_j],   A_ij = Σ_c q_ic k_jc e^{b_ic − b_jc}
//   S_end = e^{b_last} ⊙ S_0 + Σ_j (k_j ⊙ e^{b_last − b_j})ᵀ v_j
// A is built from 16-token sub-chunks as in src/cpu/gla_chunk.cpp: a pair of sub-chunks
// J < I factors through the first token i0 of I, e^{b_i − b_j} = e^{b_i − b_{i0}}·e^{b_{i0} − b_j},
// both exponents ≤ 0, so the block is one tensor-core product; a sub-chunk against itself
// is summed exactly on the CUDA cores with running products of e^{g}.
// The next chunk's inputs stream into shared memory (cp.async) while this one multiplies.
#pragma once

#include "cuda/common/runtime.cuh"
#include "cuda/gla/mma.cuh"
#include "cuda/gla/params.hpp"

namespace seqmix::cuda::gla {

constexpr int kThreads = 256;  // 8 warps
constexpr int kChunk = 64, kSub = 16;
constexpr int kPairRows = 96;  // key rows of the sub-chunk pairs: 16 (I=1) + 32 (I=2) + 48 (I=3)

// First row of sub-chunk I's keys (all sub-chunks J < I) in Smem::k_pair.
__host__ __device__ constexpr int pair_row0(int I) { return kSub * (I - 1) * I / 2; }

template <class E, int KD, int VB>
struct Smem {
  static constexpr int PK = KD + 8, PV = VB + 8, PA = kChunk + 8;  // row pitches
  E q[kChunk * PK], k[kChunk * PK], g[kChunk * PK];  // this chunk's raw inputs
  E v[2][kChunk * PV];                               // values, double-buffered
  E q_sub[kChunk * PK];    // q_i ⊙ e^{b_i − b_{i0}}   (i0: first token of i's sub-chunk)
  E q_start[kChunk * PK];  // q_i ⊙ e^{b_i}
  E k_end[kChunk * PK];    // k_j ⊙ e^{b_last − b_j}
  E k_pair[kPairRows * PK];  // per sub-chunk I ≥ 1: k_j ⊙ e^{b_{i0(I)} − b_j} for j < i0(I)
  __half decay[kChunk * PK];  // e^{g}: fp16 keeps 11 bits; values under 6e-8 matter to no sum
  E state[KD * PV];           // S_0 of this chunk, as the product's operand
  E scores[kChunk * PA];      // A, zero above the diagonal
  float decay_all[KD];        // e^{b_last}
};

struct Span {
  int64_t batch, start, length;
};

__device__ inline Span sequence_span(const GlaParams& p, int64_t n) {
  if (!p.cu_seqlens) return {n, 0, p.T};
  int64_t a, b;
  if (p.cu_seqlens_int64) {
    a = static_cast<const int64_t*>(p.cu_seqlens)[n], b = static_cast<const int64_t*>(p.cu_seqlens)[n + 1];
  } else {
    a = static_cast<const int32_t*>(p.cu_seqlens)[n], b = static_cast<const int32_t*>(p.cu_seqlens)[n + 1];
  }
  return {0, a, b - a};
}

// Rows [0, 64) × cols [0, COLS) of a chunk into a shared tile of pitch PITCH; rows past
// `valid` are zero-filled (a zero key or value adds nothing, a zero decay keeps e^{g} = 1).
template <int COLS, int PITCH, class E>
__device__ __forceinline__ void load_chunk(E* dst, const E* row0, int64_t stride_time, int valid, int tid) {
  constexpr int kVectors = COLS / 8;
#pragma unroll
  for (int i = tid; i < kChunk * kVectors; i += kThreads) {
    const int r = i / kVectors, c = (i % kVectors) * 8;
    const bool ok = r < valid;
    copy16_async(dst + r * PITCH + c, row0 + (ok ? r * stride_time : 0) + c, ok);
  }
}

// The decayed operands of one chunk. Thread (channel c, role): role 0 walks the tokens
// forward (q_sub, q_start, e^{g}, e^{b_last}), role 1 backward (k_end, k_pair); both take
// e^{g} from g and multiply, so each factor is a product of values ≤ 1.
template <class E, int KD, int VB>
__device__ __forceinline__ void decay_operands(Smem<E, KD, VB>& s, int tid) {
  constexpr int PK = Smem<E, KD, VB>::PK;
  if (tid >= 2 * KD) return;
  const int c = tid % KD;
  if (tid < KD) {
    float from_start = 1.0f, from_sub = 1.0f;
#pragma unroll 16
    for (int t = 0; t < kChunk; ++t) {
      const int at = t * PK + c;
      const float e = __expf(to_float(s.g[at]));
      s.decay[at] = __float2half_rn(e);
      from_start *= e;
      from_sub = t % kSub == 0 ? 1.0f : from_sub * e;
      const float q = to_float(s.q[at]);
      s.q_sub[at] = from_float<E>(q * from_sub);
      s.q_start[at] = from_float<E>(q * from_start);
    }
    s.decay_all[c] = from_start;
  } else {
    float to_end = 1.0f, to_sub[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // to_sub[I]: Π_{s=j+1..i0(I)} e^{g_s}
#pragma unroll
    for (int sub = 3; sub >= 0; --sub) {
#pragma unroll
      for (int tt = kSub - 1; tt >= 0; --tt) {
        const int t = sub * kSub + tt, at = t * PK + c;
        const float e = __expf(to_float(s.g[at]));
        const float k = to_float(s.k[at]);
        s.k_end[at] = from_float<E>(k * to_end);
        to_end *= e;
#pragma unroll
        for (int I = sub + 1; I < 4; ++I) {
          s.k_pair[(pair_row0(I) + t) * PK + c] = from_float<E>(k * to_sub[I]);
          to_sub[I] *= e;
        }
        if (tt == 0 && sub >= 1) to_sub[sub] = e;
      }
    }
  }
}

// The intra-chunk scores A (causal, decay-weighted q·kᵀ) into s.scores.
//  - diagonal sub-chunks: warp w owns rows 8w..8w+7; lanes split the channels; for each
//    j ≤ i in i's sub-chunk the weight e^{b_i − b_j} is a running product of e^{g}.
//  - the six pairs J < I: warps 0..5, one 16×16 tensor-core block each.
template <class E, int KD, int VB>
__device__ __forceinline__ void chunk_scores(Smem<E, KD, VB>& s, int warp, int lane) {
  constexpr int PK = Smem<E, KD, VB>::PK, PA = Smem<E, KD, VB>::PA, kPerLane = KD / 32;
  for (int rr = 0; rr < kChunk / 8; ++rr) {
    const int i = warp * (kChunk / 8) + rr, i0 = i & ~(kSub - 1);
    float q[kPerLane], w[kPerLane];
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) q[m] = to_float(s.q[i * PK + lane + 32 * m]), w[m] = 1.0f;
    for (int j = i; j >= i0; --j) {
      float part = 0.0f;
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        const int at = j * PK + lane + 32 * m;
        part += q[m] * to_float(s.k[at]) * w[m];
        w[m] *= __half2float(s.decay[at]);
      }
      part = warp_sum(part);
      if (lane == 0) s.scores[i * PA + j] = from_float<E>(part);
    }
    if (lane < kSub && i0 + lane > i) s.scores[i * PA + i0 + lane] = from_float<E>(0.0f);
  }
  if (warp < 6) {
    const int I = warp < 1 ? 1 : warp < 3 ? 2 : 3, J = warp - (I - 1) * I / 2;  // pairs (1,0) (2,0) (2,1) (3,0)…
    float acc[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < KD / 16; ++kk) {
      uint32_t a[4], b[4];
      load_a(a, s.q_sub, PK, kSub * I, 16 * kk, lane);
      load_b_from_rows(b, s.k_pair, PK, pair_row0(I) + kSub * J, 16 * kk, lane);
      mma_pair<E>(acc[0], acc[1], a, b);
    }
    const int row = kSub * I + lane / 4, col = kSub * J + 2 * (lane % 4);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      *reinterpret_cast<uint32_t*>(&s.scores[row * PA + col + 8 * nt]) = pack2<E>(acc[nt][0], acc[nt][1]);
      *reinterpret_cast<uint32_t*>(&s.scores[(row + 8) * PA + col + 8 * nt]) = pack2<E>(acc[nt][2], acc[nt][3]);
    }
  }
}

// The state S [KD, VB] as accumulator fragments: warp w owns rows 16·(w % RB) and the
// columns of its column split w / RB.
template <class E, int KD, int VB>
struct StateTile {
  static constexpr int RB = KD / 16, CS = 8 / RB, CW = VB / CS, NT = CW / 8;
  static_assert(RB * CS == 8 && CW % 16 == 0, "8 warps tile the state");
  float f[NT][4];
  int row, col;  // this lane's first element (row, col); the others at +8 rows, +8·nt cols

  __device__ StateTile(int warp, int lane)
      : row(16 * (warp % RB) + lane / 4), col(CW * (warp / RB) + 2 * (lane % 4)) {}

  // From a [KD, V] float row-major state (at column vb0), or zeros.
  __device__ void load(const float* state, int64_t V) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f[nt][e] = state ? state[(row + 8 * (e / 2)) * V + col + 8 * nt + e % 2] : 0.0f;
  }
  __device__ void store(float* state, int64_t V) const {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) state[(row + 8 * (e / 2)) * V + col + 8 * nt + e % 2] = f[nt][e];
  }
  // As the product operand, rounded to E.
  __device__ void store_operand(E* tile) const {
    constexpr int PV = Smem<E, KD, VB>::PV;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      *reinterpret_cast<uint32_t*>(&tile[row * PV + col + 8 * nt]) = pack2<E>(f[nt][0], f[nt][1]);
      *reinterpret_cast<uint32_t*>(&tile[(row + 8) * PV + col + 8 * nt]) = pack2<E>(f[nt][2], f[nt][3]);
    }
  }
  // S ← e^{b_last} ⊙ S + k_endᵀ v.
  __device__ void advance(const Smem<E, KD, VB>& s, const E* v, int lane) {
    constexpr int PK = Smem<E, KD, VB>::PK, PV = Smem<E, KD, VB>::PV;
    const float d0 = s.decay_all[row], d1 = s.decay_all[row + 8];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) f[nt][0] *= d0, f[nt][1] *= d0, f[nt][2] *= d1, f[nt][3] *= d1;
    const int m0 = row - lane / 4, n0 = col - 2 * (lane % 4);
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      uint32_t a[4];
      load_a_transposed(a, s.k_end, PK, 16 * kk, m0, lane);
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];
        load_b(b, v, PV, 16 * kk, n0 + 16 * np, lane);
        mma_pair<E>(f[2 * np], f[2 * np + 1], a, b);
      }
    }
  }
};

// o for rows 16·(w % 4) and half the value block, w / 4: (q_start·S_0 + A·v)·scale.
template <class E, int KD, int VB>
__device__ __forceinline__ void chunk_output(const Smem<E, KD, VB>& s, const E* v, int warp, int lane, E* o_row0,
                                             int64_t stride_time, int valid, float scale) {
  constexpr int PK = Smem<E, KD, VB>::PK, PV = Smem<E, KD, VB>::PV, PA = Smem<E, KD, VB>::PA;
  constexpr int NT = VB / 16;  // 8-column tiles per warp
  const int rb = warp % 4, n0 = (warp / 4) * (VB / 2);
  float acc[NT][4] = {};
#pragma unroll
  for (int kk = 0; kk < KD / 16; ++kk) {
    uint32_t a[4];
    load_a(a, s.q_start, PK, 16 * rb, 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      load_b(b, s.state, PV, 16 * kk, n0 + 16 * np, lane);
      mma_pair<E>(acc[2 * np], acc[2 * np + 1], a, b);
    }
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if (kk > rb) break;  // A is zero above the diagonal blocks
    uint32_t a[4];
    load_a(a, s.scores, PA, 16 * rb, 16 * kk, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      load_b(b, v, PV, 16 * kk, n0 + 16 * np, lane);
      mma_pair<E>(acc[2 * np], acc[2 * np + 1], a, b);
    }
  }
  const int r = 16 * rb + lane / 4, c = n0 + 2 * (lane % 4);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (r < valid)
      *reinterpret_cast<uint32_t*>(o_row0 + r * stride_time + c + 8 * nt) =
          pack2<E>(scale * acc[nt][0], scale * acc[nt][1]);
    if (r + 8 < valid)
      *reinterpret_cast<uint32_t*>(o_row0 + (r + 8) * stride_time + c + 8 * nt) =
          pack2<E>(scale * acc[nt][2], scale * acc[nt][3]);
  }
}

template <class E, int KD, int VB>
__global__ void __launch_bounds__(kThreads, 1) forward_kernel(const GlaParams p) {
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Smem<E, KD, VB>*>(smem_bytes);
  constexpr int PK = Smem<E, KD, VB>::PK, PV = Smem<E, KD, VB>::PV;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int vb0 = blockIdx.x * VB;
  const int64_t h = blockIdx.y, n = blockIdx.z;
  const Span seq = sequence_span(p, n);
  const int64_t chunks = (seq.length + kChunk - 1) / kChunk;
  auto row0 = [&](const GlaTokens& x, int64_t t, int col) {
    return static_cast<E*>(x.data) + seq.batch * x.stride_batch + (seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };
  auto issue_loads = [&](int64_t chunk, int stage) {
    const int64_t t = chunk * kChunk;
    const int valid = static_cast<int>(seq.length - t < kChunk ? seq.length - t : kChunk);
    load_chunk<KD, PK>(s.q, row0(p.q, t, 0), p.q.stride_time, valid, tid);
    load_chunk<KD, PK>(s.k, row0(p.k, t, 0), p.k.stride_time, valid, tid);
    load_chunk<KD, PK>(s.g, row0(p.g, t, 0), p.g.stride_time, valid, tid);
    load_chunk<VB, PV>(s.v[stage], row0(p.v, t, vb0), p.v.stride_time, valid, tid);
    copy_async_commit();
  };

  for (int i = tid; i < kChunk * Smem<E, KD, VB>::PA; i += kThreads) s.scores[i] = from_float<E>(0.0f);
  const int64_t state_offset = (n * p.H + h) * KD * p.V + vb0;
  StateTile<E, KD, VB> S(warp, lane);
  S.load(p.initial_state ? p.initial_state + state_offset : nullptr, p.V);
  issue_loads(0, 0);

  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int stage = static_cast<int>(chunk & 1);
    copy_async_wait_all();
    __syncthreads();  // this chunk's inputs are in; the last chunk's products are done
    decay_operands(s, tid);
    S.store_operand(s.state);
    __syncthreads();
    chunk_scores(s, warp, lane);
    __syncthreads();  // raw q, k, g are free: the next chunk streams in behind the products
    if (chunk + 1 < chunks) issue_loads(chunk + 1, stage ^ 1);
    const int64_t t = chunk * kChunk;
    const int valid = static_cast<int>(seq.length - t < kChunk ? seq.length - t : kChunk);
    chunk_output(s, s.v[stage], warp, lane, row0(p.o, t, vb0), p.o.stride_time, valid, p.scale);
    S.advance(s, s.v[stage], lane);
  }
  if (p.final_state) S.store(p.final_state + state_offset, p.V);
}

template <class E, int KD, int VB>
void launch_forward(const GlaParams& p) {
  const size_t smem = sizeof(Smem<E, KD, VB>);
  auto kernel = forward_kernel<E, KD, VB>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "gla forward shared memory");
  const dim3 grid(static_cast<unsigned>(p.V / VB), static_cast<unsigned>(p.H),
                  static_cast<unsigned>(p.num_sequences));
  kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(p.stream)>>>(p);
  check_launch("gla forward");
}

// The value block: 128 columns when V allows and the state still fits 64 registers a thread.
template <class E>
void forward_for_shape(const GlaParams& p) {
  if (p.K == 128) {
    if (p.V % 128 == 0) launch_forward<E, 128, 128>(p);
    else launch_forward<E, 128, 64>(p);
  } else {
    if (p.V % 128 == 0) launch_forward<E, 64, 128>(p);
    else launch_forward<E, 64, 64>(p);
  }
}

}  // namespace seqmix::cuda::gla
