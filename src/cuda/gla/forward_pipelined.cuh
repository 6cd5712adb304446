// The outputs pass with two chunks in flight (NOTES.md, "The outputs pass with two chunks in
// flight"): of a chunk's work only o's q_start·S term and the state update need the state S;
// the walk over the decays, the vote and A need the chunk alone. So one block of three
// warpgroups runs them side by side on two slots of shared memory:
//   warpgroup 0, the state side: S as its wgmma accumulators, o = (q_start·S_0 + A·v) and
//     S ← 2^{b_last} ⊙ (S + (k ⊙ 2^{−b})ᵀ v) for chunk c, all on wgmma (NOTES.md v70);
//   warpgroups 1–2, the chunk side: chunk c + 1's factored operands (from its raw q, k and g in the
//     landing tiles into the slot) and A, with the tid and warp indices factored_operands and
//     factored_scores take.
// The landing tiles are refilled with chunk c + 2's raw q, k and g as soon as the walk has read
// them, so they land while A is formed and the state side works; v goes straight into the slot,
// asked for once the slot is empty. A slot is handed over by two barriers: `full` (the chunk
// side's 256 threads, once A is written and their copies of v have landed) and `empty` (the
// state side's 128, after their last read of the slot).
// Chunks factored whole only (bf16, K = 128, VB = 128, no key blocks, nothing saved): where the
// chunk side's vote refuses a chunk (strong decays, huge keys), the block stops there, leaves the
// state entering it in p.resume_states and the chunk in p.resume_chunks, and the outputs pass
// launched after this kernel walks the rest (forward.cuh forward_kernel).
#pragma once

#include "cuda/common/proxy.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/warp_roles.cuh"
#include "cuda/gla/forward.cuh"
#include "cuda/gla/wgmma.cuh"

namespace seqmix::cuda::gla {

constexpr int kPipelinedThreads = 384, kChunkSideThreads = 256, kStateSideThreads = 128;
constexpr int kStateSideRegisters = 232, kChunkSideRegisters = 136;

// Named barriers inside one side (cuda/common/warp_roles.cuh): 1 the chunk side's 256 threads, 2 the
// state side's 128 (0 is __syncthreads, which neither side may reach once they part).
constexpr int kChunkSideBarrier = 1, kStateSideBarrier = 2;

// The state side's operands that only wgmma reads (v and S) are in its swizzled layout; the
// tiles the chunk side writes and ldmatrix reads keep their padded rows.
template <class E, int KD, int VB>
struct PipelinedSmem {
  static constexpr int PK = KD + 8, PA = kChunk + 8;
  using ValueTile = SwizzledTile<kChunk, VB>;
  using StateOperand = SwizzledTile<KD, VB>;
  struct alignas(1024) Slot {
    E v[ValueTile::kElements];
    E q_start[kChunk * PK];  // q ⊙ 2^{b}
    E inverse[kChunk * PK];  // k ⊙ 2^{−b}
    E scores[kChunk * PA];   // zero right of the diagonal's row blocks from the start
    float decay_all[KD];     // 2^{b_last}
  };
  struct Landing {  // the raw tiles of the chunk side's next chunk
    E q[kChunk * PK], k[kChunk * PK], g[kChunk * PK];
  };
  Slot slot[2];
  alignas(1024) E state[StateOperand::kElements];  // S entering the state side's chunk, as o's operand
  Landing raw;
  uint64_t full[2], empty[2];
  int64_t refused;  // the first chunk the chunk side's vote refused (−1: none yet)
};

// Rows [0, 64) of a chunk's values into a ValueTile by the chunk side's 256 threads, rows past
// `valid` zero-filled: load_chunk's pieces, each at its swizzled unit (a thread's rows step by
// 16, so its unit stays put).
template <int VB, class E>
__device__ __forceinline__ void load_value_tile(E* dst, const E* row0, int64_t stride_time, int valid, int tid) {
  using Pieces = RolledPieces<VB / 8>;
  constexpr int kRowStep = Pieces::kRowStep;
  static_assert(kRowStep % 8 == 0, "a thread's pieces keep their unit");
  const Pieces pieces(tid);
  E* const to = dst + SwizzledTile<kChunk, VB>::offset(pieces.row, pieces.col);
  const E* const first_row = row0 + pieces.col;
  const E* from = first_row + pieces.row * stride_time;
#pragma unroll
  for (int j = 0; j < kChunk / kRowStep; ++j, from += kRowStep * stride_time) {
    const bool ok = pieces.row + j * kRowStep < valid;
    copy16_async(to + j * kRowStep * 64, ok ? from : first_row, ok);
  }
}

// S [KD = 128, VB = 128] as the state side's wgmma accumulators: tile t holds key rows
// [64t, 64t + 64) (m64n128), so warp w holds rows 64t + 16w + lane / 4 (+ 8) and columns
// 8j + 2 (lane % 4) (+ 1) of f[t][4j..4j + 3], as mma.sync's c0..c3.
template <class E, int KD, int VB>
struct WarpgroupState {
  static_assert(KD == 128 && VB == 128, "two m64n128 tiles");
  using StateOperand = SwizzledTile<KD, VB>;
  using ValueTile = SwizzledTile<kChunk, VB>;
  float f[2][64];
  int row, col;

  __device__ WarpgroupState(int warp, int lane) : row(16 * warp + lane / 4), col(2 * (lane % 4)) {}
  __device__ int row_of(int t, int e) const { return 64 * t + row + 8 * ((e % 4) / 2); }
  __device__ int col_of(int e) const { return col + 8 * (e / 4) + e % 2; }

  // From a [KD, V] float row-major state (at column 0 of this block's values), or zeros.
  __device__ void load(const float* state, int64_t V) {
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 64; ++e) f[t][e] = state ? state[row_of(t, e) * V + col_of(e)] : 0.0f;
  }
  __device__ void store(float* state, int64_t V) const {
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int e = 0; e < 64; ++e) state[row_of(t, e) * V + col_of(e)] = f[t][e];
  }
  // Rounded to E into o's operand tile, then fenced for the tensor cores' reads (the caller's
  // barrier publishes it).
  // The lane's rows are ≡ lane / 4 (mod 8), so 8-column tile j sits at unit (j % 8) ^ (lane / 4)
  // of its row: one base a unit, the rest constant offsets. The bases are formed again at each
  // call (the empty asm): hoisted out of the chunk loop they stay live and spill.
  __device__ void store_operand(E* tile) const {
    int swizzle = 8 * (row % 8);
    asm volatile("" : "+r"(swizzle));
    E* const base = tile + row * 64 + col;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      E* const at = base + ((8 * u) ^ swizzle);
#pragma unroll
      for (int b = 0; b < VB / 64; ++b)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int e = 4 * (8 * b + u) + 2 * h;
            *reinterpret_cast<uint32_t*>(at + b * StateOperand::kBlockElements + (64 * t + 8 * h) * 64) =
                pack2<E>(f[t][e], f[t][e + 1]);
          }
    }
    fence_async_shared();
  }
  // S ← decay ⊙ (S + inverseᵀ v): inverse [64, KD] (pitch KD + 8, k ⊙ 2^{−b}) by ldmatrix into
  // registers, v a ValueTile read by the tensor cores; decay one factor per key row (2^{b_last}).
  __device__ void advance(const E* inverse, const float* decay, const E* v, int warp, int lane) {
    constexpr int PK = KD + 8;
    uint32_t a[kChunk / 16][2][4];
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk)
#pragma unroll
      for (int t = 0; t < 2; ++t) load_a_transposed(a[kk][t], inverse, PK, 16 * kk, 64 * t + 16 * warp, lane);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk)
#pragma unroll
      for (int t = 0; t < 2; ++t) wgmma_rs_m64n128(f[t], a[kk][t], ValueTile::mn_major(v, 16 * kk, 0));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      fence_registers(f[t]);
      const float d0 = decay[row_of(t, 0)], d1 = decay[row_of(t, 2)];
#pragma unroll
      for (int e = 0; e < 64; e += 4) f[t][e] *= d0, f[t][e + 1] *= d0, f[t][e + 2] *= d1, f[t][e + 3] *= d1;
    }
  }
};

// o = (q_start·S + A·v)·scale for the chunk on the state side's wgmma: warp w's rows 16w..16w+15,
// the A operands (q_start and A, padded rows) by ldmatrix into registers, S's operand and v read
// by the tensor cores; one half of the value columns at a time, its products in three groups of
// four so that at most eight A fragments are held beside S. A is zero right of the diagonal's
// row blocks, so the warpgroup takes all four of its column blocks. put(r, c, x0, x1) as
// chunk_output's.
template <class E, int KD, int VB, class Put>
__device__ __forceinline__ void warpgroup_output(const E* q_start, const E* scores, const E* state, const E* v,
                                                 int warp, int lane, int valid, float scale, Put&& put) {
  constexpr int PK = KD + 8, PA = kChunk + 8;
  static_assert(KD == 128, "two groups of q_start's fragments");
  using StateOperand = SwizzledTile<KD, VB>;
  using ValueTile = SwizzledTile<kChunk, VB>;
  const int r = 16 * warp + lane / 4;
#pragma unroll
  for (int half = 0; half < VB / 64; ++half) {
    float acc[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) acc[e] = 0.0f;
    // Group g: q_start's channels [64g, 64g + 64) against S's rows, then A against v.
    auto group = [&](const E* tile, int pitch, int k0, auto&& operand) {
      uint32_t a[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) load_a(a[kk], tile, pitch, 16 * warp, k0 + 16 * kk, lane);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_m64n64(acc, a[kk], operand(k0 + 16 * kk));
      wgmma_commit();
    };
    auto state_rows = [&](int k) { return StateOperand::mn_major(state, k, 64 * half); };
    auto value_rows = [&](int k) { return ValueTile::mn_major(v, k, 64 * half); };
    group(q_start, PK, 0, state_rows);
    group(q_start, PK, 64, state_rows);
    wgmma_wait<1>();
    group(scores, PA, 0, value_rows);
    wgmma_wait<0>();
    fence_registers(acc);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = 64 * half + 8 * j + 2 * (lane % 4);
      if (r < valid) put(r, c, scale * acc[4 * j], scale * acc[4 * j + 1]);
      if (r + 8 < valid) put(r + 8, c, scale * acc[4 * j + 2], scale * acc[4 * j + 3]);
    }
  }
}

// What factored_operands and factored_scores read (the landing tiles) and write (one slot).
template <class E, int KD>
struct ChunkSideView {
  using Element = E;
  static constexpr int kKeys = KD, PK = KD + 8, PA = kChunk + 8;
  E *q, *k, *g, *q_start, *inverse, *scores;
  float* decay_all;
  __device__ E* inverse_keys() const { return inverse; }
};

template <class E, int KD, int VB>
__global__ void __launch_bounds__(kPipelinedThreads, 1) pipelined_forward_kernel(const GlaParams p) {
  static_assert(std::is_same_v<E, __nv_bfloat16>, "chunks factored whole: bf16");
  using Sm = PipelinedSmem<E, KD, VB>;
  constexpr int PK = Sm::PK;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const KeyBlock kb = KeyBlock::of_block<KD, VB>(p);
  const int64_t vb0 = kb.vb0, key0 = kb.key0;
  const BlockPlan plan(p);
  const int64_t h = plan.h;
  if (tid == 0) {
    for (int i = 0; i < 2; ++i) {
      tma::barrier_init(&s.full[i], kChunkSideThreads);
      tma::barrier_init(&s.empty[i], kStateSideThreads);
    }
    s.refused = -1;
  }
  for (int i = tid; i < kChunk * Sm::PA; i += kPipelinedThreads)
    s.slot[0].scores[i] = s.slot[1].scores[i] = from_float<E>(0.0f);
  __syncthreads();
  if (plan.first_chunk >= plan.end_chunk) {
    if (tid == 0) p.resume_chunks[resume_index(plan)] = plan.end_chunk;
    return;
  }
  auto row0 = [&](const GlaTokens& x, int64_t t, int64_t col) {
    return static_cast<E*>(x.data) + plan.seq.batch * x.stride_batch + (plan.seq.start + t) * x.stride_time +
           h * x.stride_head + col;
  };

  if (warp >= kStateSideThreads / 32) {  // the chunk side
    release_registers<kChunkSideRegisters>();
    const int ctid = tid - kStateSideThreads, cwarp = ctid / 32;
    const E *const q_rows = row0(p.q, 0, key0), *const k_rows = row0(p.k, 0, key0);
    const E *const g_rows = row0(p.g, 0, key0), *const v_rows = row0(p.v, 0, vb0);
    PhaseEvents phases(p.phase_cycles, ctid == 0);
    auto load_raw = [&](int64_t chunk) {
      const int valid = plan.valid(chunk);
      const int64_t rows = chunk * kChunk;
      load_chunk<KD, PK>(s.raw.q, q_rows + rows * p.q.stride_time, p.q.stride_time, valid, ctid);
      load_chunk<KD, PK>(s.raw.k, k_rows + rows * p.k.stride_time, p.k.stride_time, valid, ctid);
      load_chunk<KD, PK>(s.raw.g, g_rows + rows * p.g.stride_time, p.g.stride_time, valid, ctid);
    };
    load_raw(plan.first_chunk);
    copy_async_commit();
    for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
      const int64_t i = chunk - plan.first_chunk;
      auto& slot = s.slot[i & 1];
      tma::wait(&s.empty[i & 1], ((i >> 1) & 1) ^ 1);  // the state side is done with the slot's last chunk
      phases.mark(kGlaPipelinedSlotWait);
      load_value_tile<VB>(slot.v, v_rows + chunk * kChunk * p.v.stride_time, p.v.stride_time, plan.valid(chunk),
                          ctid);
      copy_async_commit();
      copy_async_wait_pending<1>();  // the raw tiles (v may still be in flight)
      named_barrier_sync(kChunkSideBarrier, kChunkSideThreads);  // the raw tiles are in
      phases.mark(kGlaPipelinedCopyWait);
      ChunkSideView<E, KD> view{s.raw.q, s.raw.k, s.raw.g, slot.q_start, slot.inverse, slot.scores, slot.decay_all};
      // The operands are written and the raw tiles read by every thread; a refused chunk goes to
      // the next kernel, which reads its raw tiles again.
      const bool refused = named_barrier_any(kChunkSideBarrier, kChunkSideThreads, factored_operands(view, ctid));
      phases.mark(kGlaPipelinedWalk);
      if (refused) {
        if (ctid == 0) s.refused = chunk;
        tma::arrive(&s.full[i & 1]);
        copy_async_wait_all();  // nothing lands in the slot after the block is gone
        return;
      }
      if (chunk + 1 < plan.end_chunk) load_raw(chunk + 1);
      copy_async_commit();  // (empty at the last chunk: the groups stay one a chunk)
      factored_scores(view, cwarp, lane);
      copy_async_wait_pending<1>();  // this chunk's v (the next raw tiles may still be in flight)
      fence_async_shared();          // v is read by the tensor cores
      tma::arrive(&s.full[i & 1]);
      phases.mark(kGlaPipelinedScores);
    }
    copy_async_wait_all();
    return;
  }

  // The state side.
  claim_registers<kStateSideRegisters>();
  WarpgroupState<E, KD, VB> S(warp, lane);
  float* const segment_state = p.workspace ? p.workspace + kb.state(p, plan.state_slot) : nullptr;
  const int64_t state_offset = kb.state(p, plan.n * p.H + h);
  S.load(p.segments > 1 ? segment_state : p.initial_state ? p.initial_state + state_offset : nullptr, p.V);
  PhaseEvents phases(p.phase_cycles, tid == 0);
  for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
    const int64_t i = chunk - plan.first_chunk;
    const auto& slot = s.slot[i & 1];
    S.store_operand(s.state);
    named_barrier_sync(kStateSideBarrier, kStateSideThreads);  // the operand is whole
    phases.mark(kGlaPipelinedOperand);
    tma::wait(&s.full[i & 1], (i >> 1) & 1);
    phases.mark(kGlaPipelinedFullWait);
    if (s.refused == chunk) {  // the state entering it, for the next kernel
      S.store(p.resume_states + kb.state(p, plan.state_slot), p.V);
      if (tid == 0) p.resume_chunks[resume_index(plan)] = chunk;
      return;
    }
    const int valid = plan.valid(chunk);
    E* const out = row0(p.o, chunk * kChunk, vb0);
    warpgroup_output<E, KD, VB>(slot.q_start, slot.scores, s.state, slot.v, warp, lane, valid, p.scale,
                                [&](int r, int c, float a, float b) {
                                  store_pair(out, static_cast<float*>(nullptr), r * p.o.stride_time + c, a, b);
                                });
    phases.mark(kGlaPipelinedOutput);
    S.advance(slot.inverse, slot.decay_all, slot.v, warp, lane);
    tma::arrive(&s.empty[i & 1]);
    // Every warp's products have read the operand before it is rewritten.
    named_barrier_sync(kStateSideBarrier, kStateSideThreads);
    phases.mark(kGlaPipelinedAdvance);
    phases.count(kGlaPipelinedSteps);
  }
  if (tid == 0) p.resume_chunks[resume_index(plan)] = plan.end_chunk;
  if (p.final_state && plan.end_chunk == plan.chunks) S.store(p.final_state + state_offset, p.V);
}

}  // namespace seqmix::cuda::gla
