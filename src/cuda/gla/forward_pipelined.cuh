// The outputs pass with two chunks in flight (NOTES.md, "The outputs pass with two chunks in
// flight"): of a chunk's work only o's q_start·S term and the state update need the state S;
// the walk over the decays, the vote and A need the chunk alone. So one block of three
// warpgroups runs them side by side on two slots of shared memory:
//   warpgroup 0, the state side: S (4 warps' accumulators, 32 rows each), o = (q_start·S_0 + A·v)
//     and S ← 2^{b_last} ⊙ (S + (k ⊙ 2^{−b})ᵀ v) for chunk c;
//   warpgroups 1–2, the chunk side: chunk c + 1's factored operands (from its raw q, k and g in the
//     landing tiles into the slot) and A, with the tid and warp indices factored_operands and
//     factored_scores take.
// The landing tiles are refilled with chunk c + 2's raw q, k and g as soon as the walk has read
// them, so they land while A is formed and the state side works; v goes straight into the slot,
// asked for once the slot is empty. A slot is handed over by two barriers: `full` (the chunk
// side's 256 threads twice: once A is written, and once their copies of v have landed) and
// `empty` (the state side's 128, after their last read of the slot).
// Chunks factored whole only (bf16, K = 128, VB = 128, no key blocks, nothing saved): where the
// chunk side's vote refuses a chunk (strong decays, huge keys), the block stops there, leaves the
// state entering it in p.resume_states and the chunk in p.resume_chunks, and the outputs pass
// launched after this kernel walks the rest (forward.cuh forward_kernel).
#pragma once

#include "cuda/common/tma.cuh"
#include "cuda/common/warp_roles.cuh"
#include "cuda/gla/forward.cuh"

namespace seqmix::cuda::gla {

constexpr int kPipelinedThreads = 384, kChunkSideThreads = 256, kStateSideThreads = 128;
constexpr int kStateSideRegisters = 232, kChunkSideRegisters = 136;

// Named barriers inside one side (cuda/common/warp_roles.cuh): 1 the chunk side's 256 threads, 2 the
// state side's 128 (0 is __syncthreads, which neither side may reach once they part).
constexpr int kChunkSideBarrier = 1, kStateSideBarrier = 2;

template <class E, int KD, int VB>
struct PipelinedSmem {
  static constexpr int PK = KD + 8, PV = VB + 8, PA = kChunk + 8;
  struct Slot {
    E q_start[kChunk * PK];  // q ⊙ 2^{b}
    E inverse[kChunk * PK];  // k ⊙ 2^{−b}
    E v[kChunk * PV];
    E scores[kChunk * PA];
    float decay_all[KD];  // 2^{b_last}
  };
  struct Landing {  // the raw tiles of the chunk side's next chunk
    E q[kChunk * PK], k[kChunk * PK], g[kChunk * PK];
  };
  Slot slot[2];
  Landing raw;
  E state[KD * PV];  // S entering the state side's chunk, as the product's operand
  uint64_t full[2], empty[2];
  int64_t refused;  // the first chunk the chunk side's vote refused (−1: none yet)
};

// What factored_operands and factored_scores read (the landing tiles) and write (one slot).
template <class E, int KD>
struct ChunkSideView {
  using Element = E;
  static constexpr int kKeys = KD, PK = KD + 8, PA = kChunk + 8;
  E *q, *k, *g, *q_start, *inverse, *scores;
  float* decay_all;
  __device__ E* inverse_keys() const { return inverse; }
};

// What chunk_output reads.
template <class E, int KD, int VB>
struct StateSideView {
  using Element = E;
  static constexpr int kKeys = KD, kValues = VB, PK = KD + 8, PV = VB + 8, PA = kChunk + 8;
  const E *q_start, *state, *scores;
};

template <class E, int KD, int VB>
__global__ void __launch_bounds__(kPipelinedThreads, 1) pipelined_forward_kernel(const GlaParams p) {
  static_assert(std::is_same_v<E, __nv_bfloat16>, "chunks factored whole: bf16");
  using Sm = PipelinedSmem<E, KD, VB>;
  constexpr int PK = Sm::PK, PV = Sm::PV;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  auto& s = *reinterpret_cast<Sm*>(smem_bytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const KeyBlock kb = KeyBlock::of_block<KD, VB>(p);
  const int64_t vb0 = kb.vb0, key0 = kb.key0;
  const BlockPlan plan(p);
  const int64_t h = plan.h;
  if (tid == 0) {
    for (int i = 0; i < 2; ++i) {
      tma::barrier_init(&s.full[i], 2 * kChunkSideThreads);
      tma::barrier_init(&s.empty[i], kStateSideThreads);
    }
    s.refused = -1;
  }
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
      load_chunk<KD, PK>(s.raw.q, chunk_rows(q_rows, p.q, chunk), p.q.stride_time, valid, ctid);
      load_chunk<KD, PK>(s.raw.k, chunk_rows(k_rows, p.k, chunk), p.k.stride_time, valid, ctid);
      load_chunk<KD, PK>(s.raw.g, chunk_rows(g_rows, p.g, chunk), p.g.stride_time, valid, ctid);
    };
    load_raw(plan.first_chunk);
    copy_async_commit();
    for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
      const int64_t i = chunk - plan.first_chunk;
      auto& slot = s.slot[i & 1];
      tma::wait(&s.empty[i & 1], ((i >> 1) & 1) ^ 1);  // the state side is done with the slot's last chunk
      phases.mark(kGlaPipelinedSlotWait);
      load_chunk<VB, PV>(slot.v, chunk_rows(v_rows, p.v, chunk), p.v.stride_time, plan.valid(chunk), ctid);
      copy_async_commit();
      copy_async_arrive(&s.full[i & 1]);  // the second arrival, once v (and all before it) has landed
      copy_async_wait_pending<1>();       // the raw tiles (v may still be in flight)
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
      tma::arrive(&s.full[i & 1]);
      phases.mark(kGlaPipelinedScores);
    }
    copy_async_wait_all();
    return;
  }

  // The state side.
  claim_registers<kStateSideRegisters>();
  constexpr int kStateWarps = kStateSideThreads / 32;
  StateTile<E, KD, VB, 2, kStateWarps> S(warp, lane);
  float* const segment_state = p.workspace ? p.workspace + kb.state(p, plan.state_slot) : nullptr;
  const int64_t state_offset = kb.state(p, plan.n * p.H + h);
  S.load(p.segments > 1 ? segment_state : p.initial_state ? p.initial_state + state_offset : nullptr, p.V);
  PhaseEvents phases(p.phase_cycles, tid == 0);
  for (int64_t chunk = plan.first_chunk; chunk < plan.end_chunk; ++chunk) {
    const int64_t i = chunk - plan.first_chunk;
    const auto& slot = s.slot[i & 1];
    S.store_pairs(s.state, PV);
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
    const StateSideView<E, KD, VB> view{slot.q_start, s.state, slot.scores};
    chunk_output<1, kStateWarps>(view, slot.v, warp, lane, valid, p.scale, [&](int r, int c, float a, float b) {
      store_pair(out, static_cast<float*>(nullptr), r * p.o.stride_time + c, a, b);
    });
    phases.mark(kGlaPipelinedOutput);
    S.advance(slot.inverse, slot.decay_all, slot.v, lane, true);
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
